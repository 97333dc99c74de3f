"""A corpus result's interval and code for one metric (issue 13, item 3; issue 23, items 1, 2,
3, 6 and 7). Pure: per-item differences and a band in, an interval and a verdict code out;
:func:`policies.wording.corpus_wording` words it (*Candidate ahead*, *Parity*, *Candidate
behind*, *Inconclusive*), never an adoption word.

**The interval** (:func:`corpus_interval`, one rule for comparison groups, A/B comparisons and
the evidence comparison) is over per-item differences (an item's repetitions averaged first),
read once, when the run is complete:

- fewer than 20 items: none (``small sample``);
- every item has the same difference (no observed spread): a percentile bootstrap would be a
  zero-width "95%" interval, so it is never shown. With the metric's bounds known, the interval
  is the exact one for "no item differs": at most a share p = 1 - (alpha/2)^(1/n) of items could
  lie on each side unseen, so the mean lies in [d - p (d - lo), d + p (hi - d)]; without bounds
  there is none (``no observed spread``);
- otherwise the *expanded* percentile bootstrap (Hesterberg 2015): the case-cluster bootstrap's
  percentiles at alpha' with z_(1-alpha'/2) = sqrt(n / (n - 1)) t_(1-alpha/2, n-1). The plain
  percentile interval is too narrow at 20-30 items (its spread divides by n and it uses the
  normal quantile): 5.5-5.8% false "ahead/behind" between equal arms, against 4.2-4.6% expanded
  (docs/statistics.md).

While a run is still going its results are read again after every item, and a fixed-sample
interval re-read that way is not a 95% interval: no direction is shown before the run is
complete (``run_in_progress``), only the running estimate.

**The code** (:func:`corpus_code`) reads the tolerance the A/B seed's way, on an interval on a
"positive is the candidate better" scale (a lower-is-better metric's differences negated first)
with ``band`` the tolerance on that scale:

- ``candidate_better`` — the interval lies above ``+band`` (better by more than the tolerance);
- ``regression`` — it lies below ``-band`` (worse by more than the tolerance);
- ``equivalent`` — it lies within ``[-band, band]``;
- ``inconclusive`` — anything else, and no interval at all. Corpus results never read
  ``not_worse`` (that is a traffic code: its word is *Adoptable*).

An A/B comparison (:class:`ABRow`, :func:`ab_verdict`) reads directions the same way but parity
on its deltas, as the A/B specification defines ``equivalent`` ("every delta stays within the
tolerance"), every comparison with the tolerance exact (:mod:`policies.exact_tolerance`).

Bands: the paired judge's preference is a mean score in [-1, 1], whose win rate is
``(1 + mean) / 2``, so a tolerance ``t`` on the win-rate scale is ``2t`` on it; a pass rate
(a grader) is in [0, 1], so ``t`` itself; an absolute score ``t`` times its scale's width; a
latency or cost ``t`` times the baseline arm's mean (a relative band).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

from policies.bootstrap import MIN_BOOTSTRAP_CASES, Interval, bootstrap_interval
from policies.exact_tolerance import beyond, exact, snap, within

SMALL_SAMPLE = "small sample"
NO_SPREAD = ("no observed spread: every item has the same difference, so resampling cannot show any "
             "uncertainty and the metric has no declared bounds; no interval is shown")
NO_SPREAD_BOUNDED = ("no observed spread: every item has the same difference; the interval is the exact "
                     "bound on a share of items that could differ unseen")
IN_PROGRESS = ("run in progress: a fixed-sample interval read after every item is not a 95% interval, so "
               "no direction is shown before the run is complete")

Code = Literal["candidate_better", "equivalent", "regression", "inconclusive"]


def corpus_code(interval: Interval | None, band: float | Fraction, grid: int | None = None) -> Code:
    """The code of an interval on a "positive is better" scale against ``band`` (module docs).
    Every comparison with the band is exact (:mod:`policies.exact_tolerance`, issue 24, item 13):
    the band is read as the decimal it is written as (or the Fraction given), a bound as the
    multiple of 1 / ``grid`` it lies within 1e-9 of (:func:`policies.exact_tolerance.grid_of`);
    "by more than the band" is strict and "within" includes it, so a bound exactly at the band
    never reads a direction by float rounding."""
    if interval is None:
        return "inconclusive"
    limit = exact(band)
    lower, upper = snap(interval.lower, grid), snap(interval.upper, grid)
    side = beyond(lower, upper, limit)
    if side == 1:
        return "candidate_better"
    if side == -1:
        return "regression"
    if within(lower, limit) and within(upper, limit):
        return "equivalent"
    return "inconclusive"


def exact_band(kind: str, tolerance: float, *, scale: tuple[float, float] | None = None,
               baseline_mean: float | Fraction | None = None) -> Fraction:
    """:func:`band_for` in exact fractions of the decimals given (what :func:`corpus_code` reads)."""
    t = exact(tolerance)
    if kind == "paired_judge":
        return 2 * t
    if kind == "absolute_judge" and scale is not None:
        return t * (exact(scale[1]) - exact(scale[0]))
    if kind in ("latency", "cost"):
        return t * abs(exact(baseline_mean or 0.0))
    return t


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile (Cornish-Fisher expansion, Abramowitz and Stegun 26.7.5; within 1e-4
    for df >= 10, which every use here has: at least 19)."""
    if df < 1:
        raise ValueError("df must be at least 1")
    z = statistics.NormalDist().inv_cdf(p)
    g1 = (z ** 3 + z) / 4
    g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96
    g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384
    g4 = (79 * z ** 9 + 776 * z ** 7 + 1482 * z ** 5 - 1920 * z ** 3 - 945 * z) / 92160
    return z + g1 / df + g2 / df ** 2 + g3 / df ** 3 + g4 / df ** 4


