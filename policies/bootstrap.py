"""The reported interval: a case-cluster percentile bootstrap on aggregated counts.

Contract:

* Whole cases are resampled with replacement (a case audited twice carries both
  judgments, as its mean), ``resamples`` times (default 2,000), and the interval
  is the (alpha/2, 1 - alpha/2) percentiles of the resampled means.
* Resampling n cases with replacement from an empirical distribution over K
  distinct values is exactly a Multinomial(n, counts / n) draw of the K counts.
  So the bootstrap draws K counts per resample instead of n indices: its cost is
  O(resamples x K), flat in n after one pass of aggregation.
* The generator is seeded from a stable identity string (trial or experiment
  id, judge version, metric name; see :func:`bootstrap_identity`) and the
  counts are sorted by value, so the same evidence gives the same interval
  whatever order the cases arrived in.
* Below ``MIN_BOOTSTRAP_CASES`` (20) scored cases there is no interval (None).

:func:`direct_bootstrap_means` is the textbook index-resampling implementation,
kept as the reference the aggregated one is checked and benchmarked against.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from policies.scores import ScoreCounts, aggregate

MIN_BOOTSTRAP_CASES = 20
DEFAULT_RESAMPLES = 2_000


@dataclass(frozen=True, slots=True)
class Interval:
    """A closed interval ``[lower, upper]`` on a stated scale."""

    lower: float
    upper: float

    def __post_init__(self) -> None:
        if not self.lower <= self.upper:
            raise ValueError(f"lower {self.lower} above upper {self.upper}")


def bootstrap_identity(subject_id: str, judge_version: str, metric: str = "preference") -> str:
    """The identity a bootstrap is seeded from: subject (trial/experiment), judge version, metric."""
    return "\x1f".join((subject_id, judge_version, metric))


def seed_from_identity(identity: str) -> np.random.Generator:
    """A generator seeded by the SHA-256 of ``identity`` (stable across processes and versions)."""
    digest = hashlib.sha256(identity.encode("utf-8")).digest()
    return np.random.Generator(np.random.PCG64(int.from_bytes(digest[:16], "big")))


def bootstrap_means(counts: ScoreCounts, *, resamples: int, rng: np.random.Generator) -> np.ndarray:
    """``resamples`` bootstrap means from aggregated counts (one multinomial draw each)."""
    n = counts.n
    if n == 0:
        raise ValueError("cannot bootstrap zero cases")
    values = np.asarray(counts.values, dtype=np.float64)
    p = np.asarray(counts.counts, dtype=np.float64) / n
    draws = rng.multinomial(n, p, size=resamples)
    return (draws @ values) / n


def direct_bootstrap_means(
    case_scores: Iterable[float], *, resamples: int, rng: np.random.Generator, max_cells: int = 8_000_000
) -> np.ndarray:
    """Reference implementation: resample case indices directly.

    Works in blocks of resamples so that at most ``max_cells`` indices are held
    at once; its cost is O(resamples x n).
    """
    x = np.asarray(list(case_scores) if not isinstance(case_scores, np.ndarray) else case_scores, dtype=np.float64)
    n = x.size
    if n == 0:
        raise ValueError("cannot bootstrap zero cases")
    block = max(1, max_cells // n)
    out = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = x[idx].mean(axis=1)
    return out


def percentile_interval(means: np.ndarray, alpha: float) -> Interval:
    """The (alpha/2, 1 - alpha/2) percentiles of bootstrap means (linear interpolation).

    Bit for bit ``np.quantile(means, [alpha / 2, 1 - alpha / 2])`` (its default "linear"
    method), without its general machinery, which costs several times the partition itself
    (a trial evaluates after every case): the same virtual index and interpolation, in the same
    floating-point operations, on the same order statistics. Anything but a 1-D array of finite
    floats, or a level outside (0, 1), goes through ``np.quantile`` itself.
    """
    arr = np.asarray(means)
    quantiles = (alpha / 2, 1 - alpha / 2)
    if arr.ndim == 1 and arr.size and arr.dtype == np.float64 and 0 < alpha < 1:
        n = arr.size
        # numpy's virtual index (n - 1) q; below n - 1, the order statistics at its floor and next.
        virtual = [(n - 1) * q for q in quantiles]
        previous = [math.floor(v) if v < n - 1 else n - 1 for v in virtual]
        following = [min(p + 1, n - 1) for p in previous]
        part = np.partition(arr, sorted({0, n - 1, *previous, *following}))
        if math.isfinite(part[0]) and math.isfinite(part[-1]):  # NaN sorts last: every value finite
            ends = []
            for v, p, f in zip(virtual, previous, following):
                a, b = float(part[p]), float(part[f])
                # numpy's index past the end is -1: gamma = v + 1 there (b - a is 0 either way).
                t = v - (p if v < n - 1 else -1)
                diff = b - a
                ends.append(b - diff * (1 - t) if t >= 0.5 else a + diff * t)
            return Interval(ends[0], ends[1])
    lo, hi = np.quantile(means, list(quantiles))
    return Interval(float(lo), float(hi))


def bootstrap_interval(
    case_scores: Iterable[float] | Mapping[float, int] | ScoreCounts,
    *,
    identity: str,
    alpha: float = 0.05,
    resamples: int = DEFAULT_RESAMPLES,
) -> Interval | None:
    """The reported (1 - alpha) interval for the mean case score, or None below 20 cases.

    Scale: the mean case score, in [-1, 1]. See the module docstring.
    """
    counts = aggregate(case_scores)
    if counts.n < MIN_BOOTSTRAP_CASES:
        return None
    means = bootstrap_means(counts, resamples=resamples, rng=seed_from_identity(identity))
    return percentile_interval(means, alpha)
