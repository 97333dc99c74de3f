"""Issue 27's figures: a trial read by 8 segments, looked at after every case (seeded).

    .venv/bin/python bench/segments.py            # 2,000 trials x 5,000 cases per row (minutes)
    .venv/bin/python bench/segments.py --quick    # a few trials (the test suite runs it so)

Each case goes to one of K = 8 segments (independent draws, equal or skewed shares). Every
segment folds its own cases into its own betting sequence at ``segment_alpha(0.05, tracked)``;
the overall verdict folds every case at 0.05, as sidecar/trials/fold.py does. Scores as in
tests/policies/_sim.py (30% ties, 10% of cases audited). The machinery and what each reading
counts are in tests/policies/_segments_sim.py.

- equal models (true win rate 0.50 everywhere): the share of trials in which the overall verdict
  or ANY segment ever read a wrong direction. Wrong, at the default tolerance 0.05: reading
  ``candidate_better`` (win rate above 0.55) or ``regression`` (below 0.45); counted as the
  capital at 0.55 or 0.45 reaching 2 / alpha, which every such reading needs (an upper bound).
  Also the strictest reading (tolerance 0: the interval ever excludes parity), and the same
  rates with the level unsplit (every segment at 0.05) to show what the split buys.
- planted regression (segment 1 of 8 at a true win rate of 0.35 or 0.40, the others 0.60, equal
  shares; overall about 0.57): the exact verdict paths. Detected: the bad segment reads Rejected
  (``regression``) within the trial's cases; with the overall verdict Adoptable too. Cases: the
  trial's case count when the bad segment first read Rejected (median, 90th percentile among
  detected). Another segment wrongly Rejected: its capital at 0.45 reached 2 / alpha (an upper
  bound, as above).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies.decision import BETTER, EQUIVALENT, NOT_WORSE, REGRESSION  # noqa: E402
from policies.segment_alpha import segment_alpha  # noqa: E402
from tests.policies._segments_sim import (  # noqa: E402
    assign, first_code, null_firsts, split, trial_case, wilson,
)
from tests.policies._sim import simulate_case_scores  # noqa: E402

QUICK = "--quick" in sys.argv[1:]
TRIALS = 10 if QUICK else 2000
CASES = 400 if QUICK else 5000
BLOCK = 10 if QUICK else 100
K = 8
ALPHA = 0.05
TOLERANCE = 0.05
FLOOR = 20
SHARES = {"equal": [1.0] * K, "skewed": [0.30, 0.20, 0.15, 0.10, 0.10, 0.05, 0.05, 0.05]}
TRACKED = {"8": K, "17 (cap 16 + other)": 17, "unsplit": 1}
BAD_RATES = (0.35, 0.40)
GOOD_RATE = 0.60
ADOPTABLE = (BETTER, EQUIVALENT, NOT_WORSE)


def _pct(hits: int, n: int) -> str:
    lo, hi = wilson(hits, n)
    return f"{hits / n:.2%} [{lo:.2%}, {hi:.2%}]"


def null_scenario(shares: list[float], seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Per tracked setting, per reading: which trials read wrong (overall, any segment)."""
    alphas = {name: segment_alpha(ALPHA, t) for name, t in TRACKED.items()}
    out: dict[str, dict[str, list[np.ndarray]]] = {name: {} for name in TRACKED}
    for block in range(0, TRIALS, BLOCK):
        rows = min(BLOCK, TRIALS - block)
        rng = np.random.default_rng(seed + block)
        y = (1 + simulate_case_scores(rng, rows, CASES, win_rate=0.5)) / 2
        seg = assign(rng, rows, CASES, shares)
        parts = split(y, seg, K)
        whole = null_firsts(y, np.full(rows, CASES), [ALPHA], tolerance=TOLERANCE)
        segs = null_firsts(parts.y, parts.counts.reshape(-1), sorted(set(alphas.values())), tolerance=TOLERANCE)
        for name, a in alphas.items():
            for reading, keys in (("tolerance", ("above", "below")), ("parity", ("parity",))):
                over = np.zeros(rows, dtype=bool)
                seg_any = np.zeros(rows, dtype=bool)
                for r in keys:
                    over |= whole[ALPHA, r] > 0
                    seg_any |= (segs[a, r] > 0).reshape(rows, K).any(axis=1)
                out[name].setdefault(f"{reading} overall", []).append(over)
                out[name].setdefault(f"{reading} segments", []).append(seg_any)
                out[name].setdefault(f"{reading} any", []).append(over | seg_any)
    return {name: {k: np.concatenate(v) for k, v in d.items()} for name, d in out.items()}


