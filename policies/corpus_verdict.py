"""A corpus result's code for one metric (issue 13, item 3). Pure: an interval and a band in,
a verdict code out; :func:`policies.wording.corpus_wording` words it (*Candidate ahead*,
*Parity*, *Candidate behind*, *Inconclusive*), never an adoption word.

The interval is on a "positive is the candidate better" scale (a lower-is-better metric's
differences are negated first) and ``band`` is the parity band on that scale:

- ``equivalent`` — the whole interval lies within ``[-band, band]``;
- ``candidate_better`` — otherwise, its lower bound is above zero;
- ``regression`` — otherwise, its upper bound is below zero;
- ``inconclusive`` — anything else, and no interval at all (fewer than 20 paired items, or
  the metric's scores carry different versions or directions: the direction is withheld).

Bands: the paired judge's preference is a mean score in [-1, 1], whose win rate is
``(1 + mean) / 2``, so a tolerance ``t`` on the win-rate scale is ``2t`` on it; a pass rate
(a grader) is in [0, 1], so ``t`` itself; an absolute score ``t`` times its scale's width; a
latency or cost ``t`` times the baseline arm's mean (a relative band).
"""

from __future__ import annotations

from typing import Literal

from policies.bootstrap import Interval

Code = Literal["candidate_better", "equivalent", "regression", "inconclusive"]


def corpus_code(interval: Interval | None, band: float) -> Code:
    if interval is None:
        return "inconclusive"
    if -band <= interval.lower and interval.upper <= band:
        return "equivalent"
    if interval.lower > 0:
        return "candidate_better"
    if interval.upper < 0:
        return "regression"
    return "inconclusive"


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


def ab_verdict(rows: list[tuple[float | None, float, str]], *, errored: bool) -> ABVerdict:
    """An A/B comparison's verdict from its metric rows ``(delta, threshold, comparator)``,
    ``delta`` = candidate - baseline (None: a side has no score), ``comparator``
    ``higher_is_better`` or ``lower_is_better``:

    - ``inconclusive`` — a run errored, or a metric has no score on a side;
    - ``regression`` — a metric worse by more than its threshold;
    - ``candidate_better`` — none worse by more, one better by more than its threshold;
    - ``equivalent`` — all within their thresholds.
    """
    if errored or any(delta is None for delta, _, _ in rows):
        return "inconclusive"
    gains = [(delta if comparator == "higher_is_better" else -delta, threshold)
             for delta, threshold, comparator in rows if delta is not None]
    if any(g < -t for g, t in gains):
        return "regression"
    if any(g > t for g, t in gains):
        return "candidate_better"
    return "equivalent"
