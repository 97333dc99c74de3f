"""Confidence sequences for a running mean: the decision boundaries.

Two boundaries live here. Both give an interval ``mean_n +/- radius_n / n`` that
holds at every n at once (a *confidence sequence*, CS), so a trial may be looked
at after every case without inflating its error rate.

**Empirical-Bernstein mixture (what verdicts are decided on).** For
observations x_i in [-1, 1] with mean mu (conditionally on the past), Fan et
al.'s inequality exp(k z - psi(k) z^2) <= 1 + k z (z >= -1, 0 <= k < 1,
psi(k) = -log(1 - k) - k) applied to z = x_i gives, for every k in [0, 1),

    M_n(k) = exp( k * sum_i (x_i - mu) - psi(k) * Q_n ),   Q_n = sum_i x_i^2,

a nonnegative supermartingale with M_0 = 1 (Howard, Ramdas, McAuliffe and
Sekhon 2021, Theorem 4, with the fixed predictable centre 0). Any mixture
sum_j w_j M_n(k_j) with weights summing to 1 is one too, and Ville's inequality
bounds the chance that it *ever* reaches 2 / alpha by alpha / 2. So with
``radius(Q)`` the root s of  sum_j w_j exp(k_j s - psi(k_j) Q) = 2 / alpha,

    mean_n - radius(Q_n) / n  <=  mu  <=  mean_n + radius(Q_n) / n   for all n

with probability at least 1 - alpha (the lower side from x, the upper from -x,
alpha / 2 each). This is exact, not asymptotic: it holds at every n, for any
tie rate and any tuning, because the scores are bounded. The variance enters
only through Q_n, the sum of squared scores about parity, which is a function
of the score counts (the interval does not depend on the order of cases).

The mixing distribution is a half-normal over k with precision
rho = expected_cases * design_variance / x, x the root of
x = log(1 + x) - 2 log(alpha) (:func:`mixture_x`), discretised on a fixed
geometric grid of k (each grid point carries the half-normal mass of its cell,
renormalised over [0, 0.99]). For small k, psi(k) ~ k^2 / 2 and this is the
normal mixture of Howard et al. tuned to be tightest near Q = expected_cases;
the grid makes the mixture an exact finite sum, so no quadrature error enters
the guarantee. ``radius`` is found by Newton's method from above (the mixture
is convex increasing in s), so every iterate, and the returned value, is at
least the root: rounding can only widen the interval.

**Plug-in normal mixture (asymptotic; unbounded metrics only).** With the
running plug-in variance s_n^2 in place of a known variance,

    h_n = sqrt( 2 (n r^2 s_n^2 + 1) / (n^2 r^2) * log( sqrt(n r^2 s_n^2 + 1) / alpha ) )

is the two-sided normal-mixture boundary with a *data-dependent* variance. It
is valid only asymptotically (as the variance estimate settles); with small n,
small tuning sizes or skewed data it can fail badly (docs/statistics.md). It is
kept for numeric metrics with no declared bounds, which are marked asymptotic.

Everything is vectorised: pass arrays to get boundaries for every n at once.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

# The fixed grid of mixing points k (bets) for the empirical-Bernstein mixture.
_GRID_POINTS = 160
_GRID_LOW = 1e-5
_GRID_HIGH = 0.99


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


@dataclass(frozen=True, slots=True)
class Mixture:
    """A finite mixing distribution over bets k: points, log weights (summing to 1), psi(k)."""

    k: NDArray[np.float64]
    log_weight: NDArray[np.float64]
    psi: NDArray[np.float64]


@functools.lru_cache(maxsize=64)
def eb_mixture(expected_cases: float, alpha: float, design_variance: float = 1.0) -> Mixture:
    """The half-normal mixture over k tuned to be tightest near Q = expected_cases * design_variance.

    The tuning must be fixed before the data (1.0 is the largest mean square a
    score in [-1, 1] can have); a data-driven choice would void the guarantee.
    A trial's settings repeat at every evaluation, so each mixture is built once
    (its arrays are read-only).
    """
    if expected_cases < 1:
        raise ValueError("expected_cases must be at least 1")
    if design_variance <= 0:
        raise ValueError("design_variance must be positive")
    rho = expected_cases * design_variance / mixture_x(alpha)
    k = np.geomspace(_GRID_LOW, _GRID_HIGH, _GRID_POINTS)
    edges = np.concatenate(([0.0], np.sqrt(k[:-1] * k[1:]), [_GRID_HIGH]))
    scale = math.sqrt(rho / 2.0)
    # Half-normal mass of each cell, from erfc so that far-tail cells keep their precision.
    tail = np.array([math.erfc(e * scale) for e in edges])
    mass = tail[:-1] - tail[1:]
    keep = mass > 0
    k, mass = k[keep], mass[keep]
    log_weight = np.log(mass) - math.log(float(mass.sum()))
    psi = -np.log1p(-k) - k
    for part in (k, log_weight, psi):
        part.setflags(write=False)
    return Mixture(k, log_weight, psi)


def eb_radius(
    q: ArrayLike, *, alpha: float, expected_cases: float, design_variance: float = 1.0
) -> NDArray[np.float64]:
    """radius(Q): the CS for the mean after n observations in [-1, 1] is mean +/- radius(Q_n) / n.

    ``q`` is Q_n = sum of squared observations (any shape; must be >= 0). The
    returned radius is never below the exact root (see the module docstring).
    """
    mix = eb_mixture(expected_cases, alpha, design_variance)
    q_arr = np.asarray(q, dtype=np.float64)
    if np.any(q_arr < 0):
        raise ValueError("Q must be non-negative")
    flat = q_arr.reshape(-1, 1)
    target = math.log(2.0 / alpha)
    a = mix.log_weight - mix.psi * flat  # (m, K): log of each term at s = 0
    # Any single term reaching the target puts the sum above it: an upper bound on the root.
    s = np.min((target - a) / mix.k, axis=1)
    for _ in range(200):
        e = a + mix.k * s[:, None]
        top = e.max(axis=1)
        ex = np.exp(e - top[:, None])
        total = ex.sum(axis=1)
        g = top + np.log(total)
        slope = (ex @ mix.k) / total
        step = (g - target) / slope
        s = s - np.maximum(step, 0.0)  # from above, Newton steps on a convex function only go down
        if float(np.max(step, initial=0.0)) <= 1e-12 * (1.0 + float(np.max(s, initial=0.0))):
            break
    # Guard against the last rounding step landing a hair below the root.
    s = s * (1.0 + 1e-9) + 1e-12
    out: NDArray[np.float64] = s.reshape(q_arr.shape)
    return out


def eb_bounds(
    n: ArrayLike,
    mean: ArrayLike,
    q: ArrayLike,
    *,
    alpha: float = 0.05,
    expected_cases: float = 1000,
    design_variance: float = 1.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(lower, upper) of the empirical-Bernstein CS for a mean of observations in [-1, 1], unclipped."""
    n_arr = np.asarray(n, dtype=np.float64)
    if np.any(n_arr < 1):
        raise ValueError("n must be at least 1")
    h = eb_radius(q, alpha=alpha, expected_cases=expected_cases, design_variance=design_variance) / n_arr
    m = np.asarray(mean, dtype=np.float64)
    return m - h, m + h


