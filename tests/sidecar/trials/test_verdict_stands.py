"""A decision, once reached, stands on the next read and after a restart (issue 7, item 2).

A real sidecar judges real cases through the fake provider. The outcome of each
case is planted: the candidate always answers at quality 0.5 (no noise) and
each exchange's incumbent answer carries 0.0 (the candidate wins), 1.0 (the
incumbent wins) or 0.5 (a tie), so the deterministic fake judge gives exactly
the counts below. No audits, so each case is one judgment.

The counts are chosen with the policies: 43 wins, 11 ties and 16 losses, in the order
``mixed`` gives, decide ``not_worse`` (Adoptable: not worse by more than the tolerance, issue
23) on the betting sequence the trial folds case by case (issue 31); after 10 more losses the
interval of the last case alone reaches below 0.45 (-tolerance), so a fold that started from
scratch at that case would say *Collecting* again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from policies.stream import fold_cases
from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for

WIN, TIE, LOSS = "0.000", "0.500", "1.000"


def models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(quality=0.5),
        CANDIDATE: FakeModel(quality=0.5, quality_noise=0.0),
        JUDGE: FakeModel(judge=True),
    }


def planted(i: int, incumbent_quality: str) -> dict[str, Any]:
    return exchange(i, content=f"incumbent answer {i} ⟨q={incumbent_quality}⟩")


def mixed(wins: int, ties: int, losses: int) -> list[str]:
    """The outcomes spread evenly (largest deficit first), so every prefix the
    engine finishes, and every read folds, has about the final mix."""
    want = {WIN: wins, TIE: ties, LOSS: losses}
    total = sum(want.values())
    done = dict.fromkeys(want, 0)
    out: list[str] = []
    for k in range(1, total + 1):
        kind = max(want, key=lambda q: want[q] * k / total - done[q])
        done[kind] += 1
        out.append(kind)
    assert done == want
    return out


async def _stored_state(h: Harness, trial_id: str) -> dict[str, Any]:
    record = await h.runtime.store.get_trial(trial_id)
    assert record is not None and record.sequence_state is not None
    state: dict[str, Any] = json.loads(record.sequence_state)
    return state


SCORE = {WIN: 1.0, TIE: 0.0, LOSS: -1.0}
LOSSES = 10


def _now_lower(outcomes: list[str]) -> float:
    """The last case's own betting interval's lower bound, folding ``outcomes`` in order."""
    folded = fold_cases(None, [(i, SCORE[q]) for i, q in enumerate(outcomes, 1)], alpha=0.05, tolerance=0.05,
                        min_cases=20, expected_cases=1000)
    return folded.state.now[0]


async def test_a_reached_decision_stands_after_an_adverse_case_and_a_restart(tmp_path: Path) -> None:
    outcomes = mixed(43, 11, 16)
    async with Harness(tmp_path, models=models()) as h:
        trial = await h.create_trial(audit_share=0.0)
        tid = trial["id"]
        await h.send([planted(i, q) for i, q in enumerate(outcomes)])
        view = await h.settle(tid, len(outcomes))
        v = view["verdict"]
        assert (v["cases"], v["code"], v["wording"]) == (70, "not_worse", "Adoptable")
        assert v["decision_bounds"]["lower"] > 0.45 and v["contradicted"] is False and v["restarts"] == 0
        decided_at = v["decided_at"]
        assert decided_at is not None and decided_at <= 70

        # 10 more losses: the last case's own interval reaches below -tolerance; the kept decision stands.
        assert _now_lower(outcomes + [LOSS] * (LOSSES - 1)) >= 0.45 > _now_lower(outcomes + [LOSS] * LOSSES)
        await h.send([planted(70 + k, LOSS) for k in range(LOSSES)])
        view = await h.settle(tid, 70 + LOSSES)
        v = view["verdict"]
        assert v["cases"] == 80 and v["mean_score"] == (43 - 16 - LOSSES) / 80
        assert v["decision_bounds_now"]["lower"] < 0.45 < v["decision_bounds"]["lower"]
        assert (v["code"], v["wording"], v["decided_at"], v["contradicted"]) == (
            "not_worse", "Adoptable", decided_at, False
        )
        assert h.admin is not None
        listed = (await h.admin.get("/v1/trials")).json()["trials"]
        assert [(t["id"], t["verdict"]["code"]) for t in listed] == [(tid, "not_worse")]
        state = await _stored_state(h, tid)
        assert state["cursor"] == 80
        assert (state["sequence"]["n"], state["sequence"]["decision"], state["sequence"]["decided_at"]) == (
            80, "not_worse", decided_at)
        health = view["judge_health"]
        assert health["decisive"] == 69 and health["state"]["decisive"] == 69  # 43 wins + 26 losses
        record = await h.runtime.store.get_trial(tid)
        assert record is not None and json.loads(record.judge_health_state or "{}")["decisive"] == 69

    # A restart of the sidecar on the same SQLite file: the kept intersection is read back.
    async with Harness(tmp_path, models=models()) as h:
        view = await h.trial(tid)
        v = view["verdict"]
        assert (v["cases"], v["code"], v["decided_at"]) == (80, "not_worse", decided_at)

        await h.send([planted(80, LOSS)])
        view = await h.settle(tid, 81)
        v = view["verdict"]
        assert v["cases"] == 81 and v["decision_bounds_now"]["lower"] < 0.45
        assert (v["code"], v["wording"], v["decided_at"], v["restarts"]) == (
            "not_worse", "Adoptable", decided_at, 0
        )
        assert h.admin is not None
        live = (await h.admin.get("/v1/live")).json()
        assert [t["verdict"]["code"] for t in live["running_trials"]] == ["not_worse"]
        state = await _stored_state(h, tid)
        assert (state["cursor"], state["sequence"]["decision"], state["sequence"]["decided_at"]) == (
            81, "not_worse", decided_at)


async def test_the_engine_keeps_the_verdict_state_though_nobody_reads_the_trial(tmp_path: Path) -> None:
    """The engine folds what it judged into the kept state every refresh interval (and at
    stop), so the standing decision does not depend on how often an operator looks."""
    async with Harness(tmp_path, refresh_seconds=0.2) as h:
        trial = await h.create_trial()
        await h.send([exchange(i) for i in range(25)])
        await h.runtime.idle()

        async def kept() -> bool:
            record = await h.runtime.store.get_trial(trial["id"])  # a store read: folds nothing itself
            return record.sequence_state is not None and json.loads(record.sequence_state)["cursor"] == 25

        await wait_for(kept, timeout=10, what="the engine to fold 25 judged cases", wake=h.runtime.progress)
        record = await h.runtime.store.get_trial(trial["id"])
        assert record.judge_health_state is not None
