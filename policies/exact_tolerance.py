"""Tolerance comparisons that do not depend on float rounding (issue 24, item 13). Pure.

An A/B comparison reads "worse (or better) by more than the tolerance" and "within the
tolerance". Done in floats, a delta exactly at the tolerance falls either side by rounding:
``0.55 - 0.5 > 0.05`` is True, ``0.3 - 0.25 > 0.05`` is False, ``0.95 - 1.0 < -0.05`` is True —
10 -> 11 of 20 would read better, 5 -> 6 equivalent and 20 -> 19 a regression, all three the
same one-item move of 1/20 at a tolerance of 0.05. The rule here, one for every comparison:

- every number is read as the decimal it is written as (a score, the tolerance: the shortest
  decimal that reads back as the same float, ``Fraction(repr(x))``), so 0.05 is exactly 1/20;
- means and differences are exact fractions of those decimals (:func:`exact_mean`);
- an interval bound (a bootstrap percentile is the mean of n per-item differences, so a
  multiple of 1 / (n x the differences' common denominator)) is read as that multiple when it
  lies within 1e-9 of it (:func:`snap`); any other bound (the no-spread interval's, a latency's)
  is read as the decimal it is written as, like every other number;
- "by more than the tolerance" is strict and "within" includes the tolerance: a delta of
  exactly 1/20 at a tolerance of 0.05 is within it, whichever pass rates it comes from.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from fractions import Fraction
from functools import lru_cache
from typing import cast

#: A bound is snapped to a grid point only this close to it (float error of a mean is ~1e-13).
SNAP = Fraction(1, 10**9)
#: The finest grid snapped to: grid points 1/D apart are at least 1/D^2 = 1e-10 apart, far more
#: than the float error, so the nearest one is the true value.
MAX_GRID = 10**5


@lru_cache(maxsize=65536)
def _decimal(x: float) -> Fraction:
    if not math.isfinite(x):
        raise ValueError("a finite number is needed")
    return Fraction(repr(x))


def exact(x: float | int | Fraction) -> Fraction:
    """``x`` as the decimal it is written as (a Fraction stays as it is)."""
    if type(x) is float:  # the common case first: isinstance of a float against Fraction asks its ABC
        return _decimal(x)
    if isinstance(x, Fraction):
        return x
    if isinstance(x, int):
        return Fraction(x)
    return _decimal(float(x))


def exact_mean(values: Iterable[float | int | Fraction]) -> Fraction | None:
    """The exact mean of ``values`` (each read by :func:`exact`); None for none. Equal values are
    summed once (scores repeat: a pass rate is a mean of 0s and 1s)."""
    if isinstance(values, (list, tuple)) and len(values) == 1:  # one repetition: the value itself
        return exact(values[0])
    items = values if isinstance(values, (list, tuple)) else list(values)
    if items and all(type(v) is Fraction for v in items):
        # Exact fractions only (per-item differences): summed per denominator, as integers. The
        # same exact sum as below, without hashing every Fraction (Fraction's hash is slow).
        by_denominator: dict[int, int] = {}
        for v in cast("Sequence[Fraction]", items):
            d = v.denominator
            by_denominator[d] = by_denominator.get(d, 0) + v.numerator
        return sum((Fraction(k, d) for d, k in by_denominator.items()), Fraction(0)) / len(items)
    counts = Counter(items)
    n = sum(counts.values())
    if n == 0:
        return None
    return sum((exact(v) * k for v, k in counts.items()), Fraction(0)) / n


def grid_of(diffs: Sequence[Fraction]) -> int | None:
    """The grid a mean of ``diffs`` (or of a resample of them) lies on: n x the lcm of their
    denominators; None when finer than :data:`MAX_GRID` (no snapping)."""
    if not diffs:
        return None
    common = 1
    # The lcm does not depend on order or repeats: each distinct denominator once.
    for d in {v.denominator for v in diffs}:
        common = common * d // math.gcd(common, d)
        if common * len(diffs) > MAX_GRID:
            return None
    return common * len(diffs)


def snap(bound: float | Fraction, grid: int | None) -> Fraction:
    """``bound`` as the multiple of 1 / ``grid`` it lies within 1e-9 of, else as :func:`exact` reads it."""
    value = exact(bound)
    if grid is None:
        return value
    nearest = Fraction(round(value * grid), grid)
    return nearest if abs(nearest - value) <= SNAP else value


def beyond(lower: Fraction, upper: Fraction, tolerance: Fraction) -> int:
    """+1 when [lower, upper] lies above +tolerance (better by more than it), -1 when below
    -tolerance (worse by more than it), 0 otherwise. Strict: a bound at the tolerance is not beyond."""
    if lower > tolerance:
        return 1
    if upper < -tolerance:
        return -1
    return 0


def within(delta: Fraction, tolerance: Fraction) -> bool:
    """Whether ``delta`` stays within the tolerance (at it included)."""
    return -tolerance <= delta <= tolerance
