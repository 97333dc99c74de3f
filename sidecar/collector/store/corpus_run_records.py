"""Plain records of running comparison groups (issue 13, items 3 and 4): the group's spend
ledger, one row per invocation attempt, one row per (attempt, metric) score.

**Attempt identity.** An attempt is (group, arm, item id, item revision id, repetition,
attempt number); its ``id`` is derived from those and never reused. Attempt 1 is the
scheduler's; a higher number exists only through an explicit linked retry (``retry_of``).

**Statuses.** ``queued`` (a linked retry not yet run) → ``claimed`` (in hand: owner and
lease, its worst case reserved) → ``completed`` | ``failed``; a claim whose lease expired
(its process is gone) becomes ``invocation_indeterminate``, with its reservation held as
spent (its fate, and its cost, are unknown: never zero) and it is never re-run on its own.

**Scores.** One row per (attempt, metric) with the metric's pinned ``version`` and
``direction``: ``scored`` (``value``, or ``category`` for a categorical grader),
``not_applicable``, ``error`` (a grader or judge failure: never a tie, never a zero) or, for a
paired judgment in flight, ``pending`` → ``invocation_indeterminate``. A paired judgment's
row is on the non-baseline arm's attempt, ``paired_with`` naming the baseline attempt; its
judge calls' cost is on the row (``cost_micros``, ``cost_coverage``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

#: Attempt statuses that are final.
FINAL = ("completed", "failed", "invocation_indeterminate")


def attempt_id(comparison_id: str, arm: str, item_id: str, revision_id: str, repetition: int, attempt: int) -> str:
    """The stable id of one attempt identity."""
    key = "\x1f".join((comparison_id, arm, item_id, revision_id, str(repetition), str(attempt)))
    return "at_" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class RunRecord:
    """A group's run: its cap and ledger (``spent_micros`` settled, ``reserved_micros`` held),
    the arms cancelled (JSON list), when it started and ended, and why it could not go on
    (``error``: ``model_unavailable: …``; None for a run that ended on its own)."""

    comparison_id: str
    cap_micros: int
    spent_micros: int
    reserved_micros: int
    cancelled_arms: str
    started_at: float
    ended_at: float | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    id: str
    comparison_id: str
    arm: str
    item_id: str
    revision_id: str
    repetition: int
    attempt: int
    retry_of: str | None
    status: str
    owner: str | None
    lease_until: float | None
    reserved_micros: int
    created_at: float
    finished_at: float | None = None
    latency_ms: float | None = None
    cost_micros: int = 0
    cost_coverage: str = "unknown"
    #: The generated (or given) text: content, kept with the group (a corpus is uploaded on purpose).
    output: str | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ScoreRecord:
    attempt_id: str
    comparison_id: str
    metric: str
    kind: str
    version: str
    direction: str
    status: str
    value: float | None = None
    category: str | None = None
    paired_with: str | None = None
    detail: str | None = None
    cost_micros: int = 0
    cost_coverage: str = "complete"
    owner: str | None = None
    lease_until: float | None = None
    reserved_micros: int = 0
