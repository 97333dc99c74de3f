"""``shadowtrial serve`` with ``[uplink]``, SIGKILLed while a batch is in flight (stored by the
collector, its answer not yet received), then restarted: nothing is lost, nothing is held twice."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

from sidecar.demo.fake_provider import FakeProvider
from sidecar.store import make_store
from tests.harness import exchange, wait_for, write_config
from tests.sidecar.test_lifecycle import ServerProcess, fake_and_servers, start_server  # noqa: F401
from tests.uplink.kit import UplinkKit


async def test_sigkill_with_a_batch_in_flight_loses_and_duplicates_nothing(
    tmp_path: Path, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    fake, servers = fake_and_servers
    kit = UplinkKit(tmp_path)
    async with kit.collector() as c:
        config = write_config(tmp_path, fake.base_url, extra=kit.uplink_toml(c.url, batch_size=5),
                              lease_seconds=1.0, journal_dir=str(tmp_path / "journal"))
        server, client = await start_server(servers, config, tmp_path)
        try:
            trial = await client.create_trial()
            kit.gate = asyncio.Event()
            await client.send([exchange(i) for i in range(30)])

            async def in_flight() -> bool:
                return kit.held_answers >= 1

            await wait_for(in_flight, what="a batch stored by the collector, its answer held back")
            server.signal(signal.SIGKILL)
            await server.wait(10)
        finally:
            await client.aclose()
        assert kit.gate is not None
        kit.gate.set()
        kit.gate = None
        stored_before = len(kit.held())
        server, client = await start_server(servers, config, tmp_path)
        try:
            await client.send([exchange(i) for i in range(30, 40)])
            store = make_store(str(tmp_path / "trials.db"))
            await store.open()
            try:
                async def settled() -> bool:
                    cases = await store.cases(trial)
                    done = len(cases) >= 40 and all(c["state"] == "finished" for c in cases)
                    return done and await store.outbox_depth() == 0

                await wait_for(settled, timeout=60, what="every case finished and the outbox empty")
                cases = await store.cases(trial)
            finally:
                await store.close()
        finally:
            await client.aclose()
            server.signal(signal.SIGTERM)
            await server.wait(30)
    held = [rid for rid, _ in kit.held()]
    received = [r["id"] for b in kit.bodies for r in json.loads(b)["records"]]
    recovered = {f"case:{x['id']}" for x in cases if x["outcome"] == "indeterminate"}
    expected = {f"case:{x['id']}" for x in cases}  # recovered ones too: recovery writes their results
    print(f"\nSIGKILL: {stored_before} records held at the kill; after restart {len(held)} held "
          f"({len(set(held))} distinct), {len(received)} received ({len(received) - len(set(received))} re-sent); "
          f"{len(cases)} cases, {len(recovered)} recovered indeterminate")
    assert len(held) == len(set(held)), "nothing held twice"
    assert expected <= set(held), f"lost: {sorted(expected - set(held))}"
    assert len(set(held)) == len(cases), "one record per case, no other case_result"
    outcomes = {rid: json.loads(body)["outcome"] for rid, body in kit.held()}
    assert all(outcomes[rid] == "indeterminate" for rid in recovered)
