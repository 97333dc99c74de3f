"""``confseq.unique_inverse``: the sort-free path gives what ``np.unique`` gives, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from policies import confseq
from tests.policies._sim import simulate_case_scores


def _reference(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    distinct, index = np.unique(q, return_inverse=True)
    return distinct, index.ravel()


@pytest.mark.parametrize("ties", [0.0, 0.3, 0.95])
def test_quarter_sums_match_np_unique(ties: float) -> None:
    x = simulate_case_scores(np.random.default_rng(9), 40, 3_000, win_rate=0.5, tie_share=ties)
    q = np.cumsum(x * x, axis=-1)
    distinct, index = confseq.unique_inverse(q)
    want_distinct, want_index = _reference(q)
    assert distinct.dtype == want_distinct.dtype and np.array_equal(distinct, want_distinct)
    assert np.array_equal(index, want_index)
    assert np.array_equal(distinct[index].reshape(q.shape), q)


@pytest.mark.parametrize("q", [
    np.array([0.3, 0.1, 0.3, 2.0]),  # not quarters: np.unique
    np.array([[0.25, 0.0], [1e9, 0.25]]),  # quarters too far apart to count: np.unique
    np.array([0.0, 0.0, 0.0]),
    np.array([-0.25, 0.5]),  # negative: np.unique (eb_radius refuses it)
    np.array([np.nan, 1.0]),
    np.zeros((0, 3)),
])
def test_other_inputs_match_np_unique(q: np.ndarray) -> None:
    distinct, index = confseq.unique_inverse(q)
    want_distinct, want_index = _reference(q)
    assert np.array_equal(distinct, want_distinct, equal_nan=True) and np.array_equal(index, want_index)


def test_running_eb_bounds_unchanged() -> None:
    """The bounds built on it equal the bounds built on ``np.unique`` (the shipped rule before)."""
    x = simulate_case_scores(np.random.default_rng(10), 50, 2_000, win_rate=0.55)
    lo, hi = confseq.running_eb_bounds(x)
    n = np.arange(1, x.shape[-1] + 1, dtype=np.float64)
    mean = np.cumsum(x, axis=-1) / n
    q = np.cumsum(x * x, axis=-1)
    distinct, index = np.unique(q, return_inverse=True)
    h = confseq.eb_radius(distinct, alpha=0.05, expected_cases=1000)[index.reshape(q.shape)] / n
    assert np.array_equal(lo, mean - h) and np.array_equal(hi, mean + h)
