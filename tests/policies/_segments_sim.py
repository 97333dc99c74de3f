"""Seeded simulations of a trial read by segments (issue 27), vectorised with numpy.

Shared by tests/policies/test_segment_alpha.py (reduced) and bench/segments.py (2,000 trials x
5,000 cases). A simulated trial's cases are assigned to K segments by seeded draws (shares
given); every segment folds its own cases in trial order into its own betting sequence
(:mod:`policies.betting`, as :func:`policies.stream.fold_cases` does) at the segment level, and
the overall stream folds every case at the trial's level. Looks after every case: a segment's
state changes only on its own cases, so looking after each of those is looking after every case.

Two readings:

- :func:`null_firsts` (equal models, wrong = ``candidate_better`` or ``regression``): the first
  case at which a sequence's capital at ``0.5 + tolerance`` (K+) or at ``0.5 - tolerance`` (K-)
  reached ``2 / alpha``. Reading ``candidate_better`` at any look needs its interval's lower bound
  above 0.5 + tolerance, which needs K+(0.5 + tolerance) >= 2 / alpha at that look (the
  threshold is a grid point; the kept interval only ever holds bounds some look had), likewise
  ``regression``; so this counts every wrong verdict, with or without the floor and the
  intersection, and bounds the any-wrong rate from above. Measured on three grid points (the
  thresholds and parity), not the whole grid: 33x cheaper, same capital at those points.
  The same at parity (tolerance 0) gives the strictest reading: the interval excludes parity.
- :func:`first_code` (exact): the verdict path of :func:`policies.stream.fold_cases` (the full
  grid, the running intersection with its restart, the 20-case floor, the decision rule of
  :mod:`policies.decision`), and the first look whose kept verdict is in a set of codes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from policies import betting
from policies.decision import decide_index

PARITY = 0.5
#: The readings of :func:`null_firsts`.
READINGS = ("above", "below", "parity")
#: Cases per fold step of a simulation (the capital for all rows of a block x this many cases).
STEP = 100


@dataclass(frozen=True, slots=True)
class Split:
    """A block of trials' case scores regrouped by segment.

    ``y``: (trials * K, longest) win-rate scores of each (trial, segment) in trial order, padded
    past the segment's count. ``counts``: (trials, K). ``at``: (trials * K, longest) the trial's
    case count (1-based) at each segment case, 0 on padding.
    """

    y: NDArray[np.float64]
    counts: NDArray[np.int64]
    at: NDArray[np.int64]


def assign(rng: np.random.Generator, trials: int, cases: int, shares: Sequence[float]) -> NDArray[np.int64]:
    """The segment of every case, (trials, cases): independent draws with the given shares."""
    p = np.asarray(shares, dtype=np.float64)
    edges = np.cumsum(p / p.sum())
    out: NDArray[np.int64] = np.minimum(np.searchsorted(edges, rng.random((trials, cases)), side="right"),
                                        p.size - 1).astype(np.int64)
    return out


def split(y: NDArray[np.float64], seg: NDArray[np.int64], k: int) -> Split:
    """Regroup ``y`` (trials, cases) by ``seg``, keeping trial order within each segment."""
    trials, cases = y.shape
    order = np.argsort(seg, axis=1, kind="stable")
    counts = np.stack([(seg == s).sum(axis=1) for s in range(k)], axis=1)
    offsets = np.concatenate([np.zeros((trials, 1), dtype=np.int64), np.cumsum(counts, axis=1)[:, :-1]], axis=1)
    longest = max(int(counts.max()), 1)
    j = np.arange(longest)
    idx = np.minimum(offsets[:, :, None] + j, cases - 1)  # (trials, K, longest)
    src = np.take_along_axis(order[:, None, :].repeat(k, axis=1), idx, axis=2)
    real = j < counts[:, :, None]
    rows_y = np.where(real, np.take_along_axis(y[:, None, :].repeat(k, axis=1), src, axis=2), 0.5)
    at = np.where(real, src + 1, 0)
    return Split(rows_y.reshape(trials * k, longest), counts, at.reshape(trials * k, longest))


def _first(mask: NDArray[np.bool_]) -> NDArray[np.int64]:
    out: NDArray[np.int64] = np.where(mask.any(axis=1), mask.argmax(axis=1) + 1, 0)
    return out


def null_firsts(
    y: NDArray[np.float64], lengths: NDArray[np.int64], alphas: Sequence[float], *, tolerance: float,
) -> dict[tuple[float, str], NDArray[np.int64]]:
    """Per (alpha, reading), per row of ``y`` (win-rate scale, rows of the given lengths): the
    first look (1-based) at which the reading's capital reached 2 / alpha, 0 when none within
    the row's length. Readings: ``above`` K+(0.5 + tolerance) (needed for ``candidate_better``),
    ``below`` K-(0.5 - tolerance) (needed for ``regression``), ``parity`` K+(0.5) or K-(0.5)
    (the interval excludes parity: the strictest reading, tolerance 0). See the module docstring."""
    rows, t_len = y.shape
    m = np.array([PARITY - tolerance, PARITY, PARITY + tolerance])
    cap = betting.start(rows, m.size)
    keys = [(a, r) for a in alphas for r in READINGS]
    firsts = {key: np.zeros(rows, dtype=np.int64) for key in keys}
    for s in range(0, t_len, STEP):
        cap, lp, lm = betting.advance(cap, y[:, s:s + STEP], m)
        n = s + np.arange(1, lp.shape[1] + 1)
        live = n[None, :] <= lengths[:, None]
        for a in alphas:
            level = math.log(2.0 / a)
            hits = {"above": lp[..., 2] >= level, "below": lm[..., 0] >= level,
                    "parity": (lp[..., 1] >= level) | (lm[..., 1] >= level)}
            for r in READINGS:
                f = _first(live & hits[r])
                new = (firsts[a, r] == 0) & (f > 0)
                firsts[a, r][new] = s + f[new]
    return firsts


def first_code(
    y: NDArray[np.float64], lengths: NDArray[np.int64], *, alpha: float, tolerance: float, min_cases: int,
    codes: Sequence[int],
) -> NDArray[np.int64]:
    """Per row, the first look (1-based) whose kept verdict is one of ``codes`` (indices of
    :data:`policies.decision.VERDICT_CODES`), 0 when none within the row's length: the exact
    path of :func:`policies.stream.fold_cases`. A row is dropped once it has one."""
    rows, t_len = y.shape
    result = np.zeros(rows, dtype=np.int64)
    live = np.arange(rows)
    cap: betting.Capital | None = None
    run_lo, run_hi = np.zeros(rows), np.ones(rows)
    want = np.asarray(codes)
    for s in range(0, t_len, STEP):
        lo, hi, cap = betting.running_bounds(y[live, s:s + STEP], alpha=alpha, parity=PARITY, tolerance=tolerance,
                                             capital=cap)
        bad = lo > hi  # fold_cases: a miss that rejected one point both ways reads as that point
        mid = (lo + hi) / 2.0
        lo, hi = np.where(bad, mid, lo), np.where(bad, mid, hi)
        k_lo, k_hi = np.empty_like(lo), np.empty_like(hi)
        cur_lo, cur_hi = run_lo, run_hi
        for i in range(lo.shape[1]):  # policies.sequence.fold: intersect, restart when empty
            nlo, nhi = np.maximum(cur_lo, lo[:, i]), np.minimum(cur_hi, hi[:, i])
            empty = nlo > nhi
            cur_lo, cur_hi = np.where(empty, lo[:, i], nlo), np.where(empty, hi[:, i], nhi)
            k_lo[:, i], k_hi[:, i] = cur_lo, cur_hi
        n = s + np.arange(1, lo.shape[1] + 1)
        verdict = decide_index(k_lo, k_hi, n[None, :], parity=PARITY, tolerance=tolerance, min_cases=min_cases)
        hit = np.isin(verdict, want) & (n[None, :] <= lengths[live][:, None])
        f = _first(hit)
        done = f > 0
        result[live[done]] = s + f[done]
        keep = ~done & (lengths[live] > s + lo.shape[1])
        live, run_lo, run_hi = live[keep], cur_lo[keep], cur_hi[keep]
        cap = betting.Capital(cap.t, cap.total[keep], cap.spread[keep], cap.log_plus[keep], cap.log_minus[keep],
                              cap.eb_sum[keep], cap.eb_sq[keep])
        if live.size == 0:
            break
    return result


def trial_case(at: NDArray[np.int64], first: NDArray[np.int64]) -> NDArray[np.int64]:
    """The trial's case count at each row's segment look ``first`` (0 stays 0)."""
    pos = np.maximum(first - 1, 0)
    out: NDArray[np.int64] = np.where(first > 0, at[np.arange(at.shape[0]), pos], 0)
    return out


def wilson(hits: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion (the Monte-Carlo interval of a simulated rate)."""
    if n == 0:
        return 0.0, 1.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
