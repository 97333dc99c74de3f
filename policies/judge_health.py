"""Judge health: is the paired judge biased by position, length, or unreliability?

Input is a list of :class:`SlotJudgment` records, one per judge call that
reached a verdict or failed (audits included). Output is a
:class:`JudgeHealth` with:

* **first-slot win rate**: among decisive judgments (a winner, not a tie), the
  share won by whichever answer was shown first (slot A), with an exact
  two-sided binomial test against 0.5. The judge is ``flagged`` when the
  p-value is below ``alpha`` (default 0.01) *and* the rate is at least
  ``min_drift`` (default 0.05) away from 0.5, so that a huge sample does not flag
  a drift nobody would act on.
* **position consistency**: over audited cases (judged once in each
  presentation order, both judgments valid), the share whose arm-level outcome
  (candidate / incumbent / tie) is the same both times.
* **tie rate** (ties / valid judgments), **error rate** and **abstention rate**
  (over all records), and the **longer-answer win rate**: among decisive
  judgments where the two answers differ in length, the share the longer won.

Rates with an empty denominator are ``None``, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from policies.scores import Judgment, Outcome

Slot = Literal["A", "B"]
Winner = Literal["A", "B", "tie", "error", "abstain"]


@dataclass(frozen=True, slots=True)
class SlotJudgment:
    """One judge call, in presentation terms.

    ``candidate_slot``: the slot (A = shown first, B = second) that held the
    candidate's answer; the incumbent held the other. ``winner``: the slot the
    judge preferred, ``tie``, ``error`` (no single parsable label) or
    ``abstain``. ``audit``: True for the second, swapped-order judgment of an
    audited case. ``longer_won``: for a decisive judgment, whether the longer
    of the two answers won; None when the lengths are equal or unknown, and
    ignored for ties and failures. ``strong``: the label was ``>>``.
    """

    case_id: str
    candidate_slot: Slot
    winner: Winner
    audit: bool = False
    longer_won: bool | None = None
    strong: bool = False

    def __post_init__(self) -> None:
        if self.candidate_slot not in ("A", "B"):
            raise ValueError(f"candidate_slot must be 'A' or 'B', not {self.candidate_slot!r}")
        if self.winner not in ("A", "B", "tie", "error", "abstain"):
            raise ValueError(f"unknown winner {self.winner!r}")

    @property
    def outcome(self) -> Outcome:
        """The outcome in arm terms."""
        if self.winner in ("A", "B"):
            return "candidate" if self.winner == self.candidate_slot else "incumbent"
        return self.winner  # type: ignore[return-value]

    def to_judgment(self) -> Judgment:
        return Judgment(self.case_id, self.outcome, self.strong and self.winner in ("A", "B"))


@dataclass(frozen=True, slots=True)
class JudgeHealth:
    """Judge-health figures; see the module docstring for each definition."""

    judgments: int
    valid: int
    decisive: int
    first_slot_wins: int
    first_slot_win_rate: float | None
    first_slot_p_value: float
    flagged: bool
    audited_pairs: int
    position_consistency: float | None
    tie_rate: float | None
    error_rate: float | None
    abstention_rate: float | None
    longer_answer_decisive: int
    longer_answer_win_rate: float | None


def binomial_two_sided_half(k: int, n: int) -> float:
    """Exact two-sided binomial test p-value of k successes in n trials against p = 0.5.

    For p = 0.5 the distribution is symmetric, so the p-value is
    min(1, 2 P(X <= min(k, n - k))). n = 0 gives 1.0.
    """
    if not 0 <= k <= n:
        raise ValueError("need 0 <= k <= n")
    if n == 0:
        return 1.0
    lo = min(k, n - k)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1, dtype=np.float64)))))
    j = np.arange(lo + 1)
    logpmf = log_fact[n] - log_fact[j] - log_fact[n - j] - n * math.log(2.0)
    top = float(logpmf.max())
    tail = math.exp(top) * float(np.exp(logpmf - top).sum())
    return min(1.0, 2.0 * tail)


def _rate(num: int, den: int) -> float | None:
    return None if den == 0 else num / den


def judge_health(
    records: Iterable[SlotJudgment], *, alpha: float = 0.01, min_drift: float = 0.05
) -> JudgeHealth:
    """Compute judge health from per-judgment records (any order)."""
    recs = list(records)
    total = len(recs)
    valid = [r for r in recs if r.winner in ("A", "B", "tie")]
    decisive = [r for r in valid if r.winner != "tie"]
    first = sum(1 for r in decisive if r.winner == "A")
    p_value = binomial_two_sided_half(first, len(decisive))
    first_rate = _rate(first, len(decisive))
    flagged = first_rate is not None and p_value < alpha and abs(first_rate - 0.5) >= min_drift

    originals: dict[str, Outcome] = {}
    audits: dict[str, Outcome] = {}
    for r in valid:
        (audits if r.audit else originals)[r.case_id] = r.outcome
    paired = [c for c in audits if c in originals]
    consistent = sum(1 for c in paired if audits[c] == originals[c])

    with_length = [r for r in decisive if r.longer_won is not None]
    longer = sum(1 for r in with_length if r.longer_won)
    return JudgeHealth(
        judgments=total,
        valid=len(valid),
        decisive=len(decisive),
        first_slot_wins=first,
        first_slot_win_rate=first_rate,
        first_slot_p_value=p_value,
        flagged=flagged,
        audited_pairs=len(paired),
        position_consistency=_rate(consistent, len(paired)),
        tie_rate=_rate(len(valid) - len(decisive), len(valid)),
        error_rate=_rate(sum(1 for r in recs if r.winner == "error"), total),
        abstention_rate=_rate(sum(1 for r in recs if r.winner == "abstain"), total),
        longer_answer_decisive=len(with_length),
        longer_answer_win_rate=_rate(longer, len(with_length)),
    )
