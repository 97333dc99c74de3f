"""Issue 23's tables, bigger than the test suite runs them (seeded; prints, asserts nothing).

    .venv/bin/python bench/verdicts.py            # all tables, a few minutes on 2 shared cores
    .venv/bin/python bench/verdicts.py tolerance  # one table: tolerance | ab | smalln
    .venv/bin/python bench/verdicts.py --quick    # every table on a few trials (make test runs it so)

- tolerance: live trials at true win rates inside the tolerance (0.47-0.53, tolerance 0.05),
  1,000 trials x 5,000 cases read after every case: regression / candidate_better / equivalent.
- ab: A/B verdicts, equal arms and a planted gap, 1,000 comparisons per row.
- smalln: complete corpus runs with equal arms, 4,000 per row: the interval excludes 0
  (plain percentile vs expanded bootstrap).
Monte-Carlo error: one standard error of a share p over T trials is sqrt(p (1 - p) / T).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies.decision import BETTER, EQUIVALENT, REGRESSION  # noqa: E402
from tests.policies._corpus_sim import ab_rates  # noqa: E402
from tests.policies._sim import first_true, simulate_case_scores, verdict_path  # noqa: E402
from tests.policies.test_corpus_verdicts import _vectorised_false_direction  # noqa: E402


#: ``--quick`` divides every trial count by this: figures not for reading, a run that shows the
#: tables still compute (tests/bench/ runs every benchmark so).
QUICK = 200 if "--quick" in sys.argv[1:] else 1


def se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


def tolerance() -> None:
    print("| true win rate | regression | candidate_better | equivalent reached (median cases) |")
    for w in (0.47, 0.48, 0.52, 0.53):
        x = simulate_case_scores(np.random.default_rng(int(w * 100)), 1000 // QUICK, 5000 // QUICK, win_rate=w)
        codes, _ = verdict_path(x)
        reg, bet = (codes == REGRESSION).any(1).mean(), (codes == BETTER).any(1).mean()
        eq = first_true(codes == EQUIVALENT)
        print(f"| {w:.2f} | {reg:.1%} ±{se(reg, 1000 // QUICK):.1%} | {bet:.1%} | {(eq > 0).mean():.1%}"
              f" ({np.median(eq[eq > 0]):.0f}) |")


def ab() -> None:
    trials = 1000 // QUICK
    print("| items | suite | equal arms: wrong direction | equal arms: equivalent | planted gap: candidate_better"
          " | a drop of 0.10 (beyond the tolerance): equivalent |")
    for items in (20, 50, 200):
        for judge in (False, True):
            eq = ab_rates(items + judge, trials, items, judge=judge)
            gap = ab_rates(items * 3 + judge, trials, items, judge=judge, pass_base=0.6, pass_cand=0.8,
                           win_rate=0.7)
            drop = ab_rates(items * 5 + judge, trials, items, judge=judge, pass_base=0.7, pass_cand=0.6,
                            win_rate=0.4)
            wrong = eq["candidate_better"] + eq["regression"]
            print(f"| {items} | {'grader + judge' if judge else 'grader'} | {wrong:.1%} ±{se(wrong, trials):.1%}"
                  f" | {eq['equivalent']:.1%} | {gap['candidate_better']:.1%} ±{se(gap['candidate_better'], trials):.1%}"
                  f" | {drop['equivalent']:.1%} ±{se(drop['equivalent'], trials):.1%} |")


def smalln() -> None:
    trials = 4000 // QUICK
    print("| items | plain percentile | expanded |")
    for n in (20, 30, 50):
        plain, exp = _vectorised_false_direction(np.random.default_rng(n), trials, n)
        print(f"| {n} | {plain:.1%} ±{se(plain, trials):.1%} | {exp:.1%} ±{se(exp, trials):.1%} |")


if __name__ == "__main__":
    tables = {"tolerance": tolerance, "ab": ab, "smalln": smalln}
    for name in [a for a in sys.argv[1:] if a != "--quick"] or list(tables):
        print(f"\n## {name}")
        tables[name]()
