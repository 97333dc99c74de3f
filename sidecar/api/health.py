"""Judge health of a trial, from its stored judgment rows (DESIGN.md section 7)."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from policies.judge_health import SlotJudgment, judge_health
from sidecar.store.records import JudgmentRow


def slot_judgment(row: JudgmentRow) -> SlotJudgment:
    """A stored judgment in presentation terms (which slot held the candidate, which slot won)."""
    candidate_slot = "A" if row.order == "candidate_first" else "B"
    if row.outcome != "verdict":
        winner = "error"
    elif row.winner_slot in ("A", "B"):
        winner = row.winner_slot
    else:
        winner = "tie"
    return SlotJudgment(
        case_id=row.case_id,
        candidate_slot=candidate_slot,  # type: ignore[arg-type]
        winner=winner,  # type: ignore[arg-type]
        audit=row.is_audit,
        longer_won=row.longer_won,
        strong=row.strong,
    )


def judge_health_view(rows: Sequence[JudgmentRow]) -> dict[str, Any]:
    return dataclasses.asdict(judge_health([slot_judgment(r) for r in rows]))
