"""The case pipeline's seams, end to end on the embedded store: the cap is used,
the post-finish hook writes with the outcome, a trial created on a peer is
picked up, two peers never judge one exchange twice, and a trial pinned to
another execution site never runs here.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from sidecar.engine.subjects import Subject
from sidecar.store.records import CaseFinish, LedgerEntry, OutboxRecord
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for


def ledger_peak(entries: list[LedgerEntry]) -> tuple[int, int]:
    """Replay the spend ledger in commit order: (peak of charged + reserved, final charged)."""
    sign = {"reserve": 1, "top_up": 1, "release": -1, "charge": 1, "hold_unknown": 1}
    running = peak = charged = 0
    for e in entries:
        running += sign[e.kind] * e.micros
        peak = max(peak, running)
        if e.kind in ("charge", "hold_unknown"):
            charged += e.micros
    return peak, charged


async def test_a_tight_cap_is_used_before_the_trial_ends(tmp_path: Path) -> None:
    """Cap = 20 worst cases, 600 exchanges at once: the trial ends cap_reached only once
    less than a typical case is left, having charged at least 90% of (cap - one worst case)."""
    async with Harness(tmp_path, workers=16, queue_size=1000) as h:
        # One case alone tells what a case's worst case is (audit off: every case alike).
        probe = await h.create_trial(spend_cap_usd=10.0, audit_share=0.0)
        await h.send([exchange(0)])
        await h.settle(probe["id"], 1)
        worst = next(e.micros for e in await h.runtime.store.ledger(probe["id"]) if e.kind == "reserve")
        await h.admin.post(f"/v1/trials/{probe['id']}/stop")  # type: ignore[union-attr]

        cap = 20 * worst
        trial = await h.create_trial(spend_cap_usd=cap / 1_000_000, audit_share=0.0)
        assert trial["spend"]["cap_micros"] == cap
        reply = await h.send([exchange(1000 + i) for i in range(600)])
        assert reply == {"accepted": 600, "sampled": 600, "shed": 0}
        view = await h.settle(trial["id"], 600, timeout=120)

        outcomes = view["funnel"]["outcomes"]
        spend = view["spend"]
        peak, charged = ledger_peak(await h.runtime.store.ledger(trial["id"]))
        print(f"\ncap {cap} µ$ = 20 × {worst} µ$: charged {spend['charged_micros']} µ$ "
              f"({spend['charged_micros'] / (cap - worst):.1%} of cap - one worst case), judged {outcomes['judged']}, "
              f"cap_reached {outcomes['cap_reached']}, shed_cap_busy {outcomes['shed_cap_busy']}, ledger peak {peak} µ$")
        assert view["status"] == "cap_reached"
        assert view["status_reason"] == "the remaining cap cannot cover a typical case"
        assert spend["charged_micros"] >= 0.9 * (cap - worst)
        assert spend["charged_micros"] <= cap and peak <= cap
        assert charged == spend["charged_micros"] and spend["reserved_micros"] == 0
        assert view["funnel"]["total"] == 600 == sum(outcomes.values())
        assert outcomes["judged"] > 0 and outcomes["cap_reached"] > 0
        # Every sampled case ended either run or refused by the cap: none was shed for another reason.
        assert outcomes["judged"] + outcomes["judge_failed"] + outcomes["candidate_failed"] + outcomes["cap_reached"] == 600, outcomes


async def test_the_post_finish_hook_writes_in_the_finishing_transaction(tmp_path: Path) -> None:
    seen: list[str] = []

    def report(subject: Subject, finish: CaseFinish) -> tuple[OutboxRecord, ...]:
        seen.append(finish.case_id)
        body = json.dumps({"trial": subject.id, "kind": subject.kind, "outcome": finish.outcome, "score": finish.score})
        return (OutboxRecord(record_id=f"case:{finish.case_id}", topic="case_finished", body=body),)

    async with Harness(tmp_path, hooks=[report]) as h:
        trial = await h.create_trial()
        await h.send([exchange(i) for i in range(30)])
        await h.settle(trial["id"], 30)
        cases = {c["id"]: c for c in await h.runtime.store.cases(trial["id"])}
        records = await h.runtime.store.outbox()
        # One record per finished case, carrying that case's outcome; nothing more, nothing less.
        assert sorted(r.record_id for r in records) == sorted(f"case:{cid}" for cid in cases)
        assert sorted(seen) == sorted(cases)
        for r in records:
            body = json.loads(r.body)
            case = cases[r.record_id.removeprefix("case:")]
            assert (body["trial"], body["kind"], body["outcome"], body["score"]) == (
                trial["id"], "trial", case["outcome"], case["score"])
        assert all(json.loads(r.body)["outcome"] == "judged" for r in records)


async def peers(tmp_path: Path, **kw: Any) -> tuple[Harness, Harness]:
    db = str(tmp_path / "shared.db")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    # Peers on one SQLite file: each needs an intake journal of its own.
    return (Harness(tmp_path / "a", db=db, refresh_seconds=0.2, journal_dir=str(tmp_path / "a" / "intake"), **kw),
            Harness(tmp_path / "b", db=db, refresh_seconds=0.2, journal_dir=str(tmp_path / "b" / "intake"), **kw))


async def test_a_trial_created_on_a_peer_is_picked_up_and_each_exchange_judged_once(tmp_path: Path) -> None:
    a, b = await peers(tmp_path)
    async with a, b:
        trial = await a.create_trial()

        async def b_routes_it() -> bool:
            return trial["id"] in b.runtime.routing.current

        await wait_for(b_routes_it, timeout=10, what="the peer's refresh to route the new trial")
        # Every exchange is delivered to both sidecars: one case each, judged once.
        batch = [exchange(i) for i in range(40)]
        ra, rb = await a.send(batch), await b.send(batch)
        assert ra["sampled"] == rb["sampled"] == 40
        view = await a.settle(trial["id"], 40)
        await b.settle(trial["id"], 40)
        assert view["funnel"]["outcomes"]["judged"] == 40 and view["funnel"]["total"] == 40
        assert a.fake.calls[CANDIDATE] + b.fake.calls[CANDIDATE] == 40
        owners = {c["owner"] for c in await a.runtime.store.cases(trial["id"])}
        assert owners <= {a.runtime.engine.owner, b.runtime.engine.owner}

        # Stopped on one, it stops matching on the other at its next refresh.
        assert (await b.admin.post(f"/v1/trials/{trial['id']}/stop")).status_code == 200  # type: ignore[union-attr]

        async def a_dropped_it() -> bool:
            return trial["id"] not in a.runtime.routing.current

        await wait_for(a_dropped_it, timeout=10, what="the peer's refresh to drop the stopped trial")
        assert (await a.send([exchange(500)]))["sampled"] == 0


async def test_a_trial_pinned_to_another_site_never_runs_here(tmp_path: Path) -> None:
    async with Harness(tmp_path, refresh_seconds=0.2) as h:
        local = await h.create_trial()
        record = await h.runtime.store.get_trial(local["id"])
        assert record is not None and record.execution_site == "local"
        # A trial the control plane runs (written as a control-plane-site trial would be).
        elsewhere = dataclasses.replace(record, id="tr_control_plane", execution_site="control_plane")
        await h.runtime.store.create_trial(elsewhere)
        await h.admin.post(f"/v1/trials/{local['id']}/stop")  # type: ignore[union-attr]

        async def routed() -> bool:
            return "tr_control_plane" in h.runtime.routing.current

        await wait_for(routed, timeout=10, what="the refresh to route the control-plane trial")
        reply = await h.send([exchange(i) for i in range(5)])
        assert reply == {"accepted": 5, "sampled": 0, "shed": 5}
        view = await h.trial("tr_control_plane")
        assert view["funnel"]["outcomes"]["not_at_site"] == 5
        assert h.fake.calls[CANDIDATE] == 0 and h.fake.calls[JUDGE] == 0 and h.fake.calls[INCUMBENT] == 0


async def test_one_oversized_first_case_is_refused_alone_and_the_trial_runs_on(tmp_path: Path) -> None:
    """A first case whose worst case exceeds the whole cap is that case's cap_reached; it never
    becomes the trial's typical case, so the trial keeps running."""
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(spend_cap_usd=0.05)
        huge = exchange(0)
        huge["request"]["params"]["max_tokens"] = 2**31 - 1
        await h.send([huge])
        first = await h.settle(trial["id"], 1)
        assert first["funnel"]["outcomes"]["cap_reached"] == 1 and first["status"] == "running", first
        await h.send([exchange(i) for i in range(1, 6)])
        view = await h.settle(trial["id"], 6)
    assert view["status"] == "running"
    assert view["funnel"]["outcomes"]["judged"] == 5 and view["funnel"]["outcomes"]["cap_reached"] == 1
