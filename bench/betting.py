"""Issue 31's table: cases to a decision, today's boundary against the betting sequence (seeded).

    .venv/bin/python bench/betting.py            # 2,000 trials per row x 5,000 cases, minutes on 2 cores
    .venv/bin/python bench/betting.py --quick    # a few trials (the test suite runs it so)

Every trial is looked at after every case from the first. Case scores as in
tests/policies/_sim.py (10% of cases audited with a second judgment).

- null: true win rate 0.50, ties 0 / 30 / 70%: the share of trials whose interval *ever*
  excludes parity (lower > 0.5 or upper < 0.5) at any case. That is the strictest reading
  (tolerance 0) and an upper bound on wrong decisions under any tolerance, with or without the
  20-case floor and the running intersection (a kept interval excludes parity only after some
  look's interval did). For the betting methods it is measured on the capital at the
  thresholds alone, which bounds the shipped grid rule from above again (it also needs every
  grid point below rejected).
- power: true win rate 0.55 / 0.60 / 0.65 / 0.70, 30% ties: the first case, at or after the
  20-case floor, at which the running intersection lies wholly above parity, i.e. the decision a
  fixed-sample test against parity makes. Median and 90th percentile (a trial still undecided at
  5,000 counts as 5,000), and their ratio to the fixed-sample size with 80% power (two-sided
  alpha 0.05) on the same score distribution.
"""

from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies import betting, confseq  # noqa: E402
from tests.policies._sim import simulate_case_scores  # noqa: E402

QUICK = "--quick" in sys.argv[1:]
TRIALS = 4 if QUICK else 2000
CASES = 500 if QUICK else 5000
FLOOR = 20
ALPHA = 0.05
METHODS = ("today: empirical Bernstein, expected_cases 1,000", "**shipped: betting, mixed constant bets, hedged**",
           "hybrid: betting a/2 + EB a/2")


def fixed_sample_size(w: float, ties: float = 0.3, audit: float = 0.1) -> int:
    """Cases a fixed-n two-sided z-test at alpha 0.05 needs for 80% power against parity."""
    mean = 2 * w - 1
    single = 1 - ties
    double = (2 * single + 2 * mean * mean) / 4  # E[((a + b) / 2)^2], a and b independent
    var = (1 - audit) * single + audit * double - mean * mean
    return math.ceil((1.959963984540054 + 0.8416212335729143) ** 2 * var / mean ** 2)


