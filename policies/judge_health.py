"""Judge health: is the paired judge biased by position, length, or unreliability?

Input is a list of :class:`SlotJudgment` records, one per judge call that
reached a verdict or failed (audits included). Output is a
:class:`JudgeHealth` with:

* **first-slot win rate**: among decisive (non-tie) *primary* judgments, the
  share won by whichever answer was shown first (slot A), with an anytime-valid
  test against 0.5. The presentation order of a primary judgment is a fair coin
  drawn independently of everything before it, so for an unbiased judge every
  decisive primary judgment is won by slot A with probability exactly 1/2
  whatever the answers are. Audits are left out: an audit's order is the swap of
  its case's first order, not a fresh coin (its evidence is the position
  consistency below).

  The test is the empirical-Bernstein confidence sequence of
  :mod:`policies.confseq` on the +/-1 outcomes (slot A won / slot B won), at
  level ``alpha`` (default 0.05): the CS holds at every count at once, so the
  judge is flagged by chance in at most ``alpha`` of trials *however often the
  health is read*. The judge is ``flagged`` once the CS has excluded 0.5 at some
  look and the rate is at least ``min_drift`` (default 0.05) from 0.5, so that a
  huge sample does not flag a drift nobody would act on. A flag stands: the
  caller persists :class:`JudgeHealthState` and passes it back as ``prior``
  (without it, each read decides from the current counts alone, which is still
  anytime-valid, but a flag may drop again).
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
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

from policies import confseq
from policies.bootstrap import Interval
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
class JudgeHealthState:
    """What a trial keeps of its first-slot test between reads (JSON-safe via ``to_dict``).

    ``decisive``: the largest count of decisive primary judgments folded in.
    ``evidence_at``: the count at which the confidence sequence first excluded
    0.5, or None. ``flagged_at``: the count at which the judge was flagged, or
    None. ``alpha`` and ``expected_decisive``: the test's settings; a state
    built with other settings is refused.
    """

    decisive: int
    evidence_at: int | None
    flagged_at: int | None
    alpha: float
    expected_decisive: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JudgeHealthState:
        ev, fl = data.get("evidence_at"), data.get("flagged_at")
        return cls(
            decisive=int(data["decisive"]),
            evidence_at=None if ev is None else int(ev),
            flagged_at=None if fl is None else int(fl),
            alpha=float(data["alpha"]),
            expected_decisive=int(data["expected_decisive"]),
        )


@dataclass(frozen=True, slots=True)
class JudgeHealth:
    """Judge-health figures; see the module docstring for each definition.

    ``decisive``, ``first_slot_wins`` and ``first_slot_win_rate`` are over
    decisive primary judgments. ``first_slot_sequence`` is the anytime-valid
    confidence interval for the first-slot win rate at this read (None before
    the first decisive primary judgment). ``state`` is what the caller persists.
    """

    judgments: int
    valid: int
    decisive: int
    first_slot_wins: int
    first_slot_win_rate: float | None
    first_slot_sequence: Interval | None
    flagged: bool
    flagged_at: int | None
    state: JudgeHealthState
    audited_pairs: int
    position_consistency: float | None
    tie_rate: float | None
    error_rate: float | None
    abstention_rate: float | None
    longer_answer_decisive: int
    longer_answer_win_rate: float | None


def health_state(
    first_slot_wins: int,
    decisive: int,
    *,
    alpha: float = 0.05,
    min_drift: float = 0.05,
    expected_decisive: int = 1000,
    prior: JudgeHealthState | None = None,
) -> JudgeHealthState:
    """The state :func:`judge_health` keeps, from its two counts alone: ``decisive`` primary
    judgments, ``first_slot_wins`` of them won by slot A. The same rule (and the same refusal
    of a ``prior`` built with other settings): for a caller that counts in the store rather
    than reading every judgment."""
    if prior is not None and (prior.alpha != alpha or prior.expected_decisive != expected_decisive):
        raise ValueError(
            f"the stored judge-health state was built with other settings "
            f"(alpha {prior.alpha}, expected_decisive {prior.expected_decisive})"
        )
    return _first_slot(first_slot_wins, decisive, prior, alpha=alpha, min_drift=min_drift,
                       expected_decisive=expected_decisive)[1]


def _first_slot(
    first: int, n: int, prior: JudgeHealthState | None, *, alpha: float, min_drift: float, expected_decisive: int
) -> tuple[Interval | None, JudgeHealthState]:
    """The first-slot interval at this look and the state folded into ``prior``."""
    first_rate = _rate(first, n)
    sequence = None
    evidence_at = None if prior is None else prior.evidence_at
    flagged_at = None if prior is None else prior.flagged_at
    if n:
        lo, hi = first_slot_bounds(first, n, alpha=alpha, expected_decisive=expected_decisive)
        sequence = Interval(float(lo), float(hi))
        if evidence_at is None and (sequence.lower > 0.5 or sequence.upper < 0.5):
            evidence_at = n
        if flagged_at is None and evidence_at is not None and first_rate is not None:
            if abs(first_rate - 0.5) >= min_drift:
                flagged_at = n
    seen = n if prior is None else max(prior.decisive, n)
    return sequence, JudgeHealthState(seen, evidence_at, flagged_at, alpha, expected_decisive)


def binomial_two_sided_half(k: int, n: int) -> float:
    """Exact two-sided binomial test p-value of k successes in n trials against p = 0.5.

    A fixed-sample test: valid when looked at once, at a pre-chosen n. The flag
    no longer uses it (checked after every case, it flagged 10.5% of unbiased
    judges); it is kept as the reference the simulations contrast with.
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