def planted_scenario(bad: float, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Per tracked setting: per trial, the case count at which the bad segment read Rejected (0:
    never), whether the overall verdict read Adoptable by then (or by the end), and whether
    another segment's capital at 0.45 reached its level."""
    alphas = {name: segment_alpha(ALPHA, t) for name, t in TRACKED.items() if name != "unsplit"}
    out: dict[str, dict[str, list[np.ndarray]]] = {name: {} for name in alphas}
    for block in range(0, TRIALS, BLOCK):
        rows = min(BLOCK, TRIALS - block)
        rng = np.random.default_rng(seed + block)
        seg = assign(rng, rows, CASES, [1.0] * K)
        x_bad = simulate_case_scores(rng, rows, CASES, win_rate=bad)
        x_good = simulate_case_scores(rng, rows, CASES, win_rate=GOOD_RATE)
        y = (1 + np.where(seg == 0, x_bad, x_good)) / 2
        parts = split(y, seg, K)
        lengths = parts.counts.reshape(-1)
        is_bad = np.tile(np.arange(K) == 0, rows)
        adopt = first_code(y, np.full(rows, CASES), alpha=ALPHA, tolerance=TOLERANCE, min_cases=FLOOR,
                           codes=ADOPTABLE)
        good = null_firsts(parts.y[~is_bad], lengths[~is_bad], list(alphas.values()), tolerance=TOLERANCE)
        for name, a in alphas.items():
            hit = first_code(parts.y[is_bad], lengths[is_bad], alpha=a, tolerance=TOLERANCE, min_cases=FLOOR,
                             codes=(REGRESSION,))
            d = out[name]
            d.setdefault("rejected_at", []).append(trial_case(parts.at[is_bad], hit))
            d.setdefault("segment_cases", []).append(hit)
            d.setdefault("adoptable_at", []).append(adopt)
            d.setdefault("other_rejected", []).append(np.asarray((good[a, "below"] > 0).reshape(rows, K - 1).any(axis=1)))
    return {name: {k: np.concatenate(v) for k, v in d.items()} for name, d in out.items()}


def main() -> None:
    began_wall, began_cpu = time.time(), time.process_time()
    print(f"{TRIALS:,} trials x {CASES:,} cases, K = {K} segments, looks after every case, alpha {ALPHA}, "
          f"tolerance {TOLERANCE}, floor {FLOOR}; overall at {ALPHA}, each segment at alpha / tracked")
    print("\n## equal models: share of trials with a wrong reading [95% Monte-Carlo interval]")
    print("| shares | tracked (segment alpha) | overall | any segment | **overall or any segment** "
          "| strictest (tolerance 0): overall / any segment / **overall or any segment** |")
    print("|---|---|---|---|---|---|")
    for i, (shape, shares) in enumerate(SHARES.items()):
        res = null_scenario(shares, 27_000 + 1000 * i)
        for name, t in TRACKED.items():
            r = res[name]
            n = r["tolerance any"].size
            cells = [_pct(int(r[k].sum()), n) for k in ("tolerance overall", "tolerance segments", "tolerance any",
                                                         "parity overall", "parity segments", "parity any")]
            print(f"| {shape} | {name} ({segment_alpha(ALPHA, t):.5f}) | {cells[0]} | {cells[1]} | **{cells[2]}** "
                  f"| {cells[3]} / {cells[4]} / **{cells[5]}** |")
    print("\n## planted regression in 1 of 8 segments (equal shares), the other 7 at 0.60")
    print("| bad segment win rate | tracked | Rejected (bad segment) | and overall Adoptable | "
          "trial cases to Rejected: median, p90 | segment cases: median | overall Adoptable: median cases "
          "| another segment wrongly Rejected |")
    print("|---|---|---|---|---|---|---|---|")
    for j, bad in enumerate(BAD_RATES):
        res = planted_scenario(bad, 54_000 + 1000 * j)
        for name, r in res.items():
            at, adopt = r["rejected_at"], r["adoptable_at"]
            n = at.size
            found = at > 0
            both = found & (adopt > 0)
            med = f"{np.median(at[found]):,.0f}, {np.percentile(at[found], 90):,.0f}" if found.any() else "-"
            seg_med = f"{np.median(r['segment_cases'][found]):,.0f}" if found.any() else "-"
            adopt_med = f"{np.median(adopt[adopt > 0]):,.0f}" if (adopt > 0).any() else "-"
            print(f"| {bad:.2f} | {name} | {_pct(int(found.sum()), n)} | {_pct(int(both.sum()), n)} | {med} "
                  f"| {seg_med} | {adopt_med} | {_pct(int(r['other_rejected'].sum()), n)} |")
    print(f"\n({time.time() - began_wall:.0f} s wall, {time.process_time() - began_cpu:.0f} s CPU)")


if __name__ == "__main__":
    main()
