"""Verdict codes, and the rule that maps an interval to one.

On any scale with a parity point p and a tolerance d >= 0, for an interval
[lower, upper] after n cases (first rule that applies):

* n < ``min_cases``                        -> ``inconclusive``
* p - d <= lower and upper <= p + d        -> ``equivalent``
* lower > p                                -> ``candidate_better``
* upper < p                                -> ``regression``
* anything else                            -> ``inconclusive``

The rule is symmetric: mirroring an interval about parity swaps
``candidate_better`` and ``regression`` and keeps the other two codes. An
interval wholly inside the tolerance is ``equivalent`` on either side of
parity; "better" and "worse" are read only when the interval excludes parity
*and* reaches outside the tolerance on that side. (Both ``candidate_better``
and ``equivalent`` read "Adoptable" for traffic.)
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

VerdictCode = Literal["candidate_better", "equivalent", "regression", "inconclusive"]
VERDICT_CODES: tuple[VerdictCode, ...] = ("candidate_better", "equivalent", "regression", "inconclusive")

# Indices of VERDICT_CODES, for the vectorised rule.
BETTER, EQUIVALENT, REGRESSION, INCONCLUSIVE = 0, 1, 2, 3


def decide_index(
    lower: ArrayLike, upper: ArrayLike, n: ArrayLike, *, parity: float, tolerance: float, min_cases: int
) -> NDArray[np.int8]:
    """The rule above on arrays (broadcast): indices into ``VERDICT_CODES``."""
    lo = np.asarray(lower, dtype=np.float64)
    hi = np.asarray(upper, dtype=np.float64)
    enough = np.asarray(n) >= min_cases
    code = np.where(
        (lo >= parity - tolerance) & (hi <= parity + tolerance),
        EQUIVALENT,
        np.where(lo > parity, BETTER, np.where(hi < parity, REGRESSION, INCONCLUSIVE)),
    )
    return np.where(enough, code, INCONCLUSIVE).astype(np.int8)


def decide(
    lower: float, upper: float, *, n: int, parity: float, tolerance: float, min_cases: int
) -> VerdictCode:
    """The verdict code for one interval; see the module docstring for the rules."""
    if tolerance < 0:
        raise ValueError("tolerance cannot be negative")
    return VERDICT_CODES[int(decide_index(lower, upper, n, parity=parity, tolerance=tolerance, min_cases=min_cases))]
