"""A betting confidence sequence for the win rate: the hedged capital process, mixed constant bets.

Waudby-Smith and Ramdas, "Estimating means of bounded random variables by betting"
(JRSS-B 2024). A case's win-rate score is y = (1 + x) / 2 in [0, 1]. For a candidate mean m,
a gambler who bets lambda_i(m) >= 0 on "y_i > m" before seeing case i holds

    K+_t(m) = prod_{i <= t} (1 + lambda+_i(m) (y_i - m)),     0 <= lambda+_i(m) <= c / m,

and one who bets the other way holds K-_t(m) = prod (1 - lambda-_i(m) (y_i - m)),
0 <= lambda-_i(m) <= c / (1 - m) (c = :data:`TRUNCATION` < 1 keeps every factor >= 1 - c > 0).
When the true mean mu is <= m, each factor of K+(m) has conditional expectation
1 + lambda (mu - m) <= 1, so K+(m) is a nonnegative supermartingale for *every* m >= mu
(symmetrically K-(m) for every m <= mu), and by Ville's inequality it ever reaches
``2 / alpha`` with probability at most alpha / 2.

**The bets (a mixture of constant bets, the paper's "diversified Kelly").** Five gamblers per
side and grid point bet the constant fractions b in :data:`BETS` (c/5, 2c/5, .., c with
c = 0.75) of the largest allowed bet, lambda+ = b / m and lambda- = b / (1 - m), and K+(m) is
the equal-weight mean of their wealths (a mean of supermartingales is one; each gambler's wealth
is kept, the mixture is read from them). Measured against the aGRAPA plug-in bets shipped first
(lambda = (mu_hat - m) / (var_hat + (mu_hat - m)^2), truncation 0.5), the mixture decides
faster at every true win rate from 0.55 to 0.70, most at the 90th percentile of small effects
(docs/statistics.md section 4b). A state kept with aGRAPA capital is read by giving every
gambler that capital (:meth:`BettingState.from_dict`): old capital times the mixture's growth
from then on is still a supermartingale. ``total`` and ``spread`` (the running sums the aGRAPA
bets needed) are still kept.

**The interval on a grid.** Capital is kept on a fixed grid of m (:func:`grid`: every
hundredth, plus the decision thresholds parity - tolerance, parity, parity + tolerance
exactly). With g the largest grid point such that every grid point <= g has K+ >= 2 / alpha,
the lower bound is the float just above g (0 when the smallest point is not rejected), and the
upper bound is the float just below the smallest h such that every grid point >= h has
K- >= 2 / alpha (1 when none). It is exact, not asymptotic: the lower bound exceeds mu only if
g >= mu, and then the smallest grid point >= mu, whose K+ is a supermartingale, was rejected
at that case; by Ville that happens at any case at all with probability at most alpha / 2
(the upper side likewise). Because the thresholds are grid points, the verdict rule of
:mod:`policies.decision` reads from this interval exactly what the tests at the thresholds
say: lower > parity + tolerance iff K+(parity + tolerance) reached 2 / alpha (with every point
below), and so on.

**The hybrid (measured, not shipped).** :func:`running_bounds` can intersect this interval,
case by case, with the empirical-Bernstein interval of :mod:`policies.confseq`; each then
runs at alpha / 2 and the union bound keeps the total at alpha. It was slower at every win
rate (docs/statistics.md section 4b has the measurements that chose betting alone).

**Order and state.** The capital is folded case by case in a defined order (the store's
scoring sequence; with constant bets the capital would not depend on the order, but a state is
folded and compared as a sequence all the same, and old aGRAPA capital did depend on it),
and everything it needs is :class:`BettingState`. Folding a batch is vectorised along the
cases, and every running sum is a sequential accumulation that starts from the
carried value, so folding cases 1..N in one batch or in any split into batches gives
bit-identical states: two sidecars, or one across a restart, agree exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from policies import confseq

#: Truncation c of the bets: every factor stays >= 1 - c.
TRUNCATION = 0.75
#: The constant bets mixed with equal weight, as fractions of the largest allowed (c / m or c / (1 - m)).
BETS = TRUNCATION * np.arange(1, 6, dtype=np.float64) / 5.0
#: Name of the bet rule a kept state was built with (states without one hold aGRAPA capital).
BET_RULE = "dkelly5"
#: Weight, in cases, of the prior guess 1/2 in the running mean kept with the state.
PRIOR_CASES = 1.0
#: Elements of (cases x rows x grid x bets) one fold step holds at most.
_STEP_BUDGET = 2_000_000
#: Grid of candidate means: every 1 / GRID_STEPS, plus the decision thresholds.
GRID_STEPS = 100
#: Methods a trial can decide on: the betting CS alone, or intersected with empirical Bernstein.
METHODS = ("betting", "hybrid")


def grid(parity: float = 0.5, tolerance: float = 0.05) -> NDArray[np.float64]:
    """The candidate means capital is kept for: interior hundredths plus the thresholds, sorted."""
    points = {i / GRID_STEPS for i in range(1, GRID_STEPS)}
    points |= {parity - tolerance, parity, parity + tolerance}
    out = np.array(sorted(p for p in points if 0.0 < p < 1.0), dtype=np.float64)
    return out


@dataclass(frozen=True, slots=True)
class Capital:
    """The carried capital of R parallel sequences (R = 1 for a trial; many in simulations).

    ``t``: cases folded. ``total``: sum of y. ``spread``: sum of (y_i - mu_hat_i)^2.
    ``log_plus``/``log_minus``: log K+ and log K- on the grid, shape (R, G).
    ``eb_sum``/``eb_sq``: sum of x and of x^2 on the score scale (the hybrid's EB half).
    """

    t: int
    total: NDArray[np.float64]
    spread: NDArray[np.float64]
    log_plus: NDArray[np.float64]
    log_minus: NDArray[np.float64]
    eb_sum: NDArray[np.float64]
    eb_sq: NDArray[np.float64]


def start(rows: int, points: int) -> Capital:
    z = np.zeros(rows)
    parts = (rows, points, BETS.size)
    return Capital(0, z, z.copy(), np.zeros(parts), np.zeros(parts), z.copy(), z.copy())


def _accumulate(first: NDArray[np.float64], steps: NDArray[np.float64]) -> NDArray[np.float64]:
    """Running sums along the last axis starting from ``first`` (one sequential recurrence, so
    the result does not depend on how a stream was cut into batches). Excludes ``first``."""
    out: NDArray[np.float64] = np.add.accumulate(np.concatenate([first[..., None], steps], axis=-1), axis=-1)
    return out[..., 1:]


def _accumulate_cases(first: NDArray[np.float64], steps: NDArray[np.float64]) -> NDArray[np.float64]:
    """:func:`_accumulate` along the cases axis of (R, T, ...) steps from (R, ...)."""
    out: NDArray[np.float64] = np.add.accumulate(np.concatenate([first[:, None], steps], axis=1), axis=1)
    return out[:, 1:, :]


def _mixture(log_parts: NDArray[np.float64]) -> NDArray[np.float64]:
    """log of the equal-weight mean of exp(log_parts) over the last (bets) axis."""
    # The max and the sum over the few bets one bet at a time: what ``max(axis=-1)`` and
    # ``sum(axis=-1)`` compute (the sum in the same order, bit for bit:
    # tests/policies/test_betting_fold.py), without a reduction's cost per (case, grid point),
    # and each bet's growth exp(part - top) made in one scratch array, not a copy of all the parts.
    bets = [log_parts[..., d] for d in range(log_parts.shape[-1])]
    top = bets[0]
    for part in bets[1:]:
        top = np.maximum(top, part)
    total = np.exp(bets[0] - top)
    scratch = np.empty_like(total)
    for part in bets[1:]:
        np.subtract(part, top, out=scratch)
        np.exp(scratch, out=scratch)
        total += scratch
    out: NDArray[np.float64] = top + np.log(total) - math.log(BETS.size)
    return out


def advance(
    cap: Capital, y: NDArray[np.float64], m: NDArray[np.float64]
) -> tuple[Capital, NDArray[np.float64], NDArray[np.float64]]:
    """Fold cases ``y`` (shape (R, T), win-rate scale) into ``cap``.

    Returns the new capital and the mixtures' log K+, log K- after each case, shape (R, T, G).
    """
    rows, t_len = y.shape
    idx = cap.t + np.arange(1, t_len + 1, dtype=np.float64)  # case numbers t + 1 .. t + T
    total = _accumulate(cap.total, y)  # sum through each case
    mu_after = (0.5 * PRIOR_CASES + total) / (idx + PRIOR_CASES)
    spread = _accumulate(cap.spread, (y - mu_after) ** 2)
    lam_plus = BETS / m[:, None]  # (G, D)
    lam_minus = BETS / (1.0 - m)[:, None]
    # A case's growth factors depend on its score alone, and a trial's scores take a few values:
    # each distinct value's factors are computed once and gathered (the same operations on the
    # same operands, so the same bits; the logs were most of a fold's cost).
    values, which = np.unique(y, return_inverse=True)
    if values.size * 2 <= y.size:
        z = (values[:, None] - m)[..., None]  # (U, G, 1)
        pick = which.reshape(y.shape)
        step_plus, step_minus = np.log1p(lam_plus * z)[pick], np.log1p(-lam_minus * z)[pick]  # (R, T, G, D)
    else:
        z = (y[..., None] - m)[..., None]  # (R, T, G, 1)
        step_plus, step_minus = np.log1p(lam_plus * z), np.log1p(-lam_minus * z)
    parts_plus = _accumulate_cases(cap.log_plus, step_plus)  # (R, T, G, D)
    parts_minus = _accumulate_cases(cap.log_minus, step_minus)
    x = 2.0 * y - 1.0
    new = Capital(
        cap.t + t_len, total[:, -1], spread[:, -1], parts_plus[:, -1], parts_minus[:, -1],
        _accumulate(cap.eb_sum, x)[:, -1], _accumulate(cap.eb_sq, x * x)[:, -1],
    )
    return new, _mixture(parts_plus), _mixture(parts_minus)


def bounds_from_capital(
    log_plus: NDArray[np.float64], log_minus: NDArray[np.float64], m: NDArray[np.float64], *, alpha: float
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(lower, upper) on the win-rate scale from log capital (..., G): see the module docstring."""
    level = math.log(2.0 / alpha)
    rej_lo = log_plus >= level
    rej_hi = log_minus >= level
    g = m.size
    # Length of the rejected prefix (lower side) and suffix (upper side).
    k_lo = np.where(rej_lo.all(axis=-1), g, np.argmin(rej_lo, axis=-1))
    k_hi = np.where(rej_hi.all(axis=-1), g, np.argmin(rej_hi[..., ::-1], axis=-1))
    above = np.nextafter(m, np.inf)
    below = np.nextafter(m, -np.inf)
    lower = np.where(k_lo > 0, above[np.maximum(k_lo - 1, 0)], 0.0)
    upper = np.where(k_hi > 0, below[np.minimum(g - k_hi, g - 1)], 1.0)
    return lower, upper


def running_bounds(
    y: ArrayLike,
    *,
    alpha: float = 0.05,
    parity: float = 0.5,
    tolerance: float = 0.05,
    method: str = "betting",
    expected_cases: float = 1000,
    capital: Capital | None = None,
    chunk: int = 250,
) -> tuple[NDArray[np.float64], NDArray[np.float64], Capital]:
    """The interval (win-rate scale) after every case of ``y`` (shape (R, T) or (T,), values in
    [0, 1]), continuing from ``capital`` (None: from no cases), and the capital after the last.

    ``method`` "betting": the betting CS at ``alpha``; "hybrid": the betting CS at alpha / 2
    intersected with the empirical-Bernstein CS (``expected_cases``) at alpha / 2.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}")
    arr = np.asarray(y, dtype=np.float64)
    one = arr.ndim == 1
    arr = arr.reshape(1, -1) if one else arr
    if np.any((arr < 0) | (arr > 1)):
        raise ValueError("win-rate scores must lie in [0, 1]")
    m = grid(parity, tolerance)
    cap = capital if capital is not None else start(arr.shape[0], m.size)
    bet_alpha = alpha if method == "betting" else alpha / 2
    chunk = max(1, min(chunk, _STEP_BUDGET // (arr.shape[0] * m.size * BETS.size)))
    lows, highs = [], []
    for s in range(0, arr.shape[1], chunk):
        part = arr[:, s:s + chunk]
        before = cap
        cap, lp, lm = advance(cap, part, m)
        lo, hi = bounds_from_capital(lp, lm, m, alpha=bet_alpha)
        if method == "hybrid":
            x = 2.0 * part - 1.0
            n = before.t + np.arange(1, part.shape[1] + 1, dtype=np.float64)
            ssum = _accumulate(before.eb_sum, x)
            q = _accumulate(before.eb_sq, x * x)
            distinct, index = confseq.unique_inverse(q)
            radius = confseq.eb_radius(distinct, alpha=alpha / 2, expected_cases=expected_cases)
            h = radius[index.reshape(q.shape)] / n
            elo = (1.0 + np.maximum(-1.0, ssum / n - h)) / 2.0
            ehi = (1.0 + np.minimum(1.0, ssum / n + h)) / 2.0
            lo, hi = np.maximum(lo, elo), np.minimum(hi, ehi)
        lows.append(lo)
        highs.append(hi)
    if not lows:
        empty = np.zeros((arr.shape[0], 0))
        return (empty[0], empty[0], cap) if one else (empty, empty.copy(), cap)
    low, high = np.concatenate(lows, axis=1), np.concatenate(highs, axis=1)
    if one:
        return low[0], high[0], cap
    return low, high, cap


@dataclass(frozen=True, slots=True)
class BettingState:
    """The capital a trial keeps between folds (JSON-safe via ``to_dict``): see :class:`Capital`.

    ``log_plus``/``log_minus`` hold the log capital of every (grid point, bet) pair, grid-major.
    A state kept before the mixed bets (no ``bets`` key: one aGRAPA capital per grid point) is
    read by giving every bet that capital: from then on each point's wealth is the old capital
    times the mixture's growth, still a supermartingale, so the sequence stays valid.
    """

    t: int
    total: float
    spread: float
    log_plus: tuple[float, ...]
    log_minus: tuple[float, ...]
    eb_sum: float
    eb_sq: float

    @classmethod
    def of(cls, cap: Capital) -> BettingState:
        if cap.total.shape != (1,):
            raise ValueError("a trial's state holds one sequence")
        return cls(cap.t, float(cap.total[0]), float(cap.spread[0]),
                   tuple(cap.log_plus[0].ravel().tolist()),  # Python floats, the same values
                   tuple(cap.log_minus[0].ravel().tolist()),
                   float(cap.eb_sum[0]), float(cap.eb_sq[0]))

    def capital(self) -> Capital:
        shape = (1, len(self.log_plus) // BETS.size, BETS.size)
        return Capital(self.t, np.array([self.total]), np.array([self.spread]),
                       np.array(self.log_plus).reshape(shape), np.array(self.log_minus).reshape(shape),
                       np.array([self.eb_sum]), np.array([self.eb_sq]))

    def to_dict(self) -> dict[str, Any]:
        return {"bets": BET_RULE, "t": self.t, "total": self.total, "spread": self.spread,
                "log_plus": list(self.log_plus), "log_minus": list(self.log_minus),
                "eb_sum": self.eb_sum, "eb_sq": self.eb_sq}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> BettingState:
        plus, minus = data["log_plus"], data["log_minus"]
        if not isinstance(plus, Sequence) or not isinstance(minus, Sequence) or len(plus) != len(minus):
            raise ValueError("log capital must be two lists of one length")
        rule = data.get("bets")
        if rule is None:  # an aGRAPA state: every bet starts from its capital
            plus = [v for v in plus for _ in range(BETS.size)]
            minus = [v for v in minus for _ in range(BETS.size)]
        elif rule != BET_RULE or len(plus) % BETS.size:
            raise ValueError(f"unknown bet rule {rule!r}")
        t = int(data["t"])
        if t < 0:
            raise ValueError("t cannot be negative")
        return cls(t, float(data["total"]), float(data["spread"]), tuple(map(float, plus)),
                   tuple(map(float, minus)), float(data["eb_sum"]), float(data["eb_sq"]))