def tuning_r2(expected_cases: int, alpha: float, design_variance: float = 1.0) -> float:
    """r^2 that makes the plug-in boundary smallest at ``expected_cases`` for ``design_variance``."""
    if expected_cases < 1:
        raise ValueError("expected_cases must be at least 1")
    if design_variance <= 0:
        raise ValueError("design_variance must be positive")
    return mixture_x(alpha) / (expected_cases * design_variance)


def half_width(
    n: ArrayLike, variance: ArrayLike, *, alpha: float, r2: float
) -> NDArray[np.float64]:
    """Half-width of the asymptotic plug-in (1 - alpha) normal-mixture CS at n observations.

    ``variance`` is the running sample variance (any value >= 0; negative
    rounding noise is clipped). ``n`` must be >= 1.
    """
    n_arr = np.asarray(n, dtype=np.float64)
    v = np.maximum(np.asarray(variance, dtype=np.float64), 0.0)
    if np.any(n_arr < 1):
        raise ValueError("n must be at least 1")
    # sqrt(2 g / (n^2 r2) (log(g) / 2 - log(alpha))), g = n r2 v + 1: the same operations in the
    # same order, made in place where the operand is a fresh array (a simulation passes millions
    # of looks: fewer temporaries of that size).
    g = n_arr * r2 * v + 1.0
    if not isinstance(g, np.ndarray) or g.ndim == 0:
        out: NDArray[np.float64] = np.sqrt(2.0 * g / (n_arr * n_arr * r2) * (0.5 * np.log(g) - math.log(alpha)))
        return out
    width = np.multiply(2.0, g)
    width /= n_arr * n_arr * r2
    log_term = np.log(g)
    log_term *= 0.5
    log_term -= math.log(alpha)
    width *= log_term
    return np.sqrt(width, out=width)


