"""Issue 23, items 1, 2, 6 and 7: corpus verdicts rest on an interval that keeps its 5%.

Every figure is printed; run with ``pytest -s``. Bigger tables: ``bench/verdicts.py``.
Monte-Carlo error: one standard error of a share p over T trials is sqrt(p (1 - p) / T).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from policies.bootstrap import Interval, bootstrap_interval
from policies.corpus_verdict import (
    ABRow,
    ab_verdict,
    corpus_code,
    corpus_interval,
    expanded_alpha,
    t_quantile,
)
from tests.policies._corpus_sim import ab_rates, point_rule


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


@pytest.mark.parametrize("items", [20, 50, 200])
@pytest.mark.parametrize("judge", [False, True], ids=["grader", "grader+judge"])
def test_ab_equal_arms_wrong_direction_at_most_5_percent(items: int, judge: bool) -> None:
    """Item 1: between equally good models the A/B verdict reads regression or candidate_better
    in at most 5% of comparisons (before: 30-69% from point differences)."""
    trials = 200
    rates = ab_rates(items * 10 + judge, trials, items, judge=judge)
    wrong = rates["candidate_better"] + rates["regression"]
    rng = np.random.default_rng(items)
    before = sum(point_rule(rng, items, judge=judge) for _ in range(trials)) / trials
    print(f"\nA/B equal arms, {items} items, {'grader + paired judge' if judge else 'grader'}, {trials} trials:"
          f" wrong direction {wrong:.1%} (+-{_se(wrong, trials):.1%}), equivalent {rates['equivalent']:.1%},"
          f" inconclusive {rates['inconclusive']:.1%} | before (point differences): {before:.1%}")
    assert wrong <= 0.05
    assert before > 0.2  # the point rule reads a direction far more often


@pytest.mark.parametrize("items", [20, 50, 200])
def test_ab_planted_gap_detection(items: int) -> None:
    """Item 1: a planted gap of 0.20 in pass rate (0.60 -> 0.80, tolerance 0.05) and a judge
    win rate of 0.70: how often the verdict reads candidate_better, and never regression."""
    trials = 100
    rates = ab_rates(items * 7, trials, items, judge=True, pass_base=0.6, pass_cand=0.8, win_rate=0.7)
    print(f"\nA/B planted gap (pass 0.60 -> 0.80, judge win rate 0.70), {items} items, {trials} trials:"
          f" candidate_better {rates['candidate_better']:.0%} (+-{_se(rates['candidate_better'], trials):.0%}),"
          f" regression {rates['regression']:.0%}")
    assert rates["regression"] == 0
    if items == 200:
        assert rates["candidate_better"] >= 0.7


def test_ab_inside_the_tolerance_is_not_a_regression() -> None:
    """Item 2 for A/B: a judge win rate of 0.47 (inside the tolerance 0.05) reads regression at most 5%."""
    trials = 150
    for items in (50, 200):
        rates = ab_rates(items, trials, items, judge=True, win_rate=0.47)
        print(f"\nA/B judge win rate 0.47, {items} items, {trials} trials: regression {rates['regression']:.1%},"
              f" equivalent {rates['equivalent']:.1%}")
        assert rates["regression"] <= 0.05


def test_group_code_reads_the_tolerance_beyond_the_band() -> None:
    """Item 2 for comparison groups: better/worse only when the interval is beyond the band."""
    band = 0.1
    assert corpus_code(Interval(0.02, 0.3), band) == "inconclusive"  # excludes 0, still inside reach of the band
    assert corpus_code(Interval(0.11, 0.3), band) == "candidate_better"
    assert corpus_code(Interval(-0.3, -0.02), band) == "inconclusive"  # was "Candidate behind"
    assert corpus_code(Interval(-0.3, -0.11), band) == "regression"
    assert corpus_code(Interval(-0.05, 0.08), band) == "equivalent"
    assert corpus_code(None, band) == "inconclusive"


def test_no_zero_width_interval_ever() -> None:
    """Item 6: every item with the same difference never gives a zero-width "95%" interval:
    with bounds, the exact no-spread interval; without, none and a note."""
    same = [1.0] * 20
    assert bootstrap_interval(same, identity="x") == Interval(1.0, 1.0)  # what was shown before
    bounded = corpus_interval(same, identity="x", bounds=(-1.0, 1.0))
    assert bounded.interval is not None and bounded.interval.upper == 1.0
    assert 0.5 < bounded.interval.lower < 1.0 and bounded.note is not None
    unbounded = corpus_interval([3.0] * 40, identity="x", bounds=None)
    assert unbounded.interval is None and unbounded.note is not None and "no observed spread" in unbounded.note
    zero = corpus_interval([0.0] * 200, identity="x", bounds=(-1.0, 1.0))
    assert zero.interval is not None and zero.interval.lower < 0 < zero.interval.upper
    assert corpus_code(zero.interval, 0.05) == "equivalent"  # 200 items, none differing: parity
    assert corpus_code(corpus_interval([0.0] * 20, identity="x", bounds=(-1.0, 1.0)).interval, 0.05) == "inconclusive"
    assert corpus_interval([0.5, 1.0] * 5, identity="x", bounds=(-1.0, 1.0)).interval is None  # small sample
    assert corpus_interval([0.5, 1.0] * 20, identity="x", bounds=None, complete=False).interval is None


def test_t_quantile_and_expanded_level() -> None:
    # Student's t 97.5% quantiles (tables): df 19 2.0930, 29 2.0452, 49 2.0096, 199 1.9720.
    for df, want in ((19, 2.0930), (29, 2.0452), (49, 2.0096), (199, 1.9720)):
        assert t_quantile(0.975, df) == pytest.approx(want, abs=2e-4)
    assert 0.03 < expanded_alpha(20, 0.05) < expanded_alpha(50, 0.05) < expanded_alpha(1000, 0.05) < 0.05


def _vectorised_false_direction(rng: np.random.Generator, trials: int, n: int) -> tuple[float, float]:
    """Equal arms (paired judge with 10% audited cases: scores -1, -1/2, 0, 1/2, 1): the share of
    complete runs whose interval excludes 0 (a false "ahead/behind" as the evidence comparison
    reads it), bootstrap resampled by index in chunks, 2,000 resamples, levels as corpus_interval:
    (plain percentile, expanded). Both read the same runs and the same resamples (the draws do not
    depend on the level), so one simulation gives both."""
    vals = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    probs = np.array([0.315, 0.035, 0.3, 0.035, 0.315])
    x = vals[rng.choice(5, size=(trials, n), p=probs)]
    levels = (0.05, expanded_alpha(n, 0.05))
    hits = [0, 0]
    for start in range(0, trials, 100):
        block = x[start:start + 100]
        idx = rng.integers(0, n, size=(2000, block.shape[0], n))
        means = np.take_along_axis(np.broadcast_to(block, (2000, *block.shape)), idx, axis=2).mean(axis=2)
        means.sort(axis=0)
        spread = block.min(axis=1) < block.max(axis=1)
        for k, a in enumerate(levels):
            lo = np.quantile(means, a / 2, axis=0)
            hi = np.quantile(means, 1 - a / 2, axis=0)
            hits[k] += int((((lo > 0) | (hi < 0)) & spread).sum())
    return hits[0] / trials, hits[1] / trials


@pytest.mark.parametrize("n", [20, 30])
def test_expanded_bootstrap_keeps_5_percent_at_small_n(n: int) -> None:
    """Item 7: at 20-30 items the plain percentile bootstrap is optimistic; the expanded one is not."""
    trials = 1_000
    plain, expanded = _vectorised_false_direction(np.random.default_rng(n), trials, n)
    print(f"\nequal arms, {n} items, {trials} complete runs: interval excludes 0 in {expanded:.1%}"
          f" (+-{_se(expanded, trials):.1%}) expanded, {plain:.1%} plain percentile")
    assert expanded <= 0.05
    assert expanded < plain


def test_ab_verdict_rules() -> None:
    up, inside, down = Interval(0.06, 0.2), Interval(-0.04, 0.04), Interval(-0.2, -0.06)
    assert ab_verdict([ABRow(up, 0.05, "higher_is_better")], errored=False) == "candidate_better"
    assert ab_verdict([ABRow(down, 0.05, "lower_is_better")], errored=False) == "candidate_better"
    assert ab_verdict([ABRow(inside, 0.05, "higher_is_better", delta=0.0, paired=30)] * 2,
                      errored=False) == "equivalent"
    assert ab_verdict([ABRow(up, 0.05, "higher_is_better"), ABRow(down, 0.05, "higher_is_better")],
                      errored=False) == "regression"
    assert ab_verdict([ABRow(Interval(0.01, 0.2), 0.05, "higher_is_better", delta=0.1, paired=30)],
                      errored=False) == "inconclusive"  # a delta beyond the tolerance its interval does not settle
    assert ab_verdict([ABRow(None, 0.05, "higher_is_better")], errored=False) == "inconclusive"
    assert ab_verdict([ABRow(up, 0.05, "higher_is_better")], errored=True) == "inconclusive"
    assert ab_verdict([], errored=False) == "inconclusive"


def test_ab_equivalent_reads_every_delta_within_the_tolerance() -> None:
    """Issue 24, item 4: "equivalent — every delta stays within the tolerance". Before, parity
    needed the whole interval inside +-tolerance, which a pass rate reaches only past a thousand
    items: scored results within the tolerance read inconclusive (here a 200-item interval of
    +-0.07 around a delta of 0.01)."""
    wide = Interval(-0.06, 0.08)
    row = ABRow(wide, 0.05, "higher_is_better", delta=Fraction(1, 100), paired=200)
    assert row.code() == "equivalent"
    assert ab_verdict([row, ABRow(Interval(-0.1, 0.05), 0.05, "lower_is_better", delta=-0.02, paired=200)],
                      errored=False) == "equivalent"
    # Not on a small sample (no interval below 20 items: descriptive only), not beyond the tolerance.
    assert ABRow(None, 0.05, "higher_is_better", delta=0.0, paired=19).code() == "inconclusive"
    assert ABRow(wide, 0.05, "higher_is_better", delta=0.06, paired=200).code() == "inconclusive"
    # One metric better by more than the tolerance, the others within: candidate_better.
    assert ab_verdict([ABRow(Interval(0.06, 0.2), 0.05, "higher_is_better", delta=0.12, paired=200), row],
                      errored=False) == "candidate_better"


def test_ab_a_metric_scored_on_one_side_only_is_inconclusive() -> None:
    """Issue 24, item 4: "inconclusive — a metric has no score on one side", whatever the others say."""
    scored = ABRow(Interval(-0.01, 0.01), 0.05, "higher_is_better", delta=0.0, paired=200)
    one_side = ABRow(None, 0.05, "lower_is_better", missing=True)
    assert ab_verdict([scored], errored=False) == "equivalent"
    assert ab_verdict([scored, one_side], errored=False) == "inconclusive"
    assert ab_verdict([ABRow(Interval(0.2, 0.3), 0.05, "higher_is_better", delta=0.25, paired=200), one_side],
                      errored=False) == "inconclusive"


def test_group_code_at_exactly_the_band_never_reads_a_direction_by_rounding() -> None:
    """Issue 24, item 13, for comparison groups: the bounds 0.55 - 0.5 and 0.95 - 1.0 are 1/20
    and -1/20 exactly (on a grid of 20 items), the band 0.05: at it, never beyond it."""
    assert 0.55 - 0.5 > 0.05 and 0.95 - 1.0 < -0.05  # what float comparison read
    assert corpus_code(Interval(0.55 - 0.5, 0.3), 0.05, grid=20) == "inconclusive"  # float: candidate_better
    assert corpus_code(Interval(-0.3, 0.95 - 1.0), 0.05, grid=20) == "inconclusive"  # float: regression
    assert corpus_code(Interval(0.95 - 1.0, 0.55 - 0.5), 0.05, grid=20) == "equivalent"  # float: inconclusive
    assert corpus_code(Interval(0.1, 0.3), 0.05, grid=20) == "candidate_better"
    assert corpus_code(Interval(-0.3, -0.1), Fraction(1, 20), grid=20) == "regression"
