"""The array forms of the verdict rule give the codes of the plain forms (issue 29, goal 5).

``decide_index`` builds its codes in int8 and ``sequence.path`` skips masking on its first round
(every look live): both cheaper on the millions of looks a simulation decides. Checked against
the nested-``where`` rule and against :func:`policies.sequence.fold` look by look.
"""

from __future__ import annotations

import numpy as np

from policies.decision import BETTER, EQUIVALENT, INCONCLUSIVE, NOT_WORSE, REGRESSION, VERDICT_CODES, decide_index
from policies.sequence import SequenceState, fold, path


def _nested_where(lo: np.ndarray, hi: np.ndarray, n: np.ndarray, *, parity: float, tolerance: float,
                  min_cases: int) -> np.ndarray:
    above_floor = lo >= parity - tolerance
    code = np.where(lo > parity + tolerance, BETTER, np.where(
        hi < parity - tolerance, REGRESSION, np.where(above_floor & (hi <= parity + tolerance), EQUIVALENT,
                                                      np.where(above_floor, NOT_WORSE, INCONCLUSIVE))))
    out: np.ndarray = np.where(n >= min_cases, code, INCONCLUSIVE).astype(np.int8)
    return out


def test_decide_index_is_the_nested_rule() -> None:
    rng = np.random.default_rng(29)
    edges = np.array([0.0, 0.44, 0.45, np.nextafter(0.45, 1), 0.5, np.nextafter(0.55, 0), 0.55, 0.56, 1.0])
    for parity, tolerance in ((0.5, 0.05), (0.5, 0.0), (0.0, 0.1)):
        a = np.concatenate([rng.random(4_000), rng.choice(edges, 4_000)])
        b = np.concatenate([rng.random(4_000), rng.choice(edges, 4_000)])
        lo, hi = np.minimum(a, b).reshape(80, 100), np.maximum(a, b).reshape(80, 100)
        n = np.arange(1, 101)[None, :]
        got = decide_index(lo, hi, n, parity=parity, tolerance=tolerance, min_cases=20)
        assert got.dtype == np.int8
        assert np.array_equal(got, _nested_where(lo, hi, n, parity=parity, tolerance=tolerance, min_cases=20))
        one = decide_index(0.6, 0.7, 30, parity=parity, tolerance=tolerance, min_cases=20)
        assert one.shape == () and one.dtype == np.int8


def test_path_is_fold_look_by_look_with_restarts() -> None:
    rng = np.random.default_rng(30)
    rows, looks = 40, 120
    centre = np.where(np.arange(looks) < looks // 2, 0.62, 0.38)[None, :] + rng.normal(0, 0.01, (rows, looks))
    width = 0.3 / np.sqrt(np.arange(1, looks + 1))[None, :] * rng.uniform(0.5, 1.5, (rows, 1))
    lo, hi = centre - width, centre + width
    codes, restarts = path(lo, hi, parity=0.5, tolerance=0.05, min_cases=20)
    assert restarts.sum() > 0  # the restart rounds were taken
    for r in range(rows):
        state: SequenceState | None = None
        for t in range(looks):
            got = fold(state, n=t + 1, lower=float(lo[r, t]), upper=float(hi[r, t]), parity=0.5, tolerance=0.05,
                       min_cases=20, alpha=0.05, expected_cases=1000)
            state = got.state
            assert VERDICT_CODES[codes[r, t]] == got.verdict, (r, t)
        assert state is not None and state.restarts == restarts[r]