def first_slot_bounds(
    first_wins: np.ndarray | int, decisive: np.ndarray | int, *, alpha: float, expected_decisive: int
) -> tuple[np.ndarray, np.ndarray]:
    """The anytime-valid CS for the first-slot win rate after ``decisive`` judgments (arrays broadcast).

    Outcomes are +1 (slot A won) or -1, so Q = decisive; the rate's interval
    is (1 + mean +/- radius(Q) / n) / 2, clipped to [0, 1]. ``decisive`` >= 1.
    """
    k = np.asarray(first_wins, dtype=np.float64)
    n = np.asarray(decisive, dtype=np.float64)
    lo, hi = confseq.eb_bounds(n, (2 * k - n) / n, n, alpha=alpha, expected_cases=expected_decisive)
    return np.clip((1 + lo) / 2, 0.0, 1.0), np.clip((1 + hi) / 2, 0.0, 1.0)


def first_slot_flags(
    first_wins: np.ndarray, decisive: np.ndarray, *, alpha: float, min_drift: float, expected_decisive: int
) -> np.ndarray:
    """Flag after each look along the last axis (cumulative counts): the rule of :func:`judge_health`."""
    k = np.asarray(first_wins, dtype=np.float64)
    n = np.asarray(decisive, dtype=np.float64)
    seen = n >= 1
    safe = np.maximum(n, 1.0)
    distinct, index = np.unique(safe, return_inverse=True)
    radius = confseq.eb_radius(distinct, alpha=alpha, expected_cases=expected_decisive)[index.reshape(safe.shape)]
    # The CS excludes 0.5 exactly when |2k - n| > radius(n) (its centre is (2k - n) / n, half-width radius / n).
    excludes = seen & (np.abs(2 * k - n) > radius)
    evidence = np.logical_or.accumulate(excludes, axis=-1)
    drift = seen & (np.abs(k / safe - 0.5) >= min_drift)
    return np.logical_or.accumulate(evidence & drift, axis=-1)


def judge_health(
    records: Iterable[SlotJudgment],
    *,
    alpha: float = 0.05,
    min_drift: float = 0.05,
    expected_decisive: int = 1000,
    prior: JudgeHealthState | None = None,
) -> JudgeHealth:
    """Compute judge health from per-judgment records (any order).

    ``prior`` is the ``state`` of an earlier read of the same trial (None: no
    history). Persist the returned ``state`` before showing the flag; reading
    the same records twice with it changes nothing, and a stale read (fewer
    judgments) cannot clear a flag. A state built with another ``alpha`` or
    ``expected_decisive`` raises ``ValueError``.
    """
    if prior is not None and (prior.alpha != alpha or prior.expected_decisive != expected_decisive):
        raise ValueError(
            f"the stored judge-health state was built with other settings "
            f"(alpha {prior.alpha}, expected_decisive {prior.expected_decisive})"
        )
    recs = list(records)
    total = len(recs)
    valid = [r for r in recs if r.winner in ("A", "B", "tie")]
    decisive_all = [r for r in valid if r.winner != "tie"]
    decisive = [r for r in decisive_all if not r.audit]
    n = len(decisive)
    first = sum(1 for r in decisive if r.winner == "A")
    first_rate = _rate(first, n)
    sequence, state = _first_slot(first, n, prior, alpha=alpha, min_drift=min_drift,
                                  expected_decisive=expected_decisive)
    flagged_at = state.flagged_at

    originals: dict[str, Outcome] = {}
    audits: dict[str, Outcome] = {}
    for r in valid:
        (audits if r.audit else originals)[r.case_id] = r.outcome
    paired = [c for c in audits if c in originals]
    consistent = sum(1 for c in paired if audits[c] == originals[c])

    with_length = [r for r in decisive_all if r.longer_won is not None]
    longer = sum(1 for r in with_length if r.longer_won)
    return JudgeHealth(
        judgments=total,
        valid=len(valid),
        decisive=n,
        first_slot_wins=first,
        first_slot_win_rate=first_rate,
        first_slot_sequence=sequence,
        flagged=flagged_at is not None,
        flagged_at=flagged_at,
        state=state,
        audited_pairs=len(paired),
        position_consistency=_rate(consistent, len(paired)),
        tie_rate=_rate(len(valid) - len(decisive_all), len(valid)),
        error_rate=_rate(sum(1 for r in recs if r.winner == "error"), total),
        abstention_rate=_rate(sum(1 for r in recs if r.winner == "abstain"), total),
        longer_answer_decisive=len(with_length),
        longer_answer_win_rate=_rate(longer, len(with_length)),
    )