def expanded_alpha(n: int, alpha: float) -> float:
    """The percentile level of the expanded bootstrap: z_(1-a'/2) = sqrt(n/(n-1)) t_(1-alpha/2, n-1)."""
    z = math.sqrt(n / (n - 1)) * t_quantile(1 - alpha / 2, n - 1)
    return 2 * (1 - statistics.NormalDist().cdf(z))


def no_spread_interval(value: float, n: int, bounds: tuple[float, float], alpha: float) -> Interval:
    """The interval for n items that all differ by ``value`` (see the module's docs)."""
    lo, hi = bounds
    share = 1 - (alpha / 2) ** (1 / n)
    return Interval(value - share * max(0.0, value - lo), value + share * max(0.0, hi - value))


@dataclass(frozen=True, slots=True)
class CorpusInterval:
    """An interval for a corpus result, or None with ``note`` saying why."""

    interval: Interval | None
    note: str | None


def corpus_interval(
    diffs: Sequence[float], *, identity: str, bounds: tuple[float, float] | None, alpha: float = 0.05,
    complete: bool = True,
) -> CorpusInterval:
    """The (1 - alpha) interval for the mean of per-item differences (see the module's docs).

    ``bounds`` are the bounds of a difference (:func:`delta_bounds`), None when unbounded.
    ``complete=False`` (the run is still going) gives no interval, with the note saying so."""
    if not complete:
        return CorpusInterval(None, IN_PROGRESS)
    n = len(diffs)
    if n < MIN_BOOTSTRAP_CASES:
        return CorpusInterval(None, SMALL_SAMPLE)
    if min(diffs) == max(diffs):
        if bounds is None:
            return CorpusInterval(None, NO_SPREAD)
        return CorpusInterval(no_spread_interval(float(diffs[0]), n, bounds, alpha), NO_SPREAD_BOUNDED)
    interval = bootstrap_interval(list(diffs), identity=identity, alpha=expanded_alpha(n, alpha))
    return CorpusInterval(interval, None)


def delta_bounds(kind: str, *, scale: tuple[float, float] | None = None) -> tuple[float, float] | None:
    """The bounds of one item's difference for a metric kind: the paired judge's case score is in
    [-1, 1]; a grader's pass (1) or fail (0) on each side differs by [-1, 1]; an absolute score on
    [lo, hi] by [-(hi - lo), hi - lo]; latency and cost are unbounded (None)."""
    if kind in ("paired_judge", "grader"):
        return (-1.0, 1.0)
    if kind == "absolute_judge" and scale is not None:
        return (-(scale[1] - scale[0]), scale[1] - scale[0])
    return None


