"""The betting fold's cheaper arithmetic gives the same bits as the plain one (issue 29, goal 2).

A fold folds each case's interval into the running intersection with plain floats (not a
:func:`policies.sequence.fold` and a numpy ``decide`` per case), gathers each distinct score's
growth factors instead of taking their logs per case, and mixes the bets one at a time instead
of reducing over them. Each is checked here against the straightforward form, bit for bit, on
seeded streams with restarts (a stream whose win rate flips midway empties the intersection).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from policies import betting
from policies.decision import VERDICT_CODES, decide, decide_index
from policies.sequence import SequenceState, fold
from policies.stream import StreamState, fold_cases

SETTINGS: dict[str, Any] = dict(alpha=0.05, tolerance=0.05, min_cases=20, expected_cases=1000)


def _flipping(seed: int, n: int) -> list[tuple[int, float]]:
    """Scores that favour the candidate, then the incumbent: the intersection empties (restarts)."""
    rng = np.random.default_rng(seed)
    first = rng.choice([1.0, 0.5, 0.0, 0.25], size=n // 2)
    second = rng.choice([-1.0, -0.5, 0.0, -0.25], size=n - n // 2)
    return [(i + 1, float(v)) for i, v in enumerate(np.concatenate([first, second]))]


def _mixed(seed: int, n: int) -> list[tuple[int, float]]:
    rng = np.random.default_rng(seed)
    return [(i + 1, float(v)) for i, v in enumerate(rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0, 0.75], size=n))]


def _plain_looks(prior: StreamState | None, cases: list[tuple[int, float]]) -> tuple[SequenceState | None, bool]:
    """The intersection as the fold made it before: one :func:`fold` per case, from the intervals
    the betting sequence gives after each case."""
    y = (1.0 + np.asarray([s for _, s in cases])) / 2.0
    capital = None if prior is None else prior.capital.capital()
    lows, highs, _ = betting.running_bounds(y, alpha=0.05, tolerance=0.05, capital=capital)
    state, contradicted = None if prior is None else prior.sequence, False
    first = 0 if prior is None else prior.capital.t
    for i in range(len(cases)):
        lo, hi = float(lows[i]), float(highs[i])
        if lo > hi:
            lo = hi = (lo + hi) / 2.0
        result = fold(state, n=first + i + 1, lower=lo, upper=hi, parity=0.5, **SETTINGS)
        state, contradicted = result.state, contradicted or result.contradicted
    return state, contradicted


@pytest.mark.parametrize("make", [_flipping, _mixed])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fold_cases_keeps_the_intersection_of_one_fold_per_case_bit_for_bit(make: Any, seed: int) -> None:
    cases = make(seed, 400)
    prior: StreamState | None = None
    restarts = 0
    for start, stop in ((0, 1), (1, 37), (37, 38), (38, 250), (250, 400)):
        part = cases[start:stop]
        expected, contradicted = _plain_looks(prior, part)
        got = fold_cases(prior, part, **SETTINGS)
        assert got.state.sequence == expected and got.contradicted == contradicted
        prior = got.state
        restarts = got.state.sequence.restarts if got.state.sequence else 0
    if make is _flipping:
        assert restarts >= 1  # the restart path was taken


def test_fold_cases_refuses_a_prior_kept_with_other_settings_as_before() -> None:
    state = fold_cases(None, _mixed(4, 30), **SETTINGS).state
    with pytest.raises(ValueError):
        fold_cases(state, _mixed(4, 40), **{**SETTINGS, "expected_cases": 500})


def test_decide_on_one_interval_is_decide_index() -> None:
    points = [0.0, 0.2, 0.44, 0.45, float(np.nextafter(0.45, 1)), 0.5, 0.55, float(np.nextafter(0.55, 0)), 0.6, 1.0]
    for lo in points:
        for hi in points:
            for n in (5, 20, 21):
                for parity, tol in ((0.5, 0.05), (0.0, 0.1), (0.5, 0.0)):
                    code = int(decide_index(lo, hi, n, parity=parity, tolerance=tol, min_cases=20))
                    assert decide(lo, hi, n=n, parity=parity, tolerance=tol, min_cases=20) == VERDICT_CODES[code]


def test_advance_gathers_the_growth_factors_and_mixes_the_bets_as_the_plain_form() -> None:
    """Distinct scores' factors gathered, bets mixed one at a time: the plain per-case logs and
    reductions give the same capital and mixtures, bit for bit (few scores, and many)."""
    m = betting.grid()
    rng = np.random.default_rng(7)
    for y in (rng.choice([0.0, 0.25, 0.5, 0.75, 1.0], size=(2, 120)), rng.random((2, 60))):
        cap = betting.start(2, m.size)
        new, lp, lm = betting.advance(cap, y, m)
        z = (y[..., None] - m)[..., None]
        plus = np.add.accumulate(np.concatenate([cap.log_plus[:, None],
                                                 np.log1p(betting.BETS / m[:, None] * z)], axis=1), axis=1)[:, 1:]
        minus = np.add.accumulate(np.concatenate([cap.log_minus[:, None],
                                                  np.log1p(-betting.BETS / (1.0 - m)[:, None] * z)], axis=1), axis=1)[:, 1:]

        def mix(parts: np.ndarray) -> np.ndarray:
            top = parts.max(axis=-1)
            out: np.ndarray = top + np.log(np.exp(parts - top[..., None]).sum(axis=-1)) - math.log(betting.BETS.size)
            return out

        assert np.array_equal(new.log_plus, plus[:, -1]) and np.array_equal(new.log_minus, minus[:, -1])
        assert np.array_equal(lp, mix(plus)) and np.array_equal(lm, mix(minus))
