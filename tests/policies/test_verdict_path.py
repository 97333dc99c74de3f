"""The decision bounds after every judged case (``policies.verdict.bounds_path``), for the chart."""

from __future__ import annotations

import numpy as np

from policies.scores import aggregate
from policies.verdict import bounds_path, sequence_bounds


def _direct(scores: list[float], expected_cases: int) -> list[tuple[float, float]]:
    """The running intersection, look after look, from the one-look bounds (win-rate scale)."""
    lo, hi, out = 0.0, 1.0, []
    for n in range(1, len(scores) + 1):
        iv = sequence_bounds(aggregate(scores[:n]), alpha=0.05, expected_cases=expected_cases)
        now_lo, now_hi = (iv.lower + 1) / 2, (iv.upper + 1) / 2
        lo, hi = max(lo, now_lo), min(hi, now_hi)
        if lo > hi:
            lo, hi = now_lo, now_hi
        out.append((lo, hi))
    return out


def test_every_point_is_the_running_intersection_of_the_one_look_bounds() -> None:
    rng = np.random.default_rng(5)
    scores = [float(x) for x in rng.choice([-1.0, 0.0, 0.5, 1.0], size=300, p=[0.2, 0.2, 0.2, 0.4])]
    path = bounds_path(scores, expected_cases=400, points=60)
    direct = _direct(scores, 400)
    assert len(path) <= 60 and path[0][0] == 1 and path[-1][0] == 300
    for n, lo, hi in path:
        assert abs(lo - direct[n - 1][0]) < 1e-9 and abs(hi - direct[n - 1][1]) < 1e-9
    lows, highs = [lo for _, lo, _ in path], [hi for _, _, hi in path]
    assert lows == sorted(lows) and highs == sorted(highs, reverse=True), "it only narrows (no restart here)"
    assert lows[-1] > 0.5, "a mean score of 0.3 (win rate 0.65) is decided better within 300 cases"


def test_no_cases_no_path_and_few_cases_every_point() -> None:
    assert bounds_path([]) == []
    assert [n for n, _, _ in bounds_path([1.0, -1.0, 0.0], points=120)] == [1, 2, 3]
