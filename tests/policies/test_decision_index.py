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


def test_half_width_in_place_is_the_formula_bit_for_bit() -> None:
    """``confseq.half_width`` works in place on large arrays: the same floats as the formula."""
    import math

    from policies.confseq import half_width

    def formula(n: object, variance: object, *, alpha: float, r2: float) -> object:
        n_arr = np.asarray(n, dtype=np.float64)
        v = np.maximum(np.asarray(variance, dtype=np.float64), 0.0)
        g = n_arr * r2 * v + 1.0
        return np.sqrt(2.0 * g / (n_arr * n_arr * r2) * (0.5 * np.log(g) - math.log(alpha)))

    rng = np.random.default_rng(31)
    cases: list[tuple[object, object]] = [
        (np.arange(1, 101.0), rng.random((30, 100))), (np.arange(1, 101), rng.random((30, 100)) - 0.1),
        (5, 0.3), (np.arange(1, 6.0), 0.2), (3, rng.random(7)), (np.arange(1, 4.0)[:, None], rng.random((3, 5))),
    ]
    for n, variance in cases:
        for alpha, r2 in ((0.05, 0.003), (0.01, 1.7)):
            got, want = half_width(n, variance, alpha=alpha, r2=r2), formula(n, variance, alpha=alpha, r2=r2)  # type: ignore[arg-type]
            assert type(got) is type(want) and np.shape(got) == np.shape(want)
            assert np.array_equal(got, want)
