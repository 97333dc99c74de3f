"""Seeded simulations of corpus comparisons (issue 23), fed through the public policy functions
exactly as ``sidecar/corpus/ab.py`` and ``sidecar/corpus/runs.py`` call them.

An A/B suite here has a grader (pass/fail on each side; per-item difference in {-1, 0, 1},
threshold = tolerance) and, optionally, the paired judge (per-item case score in {-1, 0, 1}
with 30% ties; win-rate difference = score / 2, threshold = tolerance). Each metric's interval
is built at alpha / m, as ``ab.py`` does; the delta, the paired count and the bounds' grid are
passed as ``ab.py`` passes them (issue 24: equivalence reads the delta, exactly).
"""

from __future__ import annotations

import numpy as np

from policies.bootstrap import Interval
from policies.corpus_verdict import ABRow, ab_verdict, corpus_interval, delta_bounds
from policies.exact_tolerance import exact, exact_mean, grid_of


def grader_diffs(rng: np.random.Generator, items: int, *, base: float, cand: float) -> list[float]:
    b = rng.random(items) < base
    c = rng.random(items) < cand
    return [float(v) for v in c.astype(np.float64) - b.astype(np.float64)]


def judge_scores(rng: np.random.Generator, items: int, *, win_rate: float, ties: float = 0.3) -> list[float]:
    u = rng.random(items)
    p_plus = win_rate - ties / 2
    return [float(v) for v in np.where(u < p_plus, 1.0, np.where(u < p_plus + ties, 0.0, -1.0))]


def ab_trial(rng: np.random.Generator, trial: int, items: int, *, judge: bool, tolerance: float = 0.05,
             pass_base: float = 0.7, pass_cand: float = 0.7, win_rate: float = 0.5) -> str:
    metrics = 2 if judge else 1
    alpha = 0.05 / metrics
    rows = []
    diffs = grader_diffs(rng, items, base=pass_base, cand=pass_cand)
    g = corpus_interval(diffs, identity=f"g{trial}", bounds=delta_bounds("grader"), alpha=alpha)
    exact_diffs = [exact(d) for d in diffs]
    rows.append(ABRow(g.interval, tolerance, "higher_is_better", delta=exact_mean(exact_diffs), paired=items,
                      grid=grid_of(exact_diffs)))
    if judge:
        scores = judge_scores(rng, items, win_rate=win_rate)
        j = corpus_interval(scores, identity=f"j{trial}", bounds=delta_bounds("paired_judge"), alpha=alpha)
        iv = None if j.interval is None else Interval(j.interval.lower / 2, j.interval.upper / 2)
        half = {s: exact(s) / 2 for s in set(scores)}  # the same Fractions, one division per distinct score
        halves = [half[s] for s in scores]
        rows.append(ABRow(iv, tolerance, "higher_is_better", delta=exact_mean(halves), paired=items,
                          grid=grid_of(halves)))
    return ab_verdict(rows, errored=False)


def ab_rates(seed: int, trials: int, items: int, **kw: object) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    got = [ab_trial(rng, t, items, **kw) for t in range(trials)]  # type: ignore[arg-type]
    return {code: got.count(code) / trials for code in ("candidate_better", "regression", "equivalent",
                                                          "inconclusive")}


def point_rule(rng: np.random.Generator, items: int, *, judge: bool, tolerance: float = 0.05) -> bool:
    """The verdict before issue 23 (point differences against the tolerance), equal arms:
    whether it read regression or candidate_better."""
    g = float(np.mean(grader_diffs(rng, items, base=0.7, cand=0.7)))
    gains = [g]
    if judge:
        gains.append(float(np.mean(judge_scores(rng, items, win_rate=0.5))) / 2)
    return any(abs(x) > tolerance for x in gains)
