"""The level each segment of a trial is read at (policies/segment_alpha.py), and what it controls.

The reduced seeded simulation here checks the family-wise bound with a margin that fails without
the split; the 2,000-trial x 5,000-case figures are bench/segments.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from policies.decision import BETTER, EQUIVALENT, NOT_WORSE, REGRESSION, VERDICT_CODES
from policies.segment_alpha import segment_alpha
from policies.stream import fold_cases
from tests.policies._segments_sim import assign, first_code, null_firsts, split, trial_case
from tests.policies._sim import simulate_case_scores


def test_the_trial_level_is_split_evenly_across_the_tracked_values() -> None:
    assert segment_alpha(0.05, 1) == pytest.approx(0.05)
    assert segment_alpha(0.05, 8) == pytest.approx(0.00625)
    assert segment_alpha(0.05, 9) * 9 == pytest.approx(0.05)


@pytest.mark.parametrize(("alpha", "tracked"), [(0.0, 4), (1.0, 4), (0.05, 0), (-0.1, 2)])
def test_levels_and_counts_outside_their_range_are_refused(alpha: float, tracked: int) -> None:
    with pytest.raises(ValueError):
        segment_alpha(alpha, tracked)


def _null_trials(tracked: int) -> tuple[float, float]:
    """300 trials x 1,500 cases, equal models, 8 segments with skewed shares, a look after every
    case: (share of trials in which any segment's interval ever excluded parity, share in which
    the overall verdict or any segment read a wrong direction at the default tolerance 0.05).
    See tests/policies/_segments_sim.py for what each reading counts (upper bounds)."""
    trials, cases, k = 300, 1500, 8
    rng = np.random.default_rng(2027)
    y = (1 + simulate_case_scores(rng, trials, cases, win_rate=0.5)) / 2
    parts = split(y, assign(rng, trials, cases, [0.30, 0.20, 0.15, 0.10, 0.10, 0.05, 0.05, 0.05]), k)
    a = segment_alpha(0.05, tracked)
    segs = null_firsts(parts.y, parts.counts.reshape(-1), [a], tolerance=0.05)
    whole = null_firsts(y, np.full(trials, cases), [0.05], tolerance=0.05)

    def any_seg(reading: str) -> np.ndarray:
        return np.asarray((segs[a, reading] > 0).reshape(trials, k).any(axis=1))

    strict = any_seg("parity").mean()
    wrong = (any_seg("above") | any_seg("below") | (whole[0.05, "above"] > 0) | (whole[0.05, "below"] > 0)).mean()
    return float(strict), float(wrong)


def test_eight_null_segments_read_wrong_together_at_most_alpha() -> None:
    """Bonferroni over the tracked values bounds the chance that ANY segment reads wrong by the
    trial's level whatever the tolerance, with looks after every case. Checked at the strictest
    reading (tolerance 0: a segment's interval ever excludes parity), split over 8 (the weakest
    split a trial of 8 segments gets; the default cap splits over 17): 3.0% on this seed (one
    standard error 1 point); with the split removed (every segment at 0.05) 27.0%, so the
    assertion fails without it. The issue's figure, the overall verdict or any segment reading
    ``candidate_better`` or ``regression`` at the default tolerance 0.05, is 0.7% here (3.7%
    unsplit: too rare at this size to catch a missing split, hence the strict reading);
    bench/segments.py has the 2,000-trial x 5,000-case run."""
    strict, wrong = _null_trials(8)
    assert strict <= 0.05, f"{strict:.1%} of null trials had a segment excluding parity"
    assert wrong <= 0.05, f"{wrong:.1%} of null trials read a wrong direction"


def test_the_simulated_segment_paths_are_the_shipped_fold() -> None:
    """The simulation's regrouping keeps each segment's cases in trial order, and its exact path
    (``first_code``) is :func:`policies.stream.fold_cases` folded case by case on each segment's
    cases at the segment level: the bench's detection figures are the shipped verdict's. A floor
    of 100 cases (the default is 20) makes the floor decide some of the first looks."""
    rng = np.random.default_rng(11)
    trials, cases, k = 2, 900, 4
    seg = assign(rng, trials, cases, [1.0] * k)
    x = np.where(seg == 0, simulate_case_scores(rng, trials, cases, win_rate=0.30),
                 simulate_case_scores(rng, trials, cases, win_rate=0.60))
    parts = split((1 + x) / 2, seg, k)
    lengths = parts.counts.reshape(-1)
    a = segment_alpha(0.05, 17)
    floor = 100
    codes = (REGRESSION, NOT_WORSE, EQUIVALENT, BETTER)
    got = first_code(parts.y, lengths, alpha=a, tolerance=0.05, min_cases=floor, codes=codes)
    for row in range(trials * k):
        t, s = divmod(row, k)
        c = int(lengths[row])
        assert np.array_equal(parts.at[row, :c], np.nonzero(seg[t] == s)[0] + 1)
        state, first = None, 0
        for i, v in enumerate(x[t][seg[t] == s]):
            folded = fold_cases(state, [(i + 1, float(v))], alpha=a, tolerance=0.05, min_cases=floor,
                                expected_cases=1000)
            state = folded.state
            if VERDICT_CODES.index(folded.verdict) in codes:
                first = i + 1
                break
        assert first == got[row] > 0, (row, first, got[row])
    assert (trial_case(parts.at, got) > 0).all()
