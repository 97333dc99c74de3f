"""The decision rule under continuous monitoring: null error rate and power, by simulation."""

from __future__ import annotations

import numpy as np
import pytest

from policies.bootstrap import bootstrap_interval
from policies.scores import ScoreCounts
from policies.verdict import decide, evaluate
from tests.policies._sim import VALUES, first_true, sequence_verdicts, simulate_case_scores

TRIALS = 1_000
CASES = 2_000
BOOT_TRIALS = 500  # the fixed-bootstrap contrast runs the real bootstrap; see test docstring
SCREEN_Z = 1.6


@pytest.fixture(scope="module")
def null_scores() -> np.ndarray:
    return simulate_case_scores(np.random.default_rng(20240601), TRIALS, CASES, win_rate=0.5)


def _running_z(x: np.ndarray) -> np.ndarray:
    n = np.arange(1, x.shape[-1] + 1)
    mean = np.cumsum(x, axis=-1) / n
    var = np.maximum(np.cumsum(x * x, axis=-1) / n - mean * mean, 0.0)
    se = np.sqrt(var / n)
    safe = np.where(se > 0, se, 1.0)
    return np.where(se > 0, mean / safe, np.where(mean != 0, np.inf, 0.0))


def _fixed_bootstrap_code(x_prefix_counts: np.ndarray, n: int, identity: str) -> str:
    keep = x_prefix_counts > 0
    counts = ScoreCounts(tuple(float(v) for v in VALUES[keep]), tuple(int(c) for c in x_prefix_counts[keep]))
    iv = bootstrap_interval(counts, identity=identity)
    assert iv is not None
    return decide((1 + iv.lower) / 2, (1 + iv.upper) / 2, n=n, parity=0.5, tolerance=0.05, min_cases=20)


def test_simulated_verdicts_match_evaluate(null_scores: np.ndarray) -> None:
    """The vectorised rule the simulations use is the production rule."""
    rng = np.random.default_rng(3)
    x = null_scores[:50]
    x = np.concatenate([x, simulate_case_scores(rng, 50, CASES, win_rate=0.6)])
    better, regression = sequence_verdicts(x)
    for t, n in zip(rng.integers(0, 100, 60), rng.integers(1, CASES + 1, 60)):
        got = evaluate(x[t, :n], identity=f"t{t}").verdict
        want = "candidate_better" if better[t, n - 1] else "regression" if regression[t, n - 1] else None
        if want is None:
            assert got in ("equivalent", "inconclusive")
        else:
            assert got == want


def test_null_trials_checked_after_every_case(null_scores: np.ndarray) -> None:
    """Of 1,000 null trials checked after every case up to 2,000, at most 5% ever decide wrongly.

    Contrast: the fixed 95% bootstrap interval, decided with the same rule and
    checked after every case. Running the real 2,000-resample bootstrap at
    every look of all 1,000 trials costs about 30 s, so it runs on the first
    500 of the same simulated trials; at looks where the normal statistic is
    below 1.6 in absolute value it is not run (the bootstrap cannot decide there,
    checked below), and a trial stops at its first decision.
    """
    better, regression = sequence_verdicts(null_scores)
    wrong = (better | regression).any(axis=1)
    cs_share = wrong.mean()

    z = _running_z(null_scores)
    n = np.arange(1, CASES + 1)
    wald_share = ((np.abs(z) > 1.959964) & (n >= 20)).any(axis=1).mean()

    codes = np.searchsorted(VALUES, null_scores[:BOOT_TRIALS])
    onehot = np.zeros((BOOT_TRIALS, CASES, VALUES.size), dtype=np.int64)
    np.put_along_axis(onehot, codes[..., None], 1, axis=-1)
    prefix = np.cumsum(onehot, axis=1)
    screen = (np.abs(z[:BOOT_TRIALS]) >= SCREEN_Z) & (n >= 20)
    boot_wrong = 0
    for t in range(BOOT_TRIALS):
        for i in np.nonzero(screen[t])[0]:
            if _fixed_bootstrap_code(prefix[t, i], i + 1, f"null-{t}") in ("candidate_better", "regression"):
                boot_wrong += 1
                break
    boot_share = boot_wrong / BOOT_TRIALS
    wald_same = ((np.abs(z[:BOOT_TRIALS]) > 1.959964) & (n >= 20)).any(axis=1).mean()
    once = [_fixed_bootstrap_code(prefix[t, -1], CASES, f"null-{t}") for t in range(BOOT_TRIALS)]
    once_share = sum(c in ("candidate_better", "regression") for c in once) / BOOT_TRIALS

    # The screen is safe: just below it, the real bootstrap never decides.
    rng = np.random.default_rng(11)
    near = np.argwhere((np.abs(z[:BOOT_TRIALS]) >= 1.3) & (np.abs(z[:BOOT_TRIALS]) < SCREEN_Z) & (n >= 20))
    for t, i in near[rng.choice(len(near), 200, replace=False)]:
        assert _fixed_bootstrap_code(prefix[t, i], i + 1, f"null-{t}") not in ("candidate_better", "regression")

    first = first_true(better | regression)
    print(
        f"\nnull trials ({TRIALS} x {CASES} cases, win rate 0.50, ties 30%, 10% audited), checked after every case:"
        f"\n  confidence sequence: {cs_share:.1%} ever candidate_better/regression"
        f" (better {better.any(axis=1).mean():.1%}, regression {regression.any(axis=1).mean():.1%};"
        f" median case of a wrong decision {np.median(first[first > 0]) if wrong.any() else 0:.0f})"
        f"\n  fixed 95% bootstrap, first {BOOT_TRIALS} trials: {boot_share:.1%}"
        f" (looked at once, at {CASES} cases: {once_share:.1%})"
        f"\n  fixed 95% normal interval: {wald_share:.1%} of all {TRIALS} trials, {wald_same:.1%} of the first {BOOT_TRIALS}"
    )
    assert cs_share <= 0.05
    assert boot_share > 3 * cs_share and boot_share > 0.2  # peeking at a fixed interval is not honest
    assert wald_share > 0.2
    assert once_share < 0.1  # the same interval is honest when looked at once


@pytest.mark.parametrize(("win_rate", "code"), [(0.60, "candidate_better"), (0.40, "regression")])
def test_power(win_rate: float, code: str) -> None:
    x = simulate_case_scores(np.random.default_rng(int(win_rate * 100)), TRIALS, CASES, win_rate=win_rate)
    better, regression = sequence_verdicts(x)
    right, wrong = (better, regression) if code == "candidate_better" else (regression, better)
    first = first_true(right)
    reached = first > 0
    median = float(np.median(first[reached]))
    q10, q90 = np.percentile(first[reached], [10, 90])
    print(
        f"\ntrue win rate {win_rate:.2f}: {reached.mean():.1%} of {TRIALS} trials reach {code} within {CASES} cases;"
        f" cases needed median {median:.0f} (10%: {q10:.0f}, 90%: {q90:.0f})"
    )
    assert reached.mean() >= 0.99
    assert not wrong.any()
    assert 20 <= median <= 500
