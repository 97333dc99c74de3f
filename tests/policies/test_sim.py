"""The shared simulation draws what its docstring says (tests/policies/_sim.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.policies._sim import simulate_case_scores


@pytest.mark.parametrize(("win_rate", "tie_share", "audit_share"), [(0.5, 0.3, 0.1), (0.9, 0.1, 0.1), (0.6, 0.0, 0.0),
                                                                     (0.5, 0.95, 0.2), (0.5, 1.0, 0.0)])
def test_case_scores_are_the_three_way_split_of_the_draws(win_rate: float, tie_share: float, audit_share: float) -> None:
    """Bit for bit the nested-where form the seeded figures were first produced with."""
    got = simulate_case_scores(np.random.default_rng(5), 30, 2_000, win_rate=win_rate, tie_share=tie_share,
                               audit_share=audit_share)
    rng = np.random.default_rng(5)
    p_plus = win_rate - tie_share / 2

    def judgments() -> np.ndarray:
        u = rng.random((30, 2_000))
        return np.where(u < p_plus, 1.0, np.where(u < p_plus + tie_share, 0.0, -1.0))

    first, second = judgments(), judgments()
    want = np.where(rng.random((30, 2_000)) < audit_share, (first + second) / 2, first)
    assert np.array_equal(got, want) and np.array_equal(np.signbit(got), np.signbit(want))
