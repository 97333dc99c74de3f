"""A fleet: three ``shadowtrial serve`` processes on one real PostgreSQL.

A trial created through one sidecar runs on all three; every exchange is
delivered twice, to two different sidecars, and is judged exactly once; the
funnel adds up to what was offered; a second trial with a tight cap is
shared by all three and its spend ledger, replayed in commit order, never
passes the cap. Then a fourth sidecar is SIGKILLed mid-run: only its in-flight
cases become ``indeterminate`` (once its lease has expired), the others go
on, and none of its cases is re-run.

Leases: a peer cannot tell a sidecar whose loop stalled past its lease (a loaded CI host)
from a dead one, and recovers its in-flight cases; with the 1 s lease every sidecar once
had, a stall of about a second turned judged cases into ``indeterminate`` ones. The three
sharing sidecars hold a lease of :data:`LEASE_S`; only the one killed holds the short
:data:`VICTIM_LEASE_S`, so its cases are recovered soon after its death.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

from sidecar.demo.fake_provider import FakeModel, FakeProvider
from sidecar.store import make_store
from tests.harness import CANDIDATE, INCUMBENT, exchange, wait_for, write_config
from tests.pg import PostgresServer
from tests.sidecar.test_lifecycle import (  # noqa: F401
    REAP_S, Client, ServerProcess, child_pids, fake_and_servers, start_server,
)
from tests.sidecar.test_pipeline import ledger_peak

#: The sharing sidecars' lease: a stall of a few seconds does not expire it (the heartbeat
#: renews it every third); their sweep, every half, recovers the victim's cases.
LEASE_S = 5.0
#: How long one sharing sidecar's engine is stopped mid-run (SIGSTOP), as a loaded host stalls
#: a process: longer than the old 1 s lease and its sweep, well short of :data:`LEASE_S`.
STALL_S = 2.0
#: The killed sidecar's lease: its cases are recovered about this long after its death.
VICTIM_LEASE_S = 1.0


async def running_trials(client: Client) -> int:
    text = (await client.admin.get("/metrics")).text
    m = re.search(r"^shadowtrial_running_trials (\d+)", text, re.M)
    assert m, text
    return int(m.group(1))


async def stall(server: ServerProcess, seconds: float) -> None:
    """Stop ``server``'s engine process (whose loop renews the lease) for ``seconds``."""
    assert server.proc is not None
    engines = child_pids(server.proc.pid)
    assert len(engines) == 1, f"expected the engine's own process, found {engines}"
    os.kill(engines[0], signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)  # the stall itself, not a wait for anything
    finally:
        os.kill(engines[0], signal.SIGCONT)


async def polled_view(client: Client, trial_id: str) -> dict[str, Any] | None:
    """A trial's view for a poll: ``None`` while the store is too busy to answer in time (503
    ``store_unavailable``, which a loaded machine's PostgreSQL gave under the fleet's locks);
    the poll asks again, within its own deadline."""
    r = await client.admin.get(f"/v1/trials/{trial_id}")
    if r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable":
        return None
    assert r.status_code == 200, r.text
    view: dict[str, Any] = r.json()
    return view


async def create(client: Client, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
        "spend_cap_usd": 10.0, "sample_rate": 1.0, "audit_share": 0.0,
        "on_decision": "continue",  # every sent case runs, whatever the verdict (issue 26's default stops)
    }
    body.update(over)
    r = await client.admin.post("/v1/trials", json=body)
    assert r.status_code == 201, r.text
    view: dict[str, Any] = r.json()
    return view


def candidate_calls(fake: FakeProvider) -> Counter[tuple[str, str]]:
    """Candidate calls per (trial, exchange id)."""
    out: Counter[tuple[str, str]] = Counter()
    for q in fake.requests:
        if q.model == CANDIDATE:
            trial = next(v for k, v in q.headers.items() if k.lower() == "x-shadowtrial-trial")
            out[(trial, "ex-" + q.body["messages"][0]["content"].removeprefix("question "))] += 1
    return out


