"""Two collectors on one PostgreSQL share a control-plane trial (issue 25 item 4): the sidecar
delivers to one of them, both engines lease the stored exchanges (``FOR UPDATE SKIP LOCKED``),
each exchange is judged once — the candidate called at most once per exchange across both
collectors' providers — and the funnel adds up to what was sampled."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, Harness, exchange, wait_for
from tests.pg import PostgresServer
from tests.uplink.kit import UplinkKit
from tests.uplink.test_control_plane_e2e import Collector, _cut_over, sidecar_toml

N = 100


async def test_two_collectors_share_a_control_plane_trials_exchanges_each_judged_once(
    tmp_path: Path, pg_server: PostgresServer
) -> None:
    dsn = pg_server.create_database()
    kit = UplinkKit(tmp_path, content_teams=("team-a",))
    async with Collector(kit, tmp_path / "c1", store_url=dsn) as c1, \
            Collector(kit, tmp_path / "c2", store_url=dsn) as c2:
        for c in (c1, c2):
            assert c.fake is not None
            c.fake.models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=(30.0, 80.0))
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c1.url), refresh_seconds=0.2) as h:
            await _cut_over(h, True)
            tid = (await h.create_trial(audit_share=0.0))["id"]
            for start in range(0, N, 20):
                assert (await h.send([exchange(i) for i in range(start, start + 20)]))["sampled"] == 20

            async def all_finished() -> bool:
                cases = await c1.cases(tid)
                return len(cases) == N and all(x["state"] == "finished" for x in cases)

            await wait_for(all_finished, timeout=90, what=f"{N} cases finished between the two collectors")
            cases = await c1.cases(tid)
            view = await c1.trial(tid)
    assert c1.fake is not None and c2.fake is not None
    calls = {"c1": c1.fake.calls[CANDIDATE], "c2": c2.fake.calls[CANDIDATE]}
    per_exchange: Counter[str] = Counter()
    for fake in (c1.fake, c2.fake):
        for q in fake.requests:
            if q.model == CANDIDATE:
                per_exchange[str(q.body["messages"][-1]["content"])] += 1
    outcomes = Counter(str(x["outcome"]) for x in cases)
    print(f"\ncontrol plane on two collectors: {N} exchanges; candidate calls {calls}; outcomes {dict(outcomes)}")
    assert sorted(str(x["exchange_id"]) for x in cases) == sorted(f"ex-{i}" for i in range(N))
    assert max(per_exchange.values()) == 1, "no exchange's candidate called twice"
    assert sum(calls.values()) == outcomes["judged"] + outcomes["judge_failed"] + outcomes["candidate_failed"]
    assert calls["c1"] > 0 and calls["c2"] > 0, "both collectors ran cases of the trial"
    assert view is not None and sum(view["funnel"].values()) == N
