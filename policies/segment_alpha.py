"""The error level each segment of a trial is read at (issue 27). Pure.

A trial read by segments looks at every tracked segment value after every case. Each value's
verdict comes from the same anytime-valid betting sequence as the overall verdict
(:mod:`policies.stream`, :mod:`policies.verdict`, rule :mod:`policies.decision`), on that
value's cases alone, at the level this module gives.

**What is controlled.** A verdict reads wrong (``candidate_better`` or ``regression`` in the
wrong direction, ``equivalent`` or ``not_worse`` when the truth lies outside what they claim)
only if its kept interval excludes the true win rate, which needs the sequence to miss the truth
at some case: probability at most its level, whatever the looks, tolerance or floor. Splitting
the trial's level ``alpha`` evenly across the ``tracked`` values (Bonferroni) therefore bounds
the chance that *any* segment value of the trial ever reads wrong by ``alpha``: **family-wise
error** control, which needs no independence between values (values of several segment fields
share cases; the pooled ``other`` is one more value) and holds under continuous looks because
each sequence does. The overall verdict keeps the trial's own level, unchanged, so the overall
verdict *or* some segment reads wrong with probability at most ``2 * alpha`` in the worst case
(union bound; tolerance near 0). Measured (bench/segments.py: 2,000 trials x 5,000 cases,
8 segments, equal models, a look after every case, tracked 17): 0.25% read a wrong direction at
the default tolerance 0.05, 5.85% at the strictest reading (an interval ever excluding parity,
tolerance 0), of which the overall verdict alone takes 4.05% (any segment alone: 2.0%).

**Why family-wise, not a false-discovery rate.** A trial's typical finding is one bad segment
among good ones; e-BH (the FDR rule valid under any dependence) makes its first rejection at the
same evidence as Bonferroni (e-value ``tracked / alpha``) and only gains when several values
are rejected at once, while its guarantee holds at one stopping time, not for decisions that
stand once reached at any of all the looks. Bonferroni states the simpler promise: with
probability at least 1 - alpha, no segment verdict of the trial is wrong.

**Why the cap, not the values seen.** The split is over the values a trial can track (its cap,
plus the pooled ``other``), fixed when the trial is created, so no level ever depends on the
traffic seen. It costs detection: at the default cap 16 (tracked 17) against 8 values, a segment
at a true win rate of 0.35 needed 12% more of its cases to read Rejected (median 208 vs 185),
and one at 0.40 was Rejected within the trial in 25% of trials instead of 32%
(docs/statistics.md, section 7c).
"""

from __future__ import annotations


def segment_alpha(alpha: float, tracked: int) -> float:
    """The level each of ``tracked`` segment values is read at, for a trial at ``alpha``: ``alpha / tracked``."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if tracked < 1:
        raise ValueError(f"tracked must be at least 1, got {tracked!r}")
    return alpha / tracked