async def test_three_sidecars_share_trials_caps_and_the_case_ledger(
    tmp_path: Path, pg_server: PostgresServer, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    fake, servers = fake_and_servers
    fake.models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=(5.0, 40.0))
    dsn = pg_server.create_database()
    config = write_config(tmp_path, fake.base_url, workers=8, lease_seconds=LEASE_S, refresh_seconds=0.2, store_url=dsn, isolation="process")
    clients = [(await start_server(servers, config, tmp_path))[1] for _ in range(3)]
    store = make_store(dsn)
    await store.open()
    try:
        # One trial with room for everything; one whose cap runs out (about 10 worst cases).
        wide = await create(clients[0])
        tight = await create(clients[1], spend_cap_usd=0.08)

        async def all_route_both() -> bool:
            return all([await running_trials(c) == 2 for c in clients])

        await wait_for(all_route_both, timeout=15, what="every sidecar to route both trials")

        # Every exchange goes to two different sidecars.
        n = 150
        sends = []
        for k in range(0, n, 25):
            batch = [exchange(i) for i in range(k, k + 25)]
            first = (k // 25) % 3
            sends += [clients[first].send(batch), clients[(first + 1) % 3].send(batch)]
        await asyncio.gather(*sends)

        # One sidecar's engine stalls mid-run: late, not dead; its peers leave its cases alone.
        # The stall proves most while every sidecar has cases in flight (the one stopped too).
        async def busy_everywhere() -> bool:
            cases = await store.cases(wide["id"])
            return len({c["owner"] for c in cases if c["state"] != "finished"}) == 3

        try:
            await wait_for(busy_everywhere, timeout=10, what="every sidecar with a case in flight")
        except AssertionError:
            pass  # the run is past that point (a slow machine): the stall below is still a stall
        await stall(servers[1], STALL_S)

        async def settled() -> bool:
            views = [await polled_view(clients[0], t["id"]) for t in (wide, tight)]
            return all(v is not None and v["funnel"]["total"] == n and v["funnel"]["in_flight"] == 0 for v in views)

        try:
            await wait_for(settled, timeout=180, what="both trials to account for every exchange")  # a bound: loaded CI
        except AssertionError:
            raise AssertionError([(await clients[0].trial(t["id"]))["funnel"] for t in (wide, tight)])
        w, t = await clients[2].trial(wide["id"]), await clients[2].trial(tight["id"])
        assert w["funnel"]["outcomes"]["judged"] == n == w["funnel"]["total"], w["funnel"]
        assert t["funnel"]["total"] == n and t["status"] == "cap_reached"
        assert t["funnel"]["outcomes"]["cap_reached"] > 0 and t["funnel"]["outcomes"]["judged"] > 0
        calls = candidate_calls(fake)
        assert all(calls[(wide["id"], f"ex-{i}")] == 1 for i in range(n)), "each exchange judged exactly once"
        assert all(calls[(tight["id"], f"ex-{i}")] <= 1 for i in range(n))
        owners = Counter(c["owner"] for c in await store.cases(wide["id"]))
        assert len(owners) == 3, f"all three sidecars ran cases: {owners}"
        peak, charged = ledger_peak(await store.ledger(tight["id"]))
        cap = t["spend"]["cap_micros"]
        print(f"\nfleet: {n} exchanges × 2 deliveries; tight trial cap {cap} µ$, ledger peak {peak} µ$, "
              f"charged {charged} µ$, judged {t['funnel']['outcomes']['judged']}; cases by sidecar {sorted(owners.values())}")
        assert peak <= cap and charged == t["spend"]["charged_micros"] <= cap

        # SIGKILL a sidecar with cases in flight (a fourth, started now with a short lease); its peers keep going.
        fake.models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=(1500.0, 1500.0))
        await clients[0].admin.post(f"/v1/trials/{tight['id']}/stop")
        (tmp_path / "victim").mkdir()
        victim_config = write_config(tmp_path / "victim", fake.base_url, workers=8, lease_seconds=VICTIM_LEASE_S,
                                     refresh_seconds=0.2, store_url=dsn, isolation="process")
        victim_server, victim_client = await start_server(servers, victim_config, tmp_path)
        clients.append(victim_client)

        async def victim_routes_wide() -> bool:
            return await running_trials(victim_client) == 1

        await wait_for(victim_routes_wide, timeout=15, what="the fourth sidecar to route the wide trial")
        doomed = [exchange(1000 + i) for i in range(8)]
        survivors = [exchange(2000 + i) for i in range(8)]
        await victim_client.send(doomed)
        await asyncio.gather(clients[0].send(survivors[:4]), clients[1].send(survivors[4:]))

        async def all_dispatched() -> bool:
            return sum(1 for (tr, _ex) in candidate_calls(fake) if tr == wide["id"]) >= n + 16

        await wait_for(all_dispatched, timeout=15, what="the 16 slow candidate calls")
        victim = next(c["owner"] for c in await store.cases(wide["id"]) if c["exchange_id"] == "ex-1000")
        victim_server.signal(9)
        await victim_server.wait(REAP_S)
        await victim_client.aclose()

        async def recovered() -> bool:
            cases = [c for c in await store.cases(wide["id"]) if c["exchange_id"] in {e["exchange_id"] for e in doomed + survivors}]
            return len(cases) == 16 and all(c["state"] == "finished" for c in cases)

        await wait_for(recovered, timeout=30, what="the peers' cases to finish and the victim's to be recovered")
        cases = {c["exchange_id"]: c for c in await store.cases(wide["id"])}
        for e in doomed:
            c = cases[e["exchange_id"]]
            assert (c["owner"], c["outcome"]) == (victim, "indeterminate"), c
        for e in survivors:
            c = cases[e["exchange_id"]]
            assert c["owner"] != victim and c["outcome"] == "judged", c
        # Nothing was re-run: one candidate call per (trial, exchange), ever.
        assert max(candidate_calls(fake).values()) == 1
        view = await clients[1].trial(wide["id"])
        assert view["funnel"]["outcomes"]["indeterminate"] == len(doomed)
        assert view["funnel"]["total"] == n + 16 and view["funnel"]["in_flight"] == 0
        assert view["spend"]["reserved_micros"] == 0
    finally:
        await store.close()
        for c in clients:
            try:
                await c.aclose()
            except httpx.HTTPError:
                pass
