"""What the stores do, identically, with a watch step inside the finishing transaction.

The rule is :func:`policies.cusum.step`; this module only moves the stored columns in and
out of it, and words the alert's evidence. Both stores call :func:`apply_step` on the
columns they read under their write lock (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's
``SELECT ... FOR UPDATE``), so two sidecars finishing cases of one watch at once step it
one after the other, never from the same state.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from policies import cusum

#: Columns of a watch row the step reads.
STATE_COLUMNS = "design_json, statistic, judged, decisive, fired_at, old_wins, new_wins, ties, team"


@dataclass(frozen=True, slots=True)
class Stepped:
    state: cusum.CusumState
    old_wins: int
    new_wins: int
    ties: int
    fired_now: bool
    evidence: dict[str, Any]


def alert_id(watch_id: str) -> str:
    """A watch's detector fires at most once (it stays fired), so its alert has one id."""
    return f"{watch_id}.alert"


def transition_id(alert: str, state: str) -> str:
    return f"{alert}:{state}"


def apply_step(row: Mapping[str, Any], observation: str, *, case_id: str, at: float) -> Stepped:
    design = cusum.CusumDesign.from_dict(json.loads(row["design_json"]))
    before = cusum.CusumState(
        statistic=int(row["statistic"]), judged=int(row["judged"]), decisive=int(row["decisive"]),
        fired_at=None if row["fired_at"] is None else int(row["fired_at"]),
    )
    after = cusum.step(design, before, observation)  # type: ignore[arg-type]
    old = int(row["old_wins"]) + (observation == "old_wins")
    new = int(row["new_wins"]) + (observation == "new_wins")
    ties = int(row["ties"]) + (observation == "tie")
    fired_now = after.fired and not before.fired
    decisive = old + new
    evidence = {
        "statistic": after.statistic * design.unit,
        "threshold": design.threshold_llr,
        "statistic_units": after.statistic,
        "threshold_units": design.threshold,
        "judged": after.judged,
        "decisive": after.decisive,
        "old_wins": old,
        "new_wins": new,
        "ties": ties,
        "old_win_rate": None if decisive == 0 else old / decisive,
        "baseline": design.baseline,
        "alternative": design.alternative,
        "min_judged": design.min_judged,
        "arl0": design.arl0,
        "case_id": case_id,
        "at": at,
    }
    return Stepped(after, old, new, ties, fired_now, evidence)
