"""Issue 24, item 13: an A/B delta exactly at the tolerance reads the same whatever pass rates it
comes from (before: 10 -> 11 of 20 better, 5 -> 6 equivalent, 20 -> 19 regression, all at 0.05)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from policies.bootstrap import Interval
from policies.corpus_verdict import ABRow, corpus_interval, delta_bounds
from policies.exact_tolerance import beyond, exact, exact_mean, grid_of, snap, within


def passes(right: int, of: int) -> list[float]:
    return [1.0] * right + [0.0] * (of - right)


@pytest.mark.parametrize("before, after", [(10, 11), (5, 6), (20, 19), (11, 10), (0, 1)])
def test_one_item_of_20_is_exactly_the_tolerance(before: int, after: int) -> None:
    delta = exact_mean(passes(after, 20))
    base = exact_mean(passes(before, 20))
    assert delta is not None and base is not None
    assert abs(delta - base) == Fraction(1, 20) == exact(0.05)
    assert within(delta - base, exact(0.05))  # at the tolerance is within it
    # The float path these replace: three verdicts for one and the same move.
    float_delta = after / 20 - before / 20
    floats = "better" if float_delta > 0.05 else "worse" if float_delta < -0.05 else "within"
    print(f"{before} -> {after} of 20: float delta {float_delta!r} read {floats}; exact {delta - base}")


@pytest.mark.parametrize("before, after", [(10, 11), (5, 6), (20, 19)])
def test_an_ab_row_at_the_tolerance_is_equivalent_whatever_the_rates(before: int, after: int) -> None:
    """The row as ab.py builds it: per-item differences in exact fractions, the interval from the
    float bootstrap, its bounds read on their grid, the delta exact."""
    base, cand = passes(before, 20), passes(after, 20)
    diffs = [exact(c) - exact(b) for b, c in zip(base, cand)]
    got = corpus_interval([float(d) for d in diffs], identity="x", bounds=delta_bounds("grader"))
    delta = exact_mean(cand)
    assert delta is not None
    row = ABRow(got.interval, 0.05, "higher_is_better", delta=delta - (exact_mean(base) or 0), paired=20,
                grid=grid_of(diffs))
    assert row.code() == "equivalent"


def test_an_interval_bound_at_the_tolerance_is_not_beyond_it() -> None:
    """A bootstrap bound lands on a multiple of 1/n; computed in floats it may sit an ulp above
    the tolerance (0.55 - 0.5 = 0.05000000000000004): read on its grid it is exactly 1/20."""
    computed = 0.55 - 0.5
    assert computed > 0.05  # the float comparison this replaces
    assert snap(computed, 20) == Fraction(1, 20)
    assert beyond(snap(computed, 20), Fraction(1, 2), exact(0.05)) == 0
    row = ABRow(Interval(computed, 0.3), 0.05, "higher_is_better", delta=Fraction(3, 20), paired=20, grid=20)
    assert row.code() == "inconclusive"  # not "better by more than the tolerance"
    down = ABRow(Interval(-0.3, 0.95 - 1.0), 0.05, "higher_is_better", delta=Fraction(-3, 20), paired=20, grid=20)
    assert down.code() == "inconclusive"  # not a regression
    assert ABRow(Interval(0.1 + 1e-12, 0.3), 0.05, "higher_is_better", grid=20).code() == "candidate_better"


def test_snapping_leaves_off_grid_bounds_alone() -> None:
    assert snap(0.0512345, 20) == exact(0.0512345)
    assert snap(0.05, None) == Fraction(1, 20)
    assert grid_of([Fraction(1, 2), Fraction(1, 3), Fraction(0)]) == 18
    assert grid_of([Fraction(1, 7919)] * 20) is None  # finer than the float error allows: not snapped
    assert exact(0.1) + exact(0.2) == exact(0.3)


def test_exact_mean_and_grid_of_are_the_item_by_item_readings() -> None:
    """``exact_mean`` sums exact fractions per denominator and ``grid_of`` reads each distinct
    denominator once (cheaper per item): the same Fractions and grids as item by item."""
    import math
    import random
    from collections import Counter

    def mean_item_by_item(values: list[object]) -> Fraction:
        counts = Counter(values)
        return sum((exact(v) * k for v, k in counts.items()), Fraction(0)) / sum(counts.values())  # type: ignore[arg-type]

    def grid_item_by_item(diffs: list[Fraction]) -> int | None:
        common = 1
        for d in diffs:
            common = common * d.denominator // math.gcd(common, d.denominator)
            if common * len(diffs) > 10**5:
                return None
        return common * len(diffs)

    rng = random.Random(29)
    fractions = [Fraction(k, d) for d in (1, 2, 3, 4, 7, 20, 100, 999) for k in range(-3, 4)]
    floats: list[float | Fraction] = [-1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 0.1, 0.7]
    for _ in range(150):
        size = rng.randint(2, 80)
        diffs = [rng.choice(fractions) for _ in range(size)]
        assert exact_mean(diffs) == mean_item_by_item(diffs)  # type: ignore[arg-type]
        assert exact_mean(iter(diffs)) == mean_item_by_item(diffs)  # type: ignore[arg-type]
        assert grid_of(diffs) == grid_item_by_item(diffs)
        mixed: list[float | Fraction] = [rng.choice([*floats, *fractions]) for _ in range(size)]
        assert exact_mean(mixed) == mean_item_by_item(mixed)  # type: ignore[arg-type]
        assert exact_mean([rng.choice(floats) for _ in range(size)]) is not None
    assert exact_mean([]) is None and exact_mean(iter([])) is None and grid_of([]) is None
