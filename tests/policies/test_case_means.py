"""Per-case means, ranges and spreads (issue 24, items 9 and 12): the one computation both the
comparison group and the evidence comparison read."""

from __future__ import annotations

import math

import pytest

from policies.case_means import case_means, paired_cases, population_sd, run_spread


def test_matching_repetitions_collapse_to_case_means_before_averaging() -> None:
    # case a: two matched repeats; case b: one (its other repeat is missing on one side)
    got = paired_cases([("a", "r", 1, 0.0, 1.0), ("a", "r", 2, 0.2, 0.6), ("b", "r", 2, 1.0, 1.0)])
    a, b = got.cases
    assert (a.repetitions, a.baseline_mean, a.candidate_mean) == (2, 0.1, 0.8)
    assert a.baseline_range == (0.0, 0.2) and a.candidate_range == (0.6, 1.0)
    assert b.repetitions == 1 and b.delta == 0.0 and b.candidate_range == (1.0, 1.0)
    # each case weighs the same: (0.7 + 0.0) / 2, not the mean of the three pairs (0.4 + 0.4 + 0) / 3
    assert math.isclose(got.mean_delta or 0.0, 0.35)
    assert got.pairs == 3
    assert math.isclose(got.delta_spread or 0.0, 0.35)  # population sd of {0.7, 0.0}


def test_spreads_are_population_standard_deviations() -> None:
    assert population_sd([1.0, 3.0]) == 1.0 and population_sd([]) is None and population_sd([2.0]) == 0.0
    obs = [("a", "r", 1, 1.0), ("a", "r", 2, 3.0), ("b", "r", 1, 6.0)]
    assert case_means(obs) == [2.0, 6.0]
    assert run_spread(obs) == 2.0
    assert run_spread([]) is None


def test_no_pair_reads_nothing_and_a_repeat_given_twice_is_refused() -> None:
    empty = paired_cases([])
    assert empty.mean_delta is None and empty.delta_spread is None and empty.cases == ()
    with pytest.raises(ValueError):
        paired_cases([("a", "r", 1, 0.0, 1.0), ("a", "r", 1, 0.0, 1.0)])
