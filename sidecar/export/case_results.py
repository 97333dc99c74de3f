"""The uplink's post-finish hook: each finished case becomes one ``case_result`` record.

Installed by the runtime when ``[uplink]`` names a collector. The record is
written as an :class:`~sidecar.store.records.OutboxRecord` in the same
transaction as the case's outcome (``CaseFinish.effects``), so a recorded
result is never without its outbox record, and vice versa.

Content-free by construction: ids, the funnel outcome, scores, costs with
coverage, latencies. Free-form texts of the case (its ``error``, a judgment's
error message) are never copied; a judgment error is sent as the kind
``judge_error`` only.

A module-level function, so it pickles into the engine's own process.
"""

from __future__ import annotations

from typing import cast

from sidecar.engine.subjects import Subject
from sidecar.store.records import CaseFinish, Effect, OutboxRecord
from uplink.schema import CaseCost, CaseJudgment, CaseResult, Coverage, encode_record

TOPIC = "case_result"
_COVERAGES = ("complete", "partial", "unknown")


def _cost(micros: int | None, coverage: str) -> CaseCost:
    cov = cast(Coverage, coverage if coverage in _COVERAGES else "unknown")
    return CaseCost(micros=None if cov == "unknown" else micros, coverage=cov)


def case_result(subject: Subject, finish: CaseFinish) -> CaseResult:
    """The content-free record of ``finish``."""
    rec = subject.record
    judgments = [
        CaseJudgment(
            order="candidate_first" if j.order == "candidate_first" else "incumbent_first",
            outcome="verdict" if j.outcome == "verdict" else "error",
            audit=j.is_audit, score=j.score, strong=j.strong,
            error="judge_error" if j.outcome != "verdict" else None,
        )
        for j in finish.judgments
    ]
    return CaseResult(
        id=f"case:{finish.case_id}",
        trial_id=finish.trial_id,
        case_id=finish.case_id,
        exchange_id=finish.exchange_id,
        team=rec.team,
        outcome=finish.outcome,
        finished_at=finish.finished_at,
        judge_version_id=rec.judge_version_id,
        judgments=judgments,
        score=finish.score,
        candidate_cost=_cost(finish.candidate_cost_micros, finish.candidate_cost_coverage),
        judge_cost=_cost(finish.judge_cost_micros, finish.judge_cost_coverage),
        incumbent_cost=_cost(finish.incumbent_cost_micros, finish.incumbent_cost_coverage),
        charged_micros=finish.charged_micros,
        candidate_latency_ms=finish.candidate_latency_ms,
        incumbent_latency_ms=finish.incumbent_latency_ms,
        gateway=rec.gateway,
    )


def uplink_case_result(subject: Subject, finish: CaseFinish) -> tuple[Effect, ...]:
    """The :data:`~sidecar.engine.subjects.FinishHook` the runtime installs with ``[uplink]``."""
    if subject.kind not in ("trial", "replay"):  # a replay trial is a trial: traffic evidence
        return ()
    record = case_result(subject, finish)
    return (OutboxRecord(record_id=record.id, topic=TOPIC, body=encode_record(record).decode()),)
