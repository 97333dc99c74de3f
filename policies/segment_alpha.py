"""The error level each segment of a trial is read at (issue 27). Pure.

A trial read by segments looks at every tracked segment value after every case. Each
segment's verdict comes from the same anytime-valid betting sequence as the overall verdict
(:mod:`policies.stream`), so each one alone errs with probability at most its level
whatever the looks. Splitting the trial's level across the tracked values (Bonferroni)
bounds the chance that *any* segment reads wrong by the trial's level: family-wise error
control, which needs no independence between segments and holds under continuous looks
because each sequence does. The overall verdict keeps the trial's own level, unchanged.

The split is over the values a trial can track (its cap, plus the pooled ``other``), fixed
when the trial is created, so the level never depends on the traffic seen.
"""

from __future__ import annotations


def segment_alpha(alpha: float, tracked: int) -> float:
    """The level each of ``tracked`` segment values is read at, for a trial at ``alpha``."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if tracked < 1:
        raise ValueError(f"tracked must be at least 1, got {tracked!r}")
    return alpha / tracked
