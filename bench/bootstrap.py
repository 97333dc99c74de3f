"""Benchmark: the aggregated case-cluster bootstrap against direct index resampling.

Run: ``.venv/bin/python bench/bootstrap.py`` (add ``--quick`` to time the
direct implementation on 200 resamples and scale linearly to 2,000).

Both implementations draw 2,000 resamples and return the 95% percentile
interval. The aggregated one is timed twice: from the raw case-score array
(including the one pass of aggregation) and from counts (what the engine keeps).
The direct one resamples case indices in blocks of 8 million cells, so it can
hold a million cases; its time grows with n, the aggregated one's does not.
Ratios are reported, never absolute pass/fail thresholds.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from policies.bootstrap import (  # noqa: E402
    DEFAULT_RESAMPLES,
    bootstrap_means,
    direct_bootstrap_means,
    percentile_interval,
    seed_from_identity,
)
from policies.scores import aggregate  # noqa: E402


def _cases(n: int, rng: np.random.Generator) -> np.ndarray:
    first = rng.choice([-1.0, 0.0, 1.0], n, p=[0.3, 0.3, 0.4])
    second = rng.choice([-1.0, 0.0, 1.0], n, p=[0.3, 0.3, 0.4])
    return np.where(rng.random(n) < 0.1, (first + second) / 2, first)


def _best_of(repeats: int, fn) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true",
        help="20,000 cases, the direct bootstrap on 200 resamples, scaled (make test runs it so)",
    )
    args = parser.parse_args()
    rng = np.random.default_rng(1)
    n_big = 20_000 if args.quick else 1_000_000
    big = _cases(n_big, rng)
    small = big[:1_000]
    counts_big, counts_small = aggregate(big), aggregate(small)

    def agg_from_counts(counts):  # type: ignore[no-untyped-def]
        return percentile_interval(
            bootstrap_means(counts, resamples=DEFAULT_RESAMPLES, rng=seed_from_identity("bench")), 0.05
        )

    t_agg_small = _best_of(5, lambda: agg_from_counts(counts_small))
    t_agg_big = _best_of(5, lambda: agg_from_counts(counts_big))
    t_agg_big_raw = _best_of(3, lambda: agg_from_counts(aggregate(big)))

    resamples = 200 if args.quick else DEFAULT_RESAMPLES
    scale = DEFAULT_RESAMPLES / resamples
    t_dir_small = _best_of(3, lambda: direct_bootstrap_means(small, resamples=DEFAULT_RESAMPLES, rng=np.random.default_rng(2)))
    t = time.perf_counter()
    direct = direct_bootstrap_means(big, resamples=resamples, rng=np.random.default_rng(3))
    t_dir_big = (time.perf_counter() - t) * scale

    iv_agg = agg_from_counts(counts_big)
    iv_dir = percentile_interval(direct, 0.05)
    print(f"cases          aggregated(counts)  aggregated(raw array)  direct{'(scaled x10)' if args.quick else ''}")
    print(f"1,000          {t_agg_small * 1e3:10.2f} ms                            {t_dir_small * 1e3:10.1f} ms")
    print(f"{n_big:<15,}{t_agg_big * 1e3:10.2f} ms      {t_agg_big_raw * 1e3:10.1f} ms       {t_dir_big * 1e3:10.0f} ms")
    print(f"aggregated {n_big:,} / 1,000 cases (from counts): {t_agg_big / t_agg_small:.2f}x")
    print(f"direct / aggregated at {n_big:,} cases: {t_dir_big / t_agg_big:,.0f}x from counts,"
          f" {t_dir_big / t_agg_big_raw:,.0f}x including aggregation")
    print(f"intervals at {n_big:,} cases: aggregated [{iv_agg.lower:.5f}, {iv_agg.upper:.5f}],"
          f" direct [{iv_dir.lower:.5f}, {iv_dir.upper:.5f}], mean {big.mean():.5f}")


if __name__ == "__main__":
    main()
