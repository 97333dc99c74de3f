"""A sidecar SIGKILLed while claims of a control-plane trial wait in its forwarder (sampled, the
tap answered, not yet in the outbox), then restarted: every one reaches the collector and is
judged there exactly once; none is judged at the sidecar, none is lost uncounted.

The forwarder is held back by another process keeping the sidecar's SQLite store locked, so the
claims sit in memory and in the forwarder's intake journal when the kill comes.
"""

from __future__ import annotations

import signal
import sqlite3
from collections import Counter
from pathlib import Path

from sidecar.demo.fake_provider import FakeProvider
from tests.harness import CANDIDATE, exchange, wait_for, write_config
from tests.sidecar.test_lifecycle import ServerProcess, fake_and_servers, start_server  # noqa: F401
from tests.uplink.kit import UplinkKit
from tests.uplink.test_control_plane_e2e import TEAM_POSTURE, Collector, sidecar_toml


async def test_sigkill_with_forwarded_claims_not_yet_in_the_outbox_loses_none(
    tmp_path: Path, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    fake, servers = fake_and_servers
    kit = UplinkKit(tmp_path, content_teams=("team-a",))
    async with Collector(kit, tmp_path / "collector") as c:
        config = write_config(tmp_path, fake.base_url, extra=sidecar_toml(kit, c.url), lease_seconds=1.0,
                              journal_dir=str(tmp_path / "journal"), store_extra="lock_timeout_seconds = 0.3")
        server, client = await start_server(servers, config, tmp_path)
        try:
            r = await client.admin.put(TEAM_POSTURE, json={"prompt_retention": True, "cut_over": True})
            assert r.status_code == 200 and r.json()["execution_site"] == "control_plane", r.text
            trial = await client.create_trial()
            holder = sqlite3.connect(tmp_path / "trials.db", isolation_level=None)
            holder.execute("BEGIN EXCLUSIVE")  # the forwarder cannot write to the outbox now
            try:
                reply = await client.send([exchange(i) for i in range(25)])
                assert (reply["sampled"], reply["shed"]) == (25, 0)
                journal = tmp_path / "journal" / "forward"
                assert any(p.stat().st_size > 0 for p in journal.glob("segment-*.bin")), "journaled before the answer"
                server.signal(signal.SIGKILL)
                await server.wait(10)
            finally:
                holder.execute("ROLLBACK")
                holder.close()
        finally:
            await client.aclose()
        assert c.server and c.server.store
        assert await c.cases(trial) == [], "nothing reached the collector before the kill"

        server, client = await start_server(servers, config, tmp_path)
        try:
            async def judged_once() -> bool:
                cases = await c.cases(trial)
                return len(cases) >= 25 and all(x["state"] == "finished" for x in cases)

            await wait_for(judged_once, timeout=60, what="the 25 forwarded exchanges judged at the collector")
        finally:
            await client.aclose()
            server.signal(signal.SIGTERM)
            await server.wait(30)
        cases = await c.cases(trial)
        held = [rid for rid, _ in kit.held("exchange")]
    exchanges = sorted(str(x["exchange_id"]) for x in cases)
    print(f"\nforwarder SIGKILL: 25 sampled, {len(held)} exchange records held at the collector, {len(cases)} cases "
          f"there {dict(Counter(str(x['outcome']) for x in cases))}; sidecar candidate calls {fake.calls[CANDIDATE]}")
    assert exchanges == sorted(f"ex-{i}" for i in range(25)), "each exactly once"
    assert len(held) == len(set(held)) == 25
    assert fake.calls[CANDIDATE] == 0, "the sidecar judged a control-plane case"