def bounds(
    n: ArrayLike,
    mean: ArrayLike,
    variance: ArrayLike,
    *,
    alpha: float = 0.05,
    expected_cases: int = 1000,
    design_variance: float = 1.0,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(lower, upper) of the asymptotic plug-in CS for the mean, unclipped."""
    h = half_width(n, variance, alpha=alpha, r2=tuning_r2(expected_cases, alpha, design_variance))
    m = np.asarray(mean, dtype=np.float64)
    return m - h, m + h


def running_bounds(
    x: ArrayLike, *, alpha: float = 0.05, expected_cases: int = 1000
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Asymptotic plug-in bounds after each observation along the last axis of ``x``.

    The variance is the plug-in (divide-by-n) running variance.
    """
    arr = np.asarray(x, dtype=np.float64)
    n = np.arange(1, arr.shape[-1] + 1, dtype=np.float64)
    mean = np.cumsum(arr, axis=-1) / n
    var = np.cumsum(arr * arr, axis=-1) / n - mean * mean
    return bounds(n, mean, var, alpha=alpha, expected_cases=expected_cases)


def unique_inverse(q: NDArray[np.float64]) -> tuple[NDArray[np.float64], NDArray[np.intp]]:
    """``np.unique(q, return_inverse=True)`` with the index flat: the sorted distinct values of
    ``q`` and, for each element of ``q.ravel()``, the position of its value among them.

    Sums of squared case scores (the Q of :func:`running_eb_bounds`) are multiples of 1/4, a
    few thousand distinct values among millions in a simulation: then the same distinct values
    come from counting the quarter steps, without sorting every element. Any other input goes
    through ``np.unique``. The result is the same either way.
    """
    flat = np.asarray(q, dtype=np.float64).ravel()
    if flat.size:
        quarters = flat * 4.0
        low, high = float(quarters.min()), float(quarters.max())
        if 0.0 <= low and high <= 4.0 * flat.size + 1024:
            steps = quarters.astype(np.intp)
            if np.array_equal(steps, quarters):
                present = np.bincount(steps) > 0
                position = np.cumsum(present, dtype=np.intp) - 1
                return np.flatnonzero(present) / 4.0, position[steps]
    distinct, index = np.unique(flat, return_inverse=True)
    return distinct, index.ravel()


def running_eb_bounds(
    x: ArrayLike, *, alpha: float = 0.05, expected_cases: float = 1000
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Empirical-Bernstein bounds after each observation along the last axis of ``x`` (values in [-1, 1]).

    The radius is computed once per distinct Q (cheap when the scores take a
    few values, as case scores do) and looked up for every prefix.
    """
    arr = np.asarray(x, dtype=np.float64)
    n = np.arange(1, arr.shape[-1] + 1, dtype=np.float64)
    mean = np.cumsum(arr, axis=-1) / n
    q = np.cumsum(arr * arr, axis=-1)
    distinct, index = unique_inverse(q)
    radius = eb_radius(distinct, alpha=alpha, expected_cases=expected_cases)[index.reshape(q.shape)]
    h = radius / n
    return mean - h, mean + h
