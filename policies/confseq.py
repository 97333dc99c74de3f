"""The decision rule: a normal-mixture confidence sequence for a running mean.

Howard, Ramdas, McAuliffe and Sekhon (2021, "Time-uniform, nonparametric,
nonasymptotic confidence sequences") give the two-sided normal-mixture boundary:
for a sum S_n of n centred observations with (sub-Gaussian) variance process
V_n = n sigma^2 and a mixing precision rho > 0,

    P( exists n : |S_n| >= sqrt( (V_n + rho) * log( (V_n + rho) / (rho * alpha^2) ) ) ) <= alpha.

Dividing by n gives a confidence sequence for the mean. Following the
asymptotic confidence sequences of Waudby-Smith et al. (the form Eppo and
GrowthBook ship), sigma^2 is the running sample variance, and with
r^2 = 1 / (rho-per-unit-variance) the half-width reads

    h_n = sqrt( 2 (n r^2 s_n^2 + 1) / (n^2 r^2) * log( sqrt(n r^2 s_n^2 + 1) / alpha ) ).

The interval mean_n +/- h_n holds at every n simultaneously with probability
at least 1 - alpha (asymptotically in the variance estimate), so a trial may be
looked at after every case without inflating its error rate.

Tuning: r^2 is chosen so the boundary is tightest when n s^2 = expected_cases
(i.e. at the trial's expected size, for the largest variance a score in [-1, 1]
can have). Minimising (m + rho) log((m + rho)/(rho alpha^2)) over rho gives
rho = m / x where x solves x = log(1 + x) - 2 log(alpha); the first step of
that fixed point from x = -2 log(alpha) is the closed form GrowthBook uses.

Everything here is vectorised: pass arrays for n, mean and variance to get the
boundary for every n at once (used by the simulations in tests/).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray


def mixture_x(alpha: float) -> float:
    """The root of x = log(1 + x) - 2 log(alpha) (fixed-point iteration, converges fast)."""
    if not 0 < alpha < 1:
        raise ValueError("alpha must be in (0, 1)")
    x = -2.0 * math.log(alpha)
    for _ in range(100):
        nxt = -2.0 * math.log(alpha) + math.log1p(x)
        if abs(nxt - x) < 1e-13:
            return nxt
        x = nxt
    return x


def tuning_r2(expected_cases: int, alpha: float, design_variance: float = 1.0) -> float:
    """r^2 that makes the half-width smallest at ``expected_cases`` for ``design_variance``.

    The design variance must be fixed before the data (1.0 is the largest a
    score in [-1, 1] can have); a data-driven choice would void the guarantee.
    """
    if expected_cases < 1:
        raise ValueError("expected_cases must be at least 1")
    if design_variance <= 0:
        raise ValueError("design_variance must be positive")
    return mixture_x(alpha) / (expected_cases * design_variance)


def half_width(
    n: ArrayLike, variance: ArrayLike, *, alpha: float, r2: float
) -> NDArray[np.float64]:
    """Half-width of the (1 - alpha) confidence sequence for the mean at n observations.

    ``variance`` is the running sample variance (any value >= 0; negative
    rounding noise is clipped). ``n`` must be >= 1.
    """
    n_arr = np.asarray(n, dtype=np.float64)
    v = np.maximum(np.asarray(variance, dtype=np.float64), 0.0)
    if np.any(n_arr < 1):
        raise ValueError("n must be at least 1")
    g = n_arr * r2 * v + 1.0
    return np.sqrt(2.0 * g / (n_arr * n_arr * r2) * (0.5 * np.log(g) - math.log(alpha)))


def bounds(
    n: ArrayLike,
    mean: ArrayLike,
    variance: ArrayLike,
    *,
    alpha: float = 0.05,
    expected_cases: int = 1000,
    design_variance: float = 1.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(lower, upper) of the confidence sequence for the mean, unclipped."""
    h = half_width(n, variance, alpha=alpha, r2=tuning_r2(expected_cases, alpha, design_variance))
    m = np.asarray(mean, dtype=np.float64)
    return m - h, m + h


def running_bounds(
    x: ArrayLike, *, alpha: float = 0.05, expected_cases: int = 1000
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Bounds after each observation along the last axis of ``x`` (shape preserved).

    The variance is the plug-in (divide-by-n) running variance.
    """
    arr = np.asarray(x, dtype=np.float64)
    n = np.arange(1, arr.shape[-1] + 1, dtype=np.float64)
    mean = np.cumsum(arr, axis=-1) / n
    var = np.cumsum(arr * arr, axis=-1) / n - mean * mean
    return bounds(n, mean, var, alpha=alpha, expected_cases=expected_cases)
