"""Plain records of promotion, watches and alerts (DESIGN.md section 10). Content-free.

A watch's sentinel runs as rows of the ``trials`` table of ``kind = 'watch'``, one per UTC
day (its *day rows*): each day row's ``cap_micros`` is the watch's daily cap, so the cap
invariant of the case ledger (``spent + reserved <= cap``, one conditional update, a
constraint behind it) holds for each day exactly as it holds for a trial, with no code of
its own. A new day's row is inserted by :meth:`~sidecar.store.base.WatchStore.roll_watch_day`
(and yesterday's row stopped) in one transaction; a case keeps charging the row it reserved
against, so a case in flight across midnight counts against the day it started in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

WatchStatus = Literal["active", "stopped"]
AlertStatus = Literal["firing", "acknowledged", "resolved"]
Observation = Literal["old_wins", "new_wins", "tie"]


@dataclass(frozen=True, slots=True)
class WatchRecord:
    """A watch: the replaced model (``old_model``) kept as a sentinel against ``new_model``.

    The detector's design is ``design_json`` (:class:`policies.cusum.CusumDesign`); its state
    is the integer columns ``statistic``, ``judged``, ``decisive``, ``fired_at``
    (:class:`policies.cusum.CusumState`), stepped by the store in the transaction that
    finishes each judged case of the watch (a :class:`WatchStep` effect).

    The detector watches in *periods*: period 1 starts at the promotion; resolving the
    period's alert re-arms the detector (:meth:`~sidecar.store.base.WatchStore.transition_alert`):
    period ``period + 1`` starts at ``period_started_at`` from a zero state, and the counts
    (``judged``, wins, ties) are the period's. ``judged_before`` counts the judged cases of
    the earlier periods (the chart skips them)."""

    id: str
    team: str
    trial_id: str
    old_model: str
    new_model: str
    route: str | None
    gateway: str | None
    sample_rate: float
    daily_cap_micros: int
    judge_version_id: str
    baseline: float
    design_json: str
    created_at: float
    created_by: str | None
    status: WatchStatus = "active"
    stopped_at: float | None = None
    current_day: str = ""
    current_trial_id: str = ""
    statistic: int = 0
    judged: int = 0
    decisive: int = 0
    fired_at: int | None = None
    old_wins: int = 0
    new_wins: int = 0
    ties: int = 0
    period: int = 1
    period_started_at: float | None = None
    judged_before: int = 0

    @property
    def period_start(self) -> float:
        """When the current period started (period 1: when the watch was created)."""
        return self.created_at if self.period_started_at is None else self.period_started_at


@dataclass(frozen=True, slots=True)
class PromotionRecord:
    """Who promoted which trial, when, and a snapshot of the evidence (JSON)."""

    id: str
    trial_id: str
    watch_id: str
    team: str
    promoted_by: str | None
    promoted_at: float
    evidence_json: str
    #: The rejected segment keys the promoter acknowledged (JSON list; None: none were rejected).
    acknowledged_segments: str | None = None


@dataclass(frozen=True, slots=True)
class PromoteResult:
    """What :meth:`~sidecar.store.base.WatchStore.promote` did: the watch (new, or the one a
    repeated key made), whether it was created now, and — when nothing was written because
    the trial was not in a promotable status — that status (None: no such trial)."""

    watch: WatchRecord | None
    created: bool
    trial_status: str | None = None


@dataclass(frozen=True, slots=True)
class AlertRow:
    """An alert a watch raised in its detector period ``period`` (at most one per period),
    with its evidence (JSON) and its transitions' who and when."""

    id: str
    watch_id: str
    team: str
    status: AlertStatus
    raised_at: float
    evidence_json: str
    acknowledged_at: float | None = None
    acknowledged_by: str | None = None
    resolved_at: float | None = None
    resolved_by: str | None = None
    period: int = 1


@dataclass(frozen=True, slots=True)
class AlertTransition:
    """One transition of an alert (``firing``, ``acknowledged``, ``resolved``), kept for the
    webhook until delivered. ``id`` is ``<alert id>:<state>``: receivers deduplicate by it."""

    id: str
    alert_id: str
    watch_id: str
    team: str
    state: AlertStatus
    at: float
    actor: str | None
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class WatchStep:
    """A post-finish effect: step the watch's detector by one judged case.

    The store reads the watch's design and state in the finishing transaction, applies
    :func:`policies.cusum.step` (the rule lives there), writes the state back, and — only
    if this step fired the detector — inserts the period's alert, its ``firing`` transition,
    and, with ``announce`` (the uplink is on), the alert's content-free ``firing`` record
    in the outbox. The store words that record, not the hook: only the store knows the
    watch's period, so only it knows the alert's id."""

    watch_id: str
    case_id: str
    observation: Observation
    at: float
    announce: bool = False