def band_for(kind: str, tolerance: float, *, scale: tuple[float, float] | None = None,
             baseline_mean: float | None = None) -> float:
    """The parity band of a metric (see the module's docs)."""
    if kind == "paired_judge":
        return 2 * tolerance
    if kind == "absolute_judge" and scale is not None:
        return tolerance * (scale[1] - scale[0])
    if kind in ("latency", "cost"):
        return tolerance * abs(baseline_mean or 0.0)
    return tolerance


ABVerdict = Literal["regression", "candidate_better", "equivalent", "inconclusive"]


@dataclass(frozen=True, slots=True)
class ABRow:
    """One metric of an A/B comparison (issue 24, items 4 and 13).

    ``interval`` of candidate - baseline (None: no interval), ``threshold`` the tolerance on
    that scale, ``comparator`` ``higher_is_better`` or ``lower_is_better``, ``missing`` when a
    side has no score, ``delta`` the point difference candidate - baseline (exact when given as
    a Fraction), ``paired`` the paired items it rests on, ``grid`` the grid the interval's
    bounds lie on (:func:`policies.exact_tolerance.grid_of`). Every comparison with the
    threshold is exact (:mod:`policies.exact_tolerance`)."""

    interval: Interval | None
    threshold: float | Fraction
    comparator: str
    missing: bool = False
    delta: float | Fraction | None = None
    paired: int = 0
    grid: int | None = None

    def code(self) -> Code:
        """``candidate_better`` / ``regression``: the interval lies beyond +-threshold (by more
        than the tolerance, on the comparator's orientation); ``equivalent``: the delta stays
        within the tolerance on at least :data:`MIN_BOOTSTRAP_CASES` paired items and no
        interval says otherwise; ``inconclusive``: a side has no score, or nothing settles it."""
        if self.missing:
            return "inconclusive"
        sign = 1 if self.comparator == "higher_is_better" else -1
        tolerance = exact(self.threshold)
        if self.interval is not None:
            lo, hi = snap(self.interval.lower, self.grid), snap(self.interval.upper, self.grid)
            oriented = (lo, hi) if sign == 1 else (-hi, -lo)
            side = beyond(*oriented, tolerance)
            if side == 1:
                return "candidate_better"
            if side == -1:
                return "regression"
        if self.delta is not None and self.paired >= MIN_BOOTSTRAP_CASES and within(exact(self.delta), tolerance):
            return "equivalent"
        return "inconclusive"


def ab_verdict(rows: Sequence[ABRow], *, errored: bool) -> ABVerdict:
    """An A/B comparison's verdict from its metric rows (the A/B specification's table), the
    first rule that applies:

    - ``inconclusive`` — a run errored, no metric, or a metric has no score on one side;
    - ``regression`` — a metric worse than the baseline by more than its threshold (its
      interval, built at alpha / m for m rows, lies below -threshold);
    - ``candidate_better`` — one metric better by more than its threshold (interval above
      +threshold) and every other better by more or within;
    - ``equivalent`` — every delta stays within the tolerance (exactly, at it included; on 20
      paired items at least);
    - ``inconclusive`` — otherwise: a delta beyond the tolerance that its interval does not settle.

    A direction always rests on an interval (issue 23: at most 5% wrong directions between equal
    arms); parity on the deltas, as the specification defines it (issue 24, item 4: an interval
    inside +-tolerance needs thousands of items, past the admission limit, so it never read).
    """
    if errored or not rows or any(r.missing for r in rows):
        return "inconclusive"
    codes = [r.code() for r in rows]
    if "regression" in codes:
        return "regression"
    if all(c in ("candidate_better", "equivalent") for c in codes) and "candidate_better" in codes:
        return "candidate_better"
    if all(c == "equivalent" for c in codes):
        return "equivalent"
    return "inconclusive"
