from __future__ import annotations

import numpy as np

from policies.bootstrap import (
    bootstrap_identity,
    bootstrap_interval,
    bootstrap_means,
    direct_bootstrap_means,
    percentile_interval,
    seed_from_identity,
)
from policies.scores import aggregate
from tests.policies._sim import simulate_case_scores


def test_null_below_twenty_cases() -> None:
    ident = bootstrap_identity("trial-1", "judge-v1")
    assert bootstrap_interval([1.0, 0.0, -1.0] * 6 + [1.0], identity=ident) is None  # 19 cases
    assert bootstrap_interval({1.0: 10, -1.0: 9}, identity=ident) is None
    assert bootstrap_interval({1.0: 10, -1.0: 10}, identity=ident) is not None


def test_same_evidence_same_interval_whatever_the_order() -> None:
    rng = np.random.default_rng(5)
    x = simulate_case_scores(rng, 1, 300, win_rate=0.55)[0]
    ident = bootstrap_identity("trial-7", "judge-v3", "preference")
    a = bootstrap_interval(list(x), identity=ident)
    b = bootstrap_interval(list(rng.permutation(x)), identity=ident)
    values, counts = np.unique(x, return_counts=True)
    c = bootstrap_interval(dict(zip(values[::-1].tolist(), counts[::-1].tolist())), identity=ident)
    other = bootstrap_interval(list(x), identity=bootstrap_identity("trial-7", "judge-v4", "preference"))
    print(f"\nbootstrap interval, 300 cases: {a}; other judge version seed: {other}")
    assert a is not None and a == b == c
    assert other is not None and other != a  # the seed really comes from the identity
    assert a.lower < float(x.mean()) < a.upper


def test_aggregated_bootstrap_matches_direct_index_resampling() -> None:
    rng = np.random.default_rng(8)
    for n, win in ((25, 0.5), (60, 0.7), (400, 0.45)):
        x = simulate_case_scores(rng, 1, n, win_rate=win)[0]
        agg = bootstrap_means(aggregate(x), resamples=40_000, rng=seed_from_identity(f"agg{n}"))
        direct = direct_bootstrap_means(x, resamples=40_000, rng=seed_from_identity(f"dir{n}"))
        sd = x.std() / np.sqrt(n)  # exact sd of the bootstrap mean
        a_iv, d_iv = percentile_interval(agg, 0.05), percentile_interval(direct, 0.05)
        print(f"\nn={n}: aggregated {a_iv}, direct {d_iv}, mean {x.mean():.4f}, exact bootstrap sd {sd:.4f}")
        for sample in (agg, direct):
            assert abs(sample.mean() - x.mean()) < 0.02 * sd + 4 * sd / np.sqrt(40_000)
            assert abs(sample.std() / sd - 1) < 0.03
        # Percentiles of two independent 40,000-resample runs agree to a small fraction of the sd.
        assert abs(a_iv.lower - d_iv.lower) < 0.06 * sd + 2 / n
        assert abs(a_iv.upper - d_iv.upper) < 0.06 * sd + 2 / n



def test_coverage_of_the_reported_interval_at_small_n() -> None:
    """Item 7: how often the reported 95% bootstrap interval covers a true win rate of 0.9 at small n.

    An interval with no observed spread (every case the same score) is not shown
    (``Evaluation.interval`` is None with a note); those trials are counted apart.
    """
    from policies.verdict import evaluate

    trials = 1_000
    lines = [f"\nreported bootstrap interval, true win rate 0.90 (ties 10%, 10% audited), {trials} trials each:"]
    for n in (20, 30, 50, 100):
        x = simulate_case_scores(np.random.default_rng(700 + n), trials, n, win_rate=0.9, tie_share=0.1)
        covered = shown = 0
        for t in range(trials):
            ev = evaluate(x[t], identity=f"cov-{n}-{t}")
            if ev.interval is None:
                assert ev.interval_note is not None
                continue
            shown += 1
            covered += ev.interval.lower <= 0.9 <= ev.interval.upper
        lines.append(f"\n  n={n}: covers {covered / shown:.1%} of {shown} shown intervals; not shown (no spread) {trials - shown}")
        if n >= 50:
            assert covered / shown > 0.85
    print("".join(lines))


def test_percentile_interval_is_numpys_linear_quantile_bit_for_bit() -> None:
    """``percentile_interval`` computes the two quantiles itself (cheaper than ``np.quantile``
    per evaluation): the very floats ``np.quantile``'s linear method gives, for bootstrap-like
    means with many ties, spread, sorted and constant arrays, any size and level."""
    rng = np.random.default_rng(29)
    for trial in range(800):
        n = int(rng.choice([1, 2, 3, 5, 19, 20, 100, 1_999, 2_000, 2_001]))
        kind = trial % 4
        if kind == 0:
            means = rng.normal(size=n)
        elif kind == 1:  # bootstrap means: multiples of 1 / (2 n) with ties
            means = rng.integers(-40, 40, size=n) / (2 * int(rng.integers(20, 300)))
        elif kind == 2:
            means = np.sort(rng.random(n))
        else:
            means = np.full(n, rng.normal())
        alpha = float(rng.choice([0.05, 0.1, 0.01, 0.5, 0.999, 1e-9, 1 / 3, rng.random()]))
        lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
        got = percentile_interval(means, alpha)
        assert (got.lower, got.upper) == (float(lo), float(hi)), (n, kind, alpha)
    # Other input (integers, float32): np.quantile's own reading.
    for other in (np.arange(5), np.linspace(-1, 1, 41, dtype=np.float32)):
        means = np.asarray(other)
        got = percentile_interval(means, 0.5)
        assert (got.lower, got.upper) == tuple(float(v) for v in np.quantile(means, [0.25, 0.75]))
