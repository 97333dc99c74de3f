"""Verdict codes, and the rule that maps an interval to one.

On any scale with a parity point p and a tolerance d >= 0, for an interval
[lower, upper] after n cases (first rule that applies):

* n < ``min_cases``                        -> ``inconclusive``
* lower > p + d                            -> ``candidate_better``  (better by more than d)
* upper < p - d                            -> ``regression``        (worse by more than d)
* p - d <= lower and upper <= p + d        -> ``equivalent``        (within +-d)
* p - d <= lower                           -> ``not_worse``         (not worse by more than d,
                                                                     better still open)
* anything else                            -> ``inconclusive``

This is the A/B seed's reading of the tolerance, on the interval: a difference is
"better" or "worse" only when the whole interval lies beyond the tolerance on
that side, so a true difference *inside* the tolerance (a win rate of 0.47 at
d = 0.05) reads ``regression`` only when the interval misses the truth (at most
alpha / 2 for a confidence sequence), never merely because the interval excludes
parity.

``not_worse`` is the code of an interval that lies above ``p - d`` but still
straddles ``p + d``: the candidate is shown not worse by more than the tolerance
(the seed's "better or the same", hence *Adoptable* for traffic), and it is not yet
known whether it is better by more than the tolerance or within it. On a running
intersection (:mod:`policies.sequence`) its lower bound never falls again, so it
can only sharpen into ``candidate_better`` or ``equivalent`` (both Adoptable too).
Its mirror image (an interval below ``p + d`` straddling ``p - d``: not better by
more, perhaps worse by more) decides nothing and stays ``inconclusive``: neither
traffic word fits it. Corpus results never use ``not_worse``
(:mod:`policies.corpus_verdict`).

``candidate_better``, ``equivalent`` and ``regression`` are symmetric: mirroring
an interval about parity swaps ``candidate_better`` and ``regression`` and keeps
``equivalent``.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

VerdictCode = Literal["candidate_better", "equivalent", "regression", "inconclusive", "not_worse"]
VERDICT_CODES: tuple[VerdictCode, ...] = ("candidate_better", "equivalent", "regression", "inconclusive", "not_worse")

# Indices of VERDICT_CODES, for the vectorised rule.
BETTER, EQUIVALENT, REGRESSION, INCONCLUSIVE, NOT_WORSE = 0, 1, 2, 3, 4


def decide_index(
    lower: ArrayLike, upper: ArrayLike, n: ArrayLike, *, parity: float, tolerance: float, min_cases: int
) -> NDArray[np.int8]:
    """The rule above on arrays (broadcast): indices into ``VERDICT_CODES``."""
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    enough = np.asarray(n) >= min_cases
    above_floor = lo >= parity - tolerance
    # The codes as int8 scalars: every intermediate array is int8, an eighth of the default ints'
    # memory traffic (a simulation decides millions of looks at once). The same codes.
    better, equivalent, regression, inconclusive, not_worse = (
        np.int8(BETTER), np.int8(EQUIVALENT), np.int8(REGRESSION), np.int8(INCONCLUSIVE), np.int8(NOT_WORSE))
    code = np.where(
        lo > parity + tolerance,
        better,
        np.where(
            hi < parity - tolerance,
            regression,
            np.where(above_floor & (hi <= parity + tolerance), equivalent,
                     np.where(above_floor, not_worse, inconclusive)),
        ),
    )
    out: NDArray[np.int8] = np.where(enough, code, inconclusive).astype(np.int8, copy=False)
    return out


def decide(
    lower: float, upper: float, *, n: int, parity: float, tolerance: float, min_cases: int
) -> VerdictCode:
    """The verdict code for one interval; see the module docstring for the rules."""
    if tolerance < 0:
        raise ValueError("tolerance cannot be negative")
    # :func:`decide_index` on one interval, in plain floats: the same comparisons, so the same code
    # (tests/policies/test_decision_scalar.py), without numpy's cost per call (a fold decides per case).
    if n < min_cases:
        return "inconclusive"
    lo, hi = float(lower), float(upper)
    if lo > parity + tolerance:
        return "candidate_better"
    if hi < parity - tolerance:
        return "regression"
    if lo >= parity - tolerance:
        return "equivalent" if hi <= parity + tolerance else "not_worse"
    return "inconclusive"
