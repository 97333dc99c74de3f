"""Small builders for store records, with defaults a test overrides by keyword."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from sidecar.store.records import CaseFinish, CaseStart, JudgmentRow, LedgerEntry, OutboxRecord, TrialRecord

BASE_TRIAL = TrialRecord(
    id="t1", team="team-a", incumbent_model="inc", candidate_model="cand", route=None, gateway="gw-1",
    sample_rate=0.25, cap_micros=1_000_000, expected_cases=400, delta=0.05, min_cases=20, audit_share=0.1,
    candidate_max_tokens=512, candidate_price_in=500_000, candidate_price_out=2_000_000, judge_price_in=1_000_000,
    judge_price_out=4_000_000, incumbent_price_in=None, incumbent_price_out=None, judge_model="judge",
    judge_version_id="jv-1", judge_version_name="pairwise-v1", judge_spec_json='{"rubric": "r"}',
    execution_site="local", prompt_retention=True, created_at=1000.0,
)


def trial(trial_id: str = "t1", **kw: Any) -> TrialRecord:
    return replace(BASE_TRIAL, id=trial_id, **kw)


def start(case_id: str, trial_id: str = "t1", exchange_id: str | None = None, owner: str = "A", **kw: Any) -> CaseStart:
    values: dict[str, Any] = dict(
        case_id=case_id, trial_id=trial_id, exchange_id=exchange_id or f"x-{case_id}", owner=owner,
        incumbent_latency_ms=120.0, incumbent_output_tokens=40, incumbent_cost_micros=300,
        incumbent_cost_coverage="complete", created_at=1001.0,
    )
    values.update(kw)
    return CaseStart(**values)


def judgment(judgment_id: str, case_id: str, trial_id: str = "t1", **kw: Any) -> JudgmentRow:
    values: dict[str, Any] = dict(
        judgment_id=judgment_id, case_id=case_id, trial_id=trial_id, judge_version_id="jv-1",
        order="candidate_first", is_audit=False, outcome="verdict", score=1, strong=False, winner_slot="A",
        error=None, longer_won=None, created_at=1002.0,
    )
    values.update(kw)
    return JudgmentRow(**values)


def finish(case_id: str, trial_id: str = "t1", *, charged: int = 0, outcome: str = "judged", **kw: Any) -> CaseFinish:
    values: dict[str, Any] = dict(
        case_id=case_id, trial_id=trial_id, outcome=outcome, charged_micros=charged, known_micros=charged,
        unknown_calls=0, priced_calls=2, candidate_cost_micros=charged, candidate_cost_coverage="complete",
        judge_cost_micros=0, judge_cost_coverage="complete", candidate_latency_ms=150.0,
        candidate_output_tokens=50, score=1.0 if outcome == "judged" else None, error=None, finished_at=1003.0,
    )
    values.update(kw)
    return CaseFinish(**values)


def effect(record_id: str, body: str = "{}") -> OutboxRecord:
    return OutboxRecord(record_id=record_id, topic="case", body=body)


def replay(entries: list[LedgerEntry], cap: int) -> tuple[int, int]:
    """Replay a ledger in seq order, asserting the cap at every prefix; (spent, reserved) at the end."""
    spent = reserved = 0
    last = 0
    for e in entries:
        assert e.seq > last, "ledger seq must increase"
        last = e.seq
        if e.kind in ("reserve", "top_up"):
            reserved += e.micros
        elif e.kind == "release":
            reserved -= e.micros
        elif e.kind in ("charge", "hold_unknown"):
            spent += e.micros
        else:
            raise AssertionError(f"unknown ledger kind {e.kind!r}")
        assert reserved >= 0, f"reservation negative after seq {e.seq}"
        assert spent + reserved <= cap, f"cap passed after seq {e.seq}: {spent} + {reserved} > {cap}"
    return spent, reserved
