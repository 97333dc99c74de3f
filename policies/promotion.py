"""Promotion rules (DESIGN.md sections 1 rule 6, and 10): who may become the incumbent.

Pure: plain values in, a refusal reason (or None) out. The admin API refuses with
``409 promotion_refused`` and the reason, whatever client sent the request.

Reasons, checked in this order:

- ``corpus_evidence`` — only traffic evidence (trials, replay trials) may promote;
  corpus evidence (experiments) never may, whatever its verdict;
- ``already_promoted`` — the trial is adopted already (a retry with the same
  Idempotency-Key is not refused: it returns the first watch);
- ``not_running_or_ended`` — the trial is paused (posture changed, starter
  unauthorised): resume or stop it first;
- ``not_adoptable`` — the verdict is not *Adoptable* (better, equivalent, or not worse by more
  than the tolerance).
"""

from __future__ import annotations

import datetime as _dt
from typing import Literal

EvidenceKind = Literal["traffic", "corpus"]
Refusal = Literal["corpus_evidence", "already_promoted", "not_running_or_ended", "not_adoptable"]

#: Trial statuses a promotion may start from: running, or ended on its own (``decided``: it
#: stopped on its decision; ``cap_reached``) or by an operator.
PROMOTABLE: tuple[str, ...] = ("running", "stopped", "cap_reached", "decided")
ADOPTABLE_CODES: tuple[str, ...] = ("candidate_better", "equivalent", "not_worse")

#: The sentinel's default share of the matching traffic (settable at promotion).
DEFAULT_WATCH_SAMPLE_RATE = 0.01


def refusal(*, evidence: str, status: str, verdict: str) -> Refusal | None:
    """Why this promotion is refused, or None when it may proceed."""
    if evidence != "traffic":
        return "corpus_evidence"
    if status == "adopted":
        return "already_promoted"
    if status not in PROMOTABLE:
        return "not_running_or_ended"
    if verdict not in ADOPTABLE_CODES:
        return "not_adoptable"
    return None


def utc_day(ts: float) -> str:
    """The UTC calendar day of a Unix time, ``YYYY-MM-DD`` (a watch's daily cap is per this day)."""
    return _dt.datetime.fromtimestamp(ts, tz=_dt.timezone.utc).strftime("%Y-%m-%d")


def observation(score: float) -> Literal["old_wins", "new_wins", "tie"]:
    """A judged sentinel case as the detector sees it. The sentinel is the *candidate* of its
    case (the replaced model), so a positive case score means the old model won."""
    if score > 0:
        return "old_wins"
    if score < 0:
        return "new_wins"
    return "tie"
