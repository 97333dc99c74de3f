"""Issue 23, item 2: the tolerance read the A/B seed's way, on the interval, for live trials.

A true win rate inside the tolerance (0.47, 0.48, 0.52, 0.53 at tolerance 0.05) must read
"worse by more than the tolerance" (``regression``, Rejected) or "better by more than the
tolerance" (``candidate_better``) in at most 5% of trials, however often they are read.
Before, the rule decided ``regression`` once the interval was below parity (0.5) and merely
reached below 0.45, and the decision stood: a true 0.47 ended Rejected in about 70% of trials.

Every figure is printed; run with ``pytest -s``. Monte-Carlo error: one standard error of a
share p over T trials is sqrt(p (1 - p) / T).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from policies.decision import BETTER, EQUIVALENT, INCONCLUSIVE, NOT_WORSE, REGRESSION
from tests.policies._sim import current_bounds, first_true, simulate_case_scores, verdict_path

TRIALS = 1_000
CASES = 2_000


def _old_rule_codes(x: np.ndarray) -> np.ndarray:
    """The rule before issue 23 on the same running intersection: equivalent inside +-0.05,
    else better once the interval is above parity, regression once below; the first decision stands."""
    wlo, whi = current_bounds(x)
    lo = np.maximum.accumulate(wlo, axis=1)
    hi = np.minimum.accumulate(whi, axis=1)
    enough = np.arange(1, x.shape[1] + 1)[None, :] >= 20
    now = np.where((lo >= 0.45) & (hi <= 0.55), EQUIVALENT,
                   np.where(lo > 0.5, BETTER, np.where(hi < 0.5, REGRESSION, INCONCLUSIVE)))
    now = np.where(enough, now, INCONCLUSIVE)
    decided = now != INCONCLUSIVE
    first = np.where(decided.any(axis=1), decided.argmax(axis=1), x.shape[1] - 1)
    standing = now[np.arange(x.shape[0]), first]
    after = np.arange(x.shape[1])[None, :] >= first[:, None]
    return np.where(after & decided.any(axis=1)[:, None], standing[:, None], INCONCLUSIVE)


def _se(p: float, n: int) -> float:
    return math.sqrt(max(p * (1 - p), 1e-12) / n)


@pytest.mark.parametrize("win_rate", [0.47, 0.48, 0.52, 0.53])
def test_a_true_difference_inside_the_tolerance_is_never_worse_or_better_by_more(win_rate: float) -> None:
    x = simulate_case_scores(np.random.default_rng(int(win_rate * 1000)), TRIALS, CASES, win_rate=win_rate)
    codes, _ = verdict_path(x)
    worse = (codes == REGRESSION).any(axis=1).mean()
    better = (codes == BETTER).any(axis=1).mean()
    eq = first_true(codes == EQUIVALENT)
    adoptable = first_true(np.isin(codes, (BETTER, EQUIVALENT, NOT_WORSE)))
    old = _old_rule_codes(x)
    old_worse = (old == REGRESSION).any(axis=1).mean()
    old_better = (old == BETTER).any(axis=1).mean()
    print(
        f"\ntrue win rate {win_rate:.2f}, tolerance 0.05, {TRIALS} trials x {CASES} cases read after every case:"
        f" regression {worse:.1%} (+-{_se(worse, TRIALS):.1%}), candidate_better {better:.1%}"
        f" (+-{_se(better, TRIALS):.1%}); Adoptable {(adoptable > 0).mean():.1%}"
        f" (median {np.median(adoptable[adoptable > 0]) if (adoptable > 0).any() else float('nan'):.0f} cases);"
        f" equivalent reached {(eq > 0).mean():.1%}"
        f" (median {np.median(eq[eq > 0]) if (eq > 0).any() else float('nan'):.0f} cases)"
        f" | before: regression {old_worse:.1%}, candidate_better {old_better:.1%}"
    )
    assert worse <= 0.05 and better <= 0.05
    if win_rate > 0.5:
        assert (adoptable > 0).mean() >= 0.95  # not worse by more than the tolerance: Adoptable
