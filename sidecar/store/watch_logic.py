"""What the stores do, identically, with a watch step inside the finishing transaction.

The rule is :func:`policies.cusum.step`; this module only moves the stored columns in and
out of it, and words the alert's evidence. Both stores call :func:`apply_step` on the
columns they read under their write lock (SQLite's ``BEGIN IMMEDIATE``, PostgreSQL's
``SELECT ... FOR UPDATE``), so two sidecars finishing cases of one watch at once step it
one after the other, never from the same state.

Resolving an alert re-arms its watch (issue 23, item 5): both stores apply
:data:`REARM_COLUMNS` in the resolving transaction, so the detector starts a new period
from a zero state, and the next alarm is a new alert with its own id (:func:`alert_id`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from sidecar.store.records import OutboxRecord
from sidecar.store.watch_records import AlertStatus
from uplink.schema import AlertRecord, encode_record

if TYPE_CHECKING:
    from policies import cusum  # numpy: imported at the first step, not with the store

#: Columns of a watch row the step reads.
STATE_COLUMNS = "design_json, statistic, judged, decisive, fired_at, old_wins, new_wins, ties, team, period"

#: What re-arming sets on the watch row (the same in both dialects, no placeholders): a zero
#: detector state and zero period counts; the judged cases so far move to ``judged_before``.
#: The period number, its start and (optionally) its design are set beside it.
REARM_COLUMNS = ("judged_before = judged_before + judged, statistic = 0, judged = 0, decisive = 0, "
                 "fired_at = NULL, old_wins = 0, new_wins = 0, ties = 0, period = period + 1")

#: The uplink topic of alert transitions.
ALERT_TOPIC = "alert"


@dataclass(frozen=True, slots=True)
class Stepped:
    state: cusum.CusumState
    old_wins: int
    new_wins: int
    ties: int
    fired_now: bool
    evidence: dict[str, Any]


def alert_id(watch_id: str, period: int = 1) -> str:
    """A watch's detector fires at most once per period (it stays fired until its alert is
    resolved, which starts the next period), so each period's alert has one id: period 1's
    is ``<watch>.alert`` (as before periods existed), period n's ``<watch>.alert.<n>``."""
    return f"{watch_id}.alert" if period == 1 else f"{watch_id}.alert.{period}"


def alert_outbox(alert: str, *, watch_id: str, team: str, state: AlertStatus, at: float) -> OutboxRecord:
    """The uplink's content-free record of one alert transition."""
    record = AlertRecord(id=f"alert:{alert}:{state}", alert_id=alert, watch_id=watch_id, team=team, state=state, at=at)
    return OutboxRecord(record_id=record.id, topic=ALERT_TOPIC, body=encode_record(record).decode())


def design_baseline(design_json: str) -> float:
    """The baseline a stored design was made for (the watch row keeps it in its own column)."""
    return float(json.loads(design_json)["baseline"])


def transition_id(alert: str, state: str) -> str:
    return f"{alert}:{state}"


def apply_step(row: Mapping[str, Any], observation: str, *, case_id: str, at: float) -> Stepped:
    from policies import cusum

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
        "period": int(row["period"]),
        "case_id": case_id,
        "at": at,
    }
    return Stepped(after, old, new, ties, fired_now, evidence)
