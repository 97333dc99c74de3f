"""Verdict codes and the one evaluation a trial view calls.

:func:`decide` maps an interval to a code, on any scale with a parity point and
a tolerance:

* fewer than ``min_cases`` cases          -> ``inconclusive`` (always)
* lower > parity                          -> ``candidate_better``
* parity - tol <= lower, upper <= parity + tol -> ``equivalent``
* upper < parity (and not the above)      -> ``regression``
* anything else                            -> ``inconclusive``

``candidate_better`` is tested first: an interval wholly above parity is a
confident improvement even when it also sits inside the tolerance (both read
"Adoptable" for traffic, so the order changes only the code shown).

:func:`evaluate` decides from the anytime-valid confidence sequence
(:mod:`policies.confseq`), never from the bootstrap: the bootstrap interval is
the *reported* interval, and a fixed-n interval re-checked after every case
would reach a wrong decision far more often than alpha (docs/statistics.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from policies import confseq
from policies.bootstrap import MIN_BOOTSTRAP_CASES, Interval, bootstrap_interval
from policies.scores import ScoreCounts, aggregate

VerdictCode = Literal["candidate_better", "equivalent", "regression", "inconclusive"]
VERDICT_CODES: tuple[VerdictCode, ...] = ("candidate_better", "equivalent", "regression", "inconclusive")

SMALL_SAMPLE = "small sample"


def decide(
    lower: float, upper: float, *, n: int, parity: float, tolerance: float, min_cases: int
) -> VerdictCode:
    """The verdict code for an interval; see the module docstring for the rules."""
    if n < min_cases:
        return "inconclusive"
    if lower > parity:
        return "candidate_better"
    if lower >= parity - tolerance and upper <= parity + tolerance:
        return "equivalent"
    if upper < parity:
        return "regression"
    return "inconclusive"


def win_rate(mean_score: float) -> float:
    """Win rate = (1 + mean score) / 2."""
    return (1.0 + mean_score) / 2.0


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What a trial view shows. All intervals are on the win-rate scale [0, 1].

    ``interval`` is the reported bootstrap interval, ``None`` with
    ``small_sample`` set below 20 scored cases. ``sequence`` is the
    confidence-sequence interval the ``verdict`` is decided from (the whole of
    [0, 1] before the first case). ``note`` is ``"small sample"`` or ``None``.
    """

    n: int
    mean_score: float | None
    win_rate: float | None
    interval: Interval | None
    small_sample: bool
    sequence: Interval
    verdict: VerdictCode
    delta: float
    alpha: float
    expected_cases: int
    min_cases: int
    note: str | None


def sequence_bounds(counts: ScoreCounts, *, alpha: float, expected_cases: int) -> Interval:
    """The confidence-sequence interval for the mean *score* (scale [-1, 1], clipped)."""
    n = counts.n
    if n == 0:
        return Interval(-1.0, 1.0)
    values = np.asarray(counts.values, dtype=np.float64)
    weights = np.asarray(counts.counts, dtype=np.float64)
    mean = float(weights @ values) / n
    var = float(weights @ (values - mean) ** 2) / n
    lo, hi = confseq.bounds(n, mean, var, alpha=alpha, expected_cases=expected_cases)
    return Interval(max(-1.0, float(lo)), min(1.0, float(hi)))


def evaluate(
    case_scores: Iterable[float] | Mapping[float, int] | ScoreCounts,
    *,
    identity: str,
    expected_cases: int = 1000,
    delta: float = 0.05,
    min_cases: int = 20,
    alpha: float = 0.05,
) -> Evaluation:
    """Evaluate paired-judge evidence: case scores in [-1, 1] (sequence or ``{value: count}``).

    ``identity`` seeds the bootstrap (see ``policies.bootstrap.bootstrap_identity``).
    ``delta`` is the equivalence tolerance on the win-rate scale. Pure and
    deterministic: the same evidence and parameters give the same Evaluation.
    """
    if not 0 < delta < 0.5:
        raise ValueError("delta must be in (0, 0.5)")
    counts = aggregate(case_scores)
    if counts.values and (counts.values[0] < -1 or counts.values[-1] > 1):
        raise ValueError("case scores must lie in [-1, 1]")
    n = counts.n
    mean = None if n == 0 else math.fsum(v * c for v, c in zip(counts.values, counts.counts)) / n
    boot = bootstrap_interval(counts, identity=identity, alpha=alpha)
    reported = None if boot is None else Interval(win_rate(boot.lower), win_rate(boot.upper))
    seq_score = sequence_bounds(counts, alpha=alpha, expected_cases=expected_cases)
    seq = Interval(win_rate(seq_score.lower), win_rate(seq_score.upper))
    code = decide(seq.lower, seq.upper, n=n, parity=0.5, tolerance=delta, min_cases=min_cases)
    small = n < MIN_BOOTSTRAP_CASES
    return Evaluation(
        n=n,
        mean_score=mean,
        win_rate=None if mean is None else win_rate(mean),
        interval=reported,
        small_sample=small,
        sequence=seq,
        verdict=code,
        delta=delta,
        alpha=alpha,
        expected_cases=expected_cases,
        min_cases=min_cases,
        note=SMALL_SAMPLE if small else None,
    )