def eb_current(x: np.ndarray, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = confseq.running_eb_bounds(x, alpha=alpha, expected_cases=1000)
    return (1 + np.maximum(-1.0, lo)) / 2, (1 + np.minimum(1.0, hi)) / 2


def null_row(ties: float, seed: int) -> list[np.ndarray]:
    """Per method, the first case at which the interval excluded parity (0: never)."""
    m = np.array([0.5])
    firsts: list[list[np.ndarray]] = [[], [], []]
    for block in range(0, TRIALS, 250):
        rows = min(250, TRIALS - block)
        x = simulate_case_scores(np.random.default_rng(seed + block), rows, CASES, win_rate=0.5, tie_share=ties)
        lo, hi = eb_current(x, ALPHA)
        firsts[0].append(_first((lo > 0.5) | (hi < 0.5)))
        e_lo, e_hi = eb_current(x, ALPHA / 2)
        cap = betting.start(rows, 1)
        bet = np.zeros((rows, CASES), dtype=bool)
        hyb = np.zeros((rows, CASES), dtype=bool)
        for s in range(0, CASES, 250):
            cap, lp, lm = betting.advance(cap, (1 + x[:, s:s + 250]) / 2, m)
            lp, lm = lp[..., 0], lm[..., 0]
            bet[:, s:s + 250] = (lp >= math.log(2 / ALPHA)) | (lm >= math.log(2 / ALPHA))
            hyb[:, s:s + 250] = (lp >= math.log(4 / ALPHA)) | (lm >= math.log(4 / ALPHA))
        firsts[1].append(_first(bet))
        firsts[2].append(_first(hyb | (e_lo > 0.5) | (e_hi < 0.5)))
    return [np.concatenate(f) for f in firsts]


def _first(mask: np.ndarray) -> np.ndarray:
    return np.where(mask.any(axis=1), mask.argmax(axis=1) + 1, 0)


def power_row(w: float, seed: int) -> list[np.ndarray]:
    """Per method, the case count of the first decision above parity (CASES when none; -1 when the
    first decision was below parity)."""
    x = simulate_case_scores(np.random.default_rng(seed), TRIALS, CASES, win_rate=w)
    out = []
    lo, hi = eb_current(x, ALPHA)
    out.append(_decide(np.maximum.accumulate(lo, axis=1), np.minimum.accumulate(hi, axis=1)))
    for method in ("betting", "hybrid"):
        out.append(_betting_decisions((1 + x) / 2, method))
    return out


def _decide(run_lo: np.ndarray, run_hi: np.ndarray) -> np.ndarray:
    n = np.arange(1, run_lo.shape[1] + 1)
    up = _first((run_lo > 0.5) & (n >= FLOOR))
    down = _first((run_hi < 0.5) & (n >= FLOOR))
    return np.where((down > 0) & ((up == 0) | (down < up)), -1, np.where(up > 0, up, CASES))


def _betting_decisions(y: np.ndarray, method: str) -> np.ndarray:
    """Case by case in chunks, dropping trials once decided (the shipped code path)."""
    rows = y.shape[0]
    result = np.full(rows, CASES)
    live = np.arange(rows)
    cap: betting.Capital | None = None
    run_lo, run_hi = np.zeros(rows), np.ones(rows)
    for s in range(0, CASES, 100):
        lo, hi, cap = betting.running_bounds(y[live, s:s + 100], method=method, capital=cap, alpha=ALPHA)
        rl = np.maximum.accumulate(np.concatenate([run_lo[:, None], lo], axis=1), axis=1)[:, 1:]
        rh = np.minimum.accumulate(np.concatenate([run_hi[:, None], hi], axis=1), axis=1)[:, 1:]
        n = s + np.arange(1, lo.shape[1] + 1)
        up = _first((rl > 0.5) & (n >= FLOOR))
        down = _first((rh < 0.5) & (n >= FLOOR))
        done = (up > 0) | (down > 0)
        result[live[done]] = np.where((down[done] > 0) & ((up[done] == 0) | (down[done] < up[done])), -1,
                                      s + up[done])
        keep = ~done
        live, run_lo, run_hi = live[keep], rl[keep, -1], rh[keep, -1]
        cap = betting.Capital(cap.t, cap.total[keep], cap.spread[keep], cap.log_plus[keep], cap.log_minus[keep],
                              cap.eb_sum[keep], cap.eb_sq[keep])
        if live.size == 0:
            break
    return result


def main() -> None:
    began = time.time()
    nulls = {ties: null_row(ties, 1000 + int(ties * 100)) for ties in (0.0, 0.3, 0.7)}
    powers = {w: power_row(w, int(w * 1000)) for w in (0.55, 0.60, 0.65, 0.70)}
    fixed = {w: fixed_sample_size(w) for w in powers}
    print(f"{TRIALS:,} trials per row x {CASES:,} cases, looks after every case, floor {FLOOR}, alpha {ALPHA}")
    print("fixed-sample 80%-power sizes: " + " / ".join(f"{fixed[w]}" for w in powers))
    head = " | ".join(f"{w:.2f} median, p90 (x fixed)" for w in powers)
    print(f"| method | null wrong % ties 0 / 30 / 70 | {head} |")
    print("|---|---|" + "---|" * len(powers))
    for i, name in enumerate(METHODS):
        wrong = " / ".join(f"{(nulls[t][i] > 0).mean():.2%}" for t in nulls)
        cells = []
        for w in powers:
            d = powers[w][i]
            cases = np.where(d < 0, CASES, d)
            med, p90 = np.median(cases), np.percentile(cases, 90)
            wrong_dir = (d < 0).mean()
            note = f", wrong {wrong_dir:.1%}" if wrong_dir else ""
            cells.append(f"{med:.0f}, {p90:.0f} ({med / fixed[w]:.2f}x, {p90 / fixed[w]:.2f}x{note})")
        print(f"| {name} | {wrong} | " + " | ".join(cells) + " |")
    for ties in nulls:
        bet = nulls[ties][1]
        by = " / ".join(f"{((bet > 0) & (bet <= k)).mean():.2%}" for k in (20, 100, 500, CASES))
        print(f"shipped, ties {ties:.0%}: null interval off parity by case 20 / 100 / 500 / {CASES:,}: {by}")
    print(f"({time.time() - began:.0f} s)")


if __name__ == "__main__":
    main()
