"""Outbox records a store writes itself, in the transaction that makes their fact.

A case finished by recovery (``recover_expired``, ``retire``) never reaches the
engine's post-finish hook, yet the collector must hear of it (DESIGN.md rule 9:
a case in flight when its process died is ``indeterminate``, with what is known
of it). With ``report=True`` those methods write this record beside the
outcome, so the outcome is never recorded without its report.

Content-free, like every ``case_result``: ids, the outcome, costs with their
coverage, the incumbent's figures. The case's ``error`` text is not copied.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from sidecar.store.records import OutboxRecord
from uplink.schema import CaseCost, CaseResult, Coverage, encode_record

#: The columns :func:`indeterminate_record` reads, for a ``cases c JOIN trials t`` query.
COLUMNS = (
    "c.id, c.trial_id, c.exchange_id, c.charged_micros, c.candidate_cost_coverage, c.finished_at, "
    "c.incumbent_latency_ms, c.incumbent_cost_micros, c.incumbent_cost_coverage, "
    "t.team, t.judge_version_id, t.gateway"
)
#: The cases recovery just finished, with their trials (a list of case ids).
FINISHED = f"SELECT {COLUMNS} FROM cases c JOIN trials t ON t.id = c.trial_id WHERE c.id IN ?[]"
_COVERAGES = ("complete", "partial", "unknown")


def _cost(micros: int | None, coverage: Any) -> CaseCost:
    cov = cast(Coverage, coverage if coverage in _COVERAGES else "unknown")
    return CaseCost(micros=None if cov == "unknown" else micros, coverage=cov)


def indeterminate_record(row: Mapping[str, Any]) -> OutboxRecord:
    """The ``case_result`` of a case recovery finished as ``indeterminate``.

    A case that dispatched may have been billed: its candidate and judge costs are
    unknown (its reservation is held). One that never dispatched called nothing: zero,
    known."""
    dispatched = row["candidate_cost_coverage"] == "unknown"
    nothing = CaseCost(micros=0, coverage="complete")
    record = CaseResult(
        id=f"case:{row['id']}",
        trial_id=row["trial_id"],
        case_id=row["id"],
        exchange_id=row["exchange_id"],
        team=row["team"],
        outcome="indeterminate",
        finished_at=row["finished_at"],
        judge_version_id=row["judge_version_id"],
        candidate_cost=CaseCost() if dispatched else nothing,
        judge_cost=CaseCost() if dispatched else nothing,
        incumbent_cost=_cost(row["incumbent_cost_micros"], row["incumbent_cost_coverage"]),
        charged_micros=row["charged_micros"] or 0,
        incumbent_latency_ms=row["incumbent_latency_ms"],
        gateway=row["gateway"],
    )
    return OutboxRecord(record_id=record.id, topic="case_result", body=encode_record(record).decode())
