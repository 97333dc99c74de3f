from __future__ import annotations

import json
import math

import numpy as np
import pytest

from policies.judge_health import (
    JudgeHealthState,
    SlotJudgment,
    binomial_two_sided_half,
    first_slot_flags,
    judge_health,
)

TRIALS = 1_000
CASES = 5_000
TIE_SHARE = 0.3


def test_binomial_test_against_exact_enumeration() -> None:
    from math import comb

    for n in (1, 7, 30):
        for k in range(n + 1):
            pmf = [comb(n, i) / 2**n for i in range(n + 1)]
            want = min(1.0, sum(p for p in pmf if p <= pmf[k] * (1 + 1e-12)))
            assert binomial_two_sided_half(k, n) == pytest.approx(want, rel=1e-9)
    assert binomial_two_sided_half(0, 0) == 1.0
    assert binomial_two_sided_half(5_600, 10_000) < 1e-30


def _records(rng: np.random.Generator, cases: int, *, p_first: float) -> list[SlotJudgment]:
    out = []
    for c in range(cases):
        cand = "A" if rng.random() < 0.5 else "B"
        u = rng.random()
        winner = "tie" if u < 0.2 else "error" if u < 0.25 else ("A" if rng.random() < p_first else "B")
        out.append(SlotJudgment(f"c{c}", cand, winner, longer_won=bool(rng.random() < 0.7)))  # type: ignore[arg-type]
    return out


def test_position_bias_is_flagged_and_fair_judge_is_not() -> None:
    rng = np.random.default_rng(9)
    fair = judge_health(_records(rng, 2000, p_first=0.5))
    biased = judge_health(_records(rng, 2000, p_first=0.62))
    print(
        f"\nfair judge: first-slot {fair.first_slot_win_rate:.3f} CS {fair.first_slot_sequence} flagged={fair.flagged};"
        f" biased: first-slot {biased.first_slot_win_rate:.3f} CS {biased.first_slot_sequence} flagged={biased.flagged}"
    )
    assert not fair.flagged and biased.flagged
    assert fair.tie_rate == pytest.approx(0.2 / 0.95, abs=0.03)
    assert fair.error_rate == pytest.approx(0.05, abs=0.015)
    assert fair.longer_answer_win_rate == pytest.approx(0.7, abs=0.03)


def test_seventeen_of_twenty_is_not_enough() -> None:
    """Item 5, the issue's example: 17 first-slot wins of 20 flagged the fixed-sample test."""
    recs = [SlotJudgment(f"c{i}", "A", "A" if i < 17 else "B") for i in range(20)]
    h = judge_health(recs)
    assert not h.flagged
    assert h.first_slot_sequence is not None and h.first_slot_sequence.lower < 0.5


def _fixed_test_thresholds(n_max: int, alpha: float) -> np.ndarray:
    """For each n, the smallest |2k - n| at which the exact binomial test rejects at alpha (n + 1 if never)."""
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n_max + 1, dtype=np.float64)))))
    out = np.full(n_max + 1, 10**9, dtype=np.int64)
    for n in range(1, n_max + 1):
        j = np.arange(n // 2 + 1)
        pmf = np.exp(log_fact[n] - log_fact[j] - log_fact[n - j] - n * math.log(2.0))
        tail = 2 * np.cumsum(pmf)  # p-value when min(k, n - k) = j (exact below n / 2)
        ok = np.nonzero(tail < alpha)[0]
        if ok.size:
            out[n] = n - 2 * ok[-1]
    return out


def _simulate(rng: np.random.Generator, p_first: float) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative (first-slot wins, decisive primary judgments) after each case; 30% ties."""
    u = rng.random((TRIALS, CASES))
    decisive = u >= TIE_SHARE
    first = decisive & (rng.random((TRIALS, CASES)) < p_first)
    return np.cumsum(first, axis=1), np.cumsum(decisive, axis=1)


def test_anytime_flag_for_an_unbiased_judge_and_time_to_flag_a_biased_one() -> None:
    """Item 5: an unbiased judge read after every case is flagged in at most 5% of trials."""
    k, n = _simulate(np.random.default_rng(55), 0.5)
    flags = first_slot_flags(k, n, alpha=0.05, min_drift=0.05, expected_decisive=1000)
    false_share = flags[:, -1].mean()
    # Before the fix: the exact binomial test at 0.01 with the 0.05 drift floor, read after every case.
    thresholds = _fixed_test_thresholds(int(n.max()), 0.01)
    safe = np.maximum(n, 1)
    old = (n >= 1) & (np.abs(2 * k - n) >= thresholds[n]) & (np.abs(k / safe - 0.5) >= 0.05)
    old_share = old.any(axis=1).mean()
    lines = [
        f"\njudge health, {TRIALS} trials x {CASES} cases ({TIE_SHARE:.0%} ties), read after every case:"
        f"\n  unbiased judge flagged: {false_share:.1%} (fixed binomial test before the fix: {old_share:.1%})"
    ]
    delays = {}
    for p_first in (0.6, 0.8):
        kb, nb = _simulate(np.random.default_rng(int(p_first * 100)), p_first)
        fb = first_slot_flags(kb, nb, alpha=0.05, min_drift=0.05, expected_decisive=1000)
        hit = fb.any(axis=1)
        first = fb.argmax(axis=1) + 1
        delays[p_first] = float(np.median(first[hit]))
        dec = nb[np.arange(TRIALS), first - 1]
        lines.append(
            f"\n  first-slot rate {p_first:.1f} (bias {p_first - 0.5:.1f}): flagged in {hit.mean():.1%},"
            f" median {delays[p_first]:.0f} cases ({np.median(dec[hit]):.0f} decisive judgments;"
            f" 90th pct {np.percentile(first[hit], 90):.0f} cases)"
        )
    print("".join(lines))
    assert false_share <= 0.05
    assert old_share > 0.05
    assert delays[0.8] < delays[0.6] < CASES


def test_flag_agrees_with_the_vectorised_rule_and_stands() -> None:
    rng = np.random.default_rng(4)
    recs = _records(rng, 600, p_first=0.62)
    decisive = [r for r in recs if r.winner in ("A", "B") and not r.audit]
    k = np.cumsum([r.winner == "A" for r in decisive])
    n = np.arange(1, len(decisive) + 1)
    flags = first_slot_flags(k, n, alpha=0.05, min_drift=0.05, expected_decisive=1000)
    want = int(flags.argmax()) + 1 if flags.any() else None
    state = None
    positions = [i for i, r in enumerate(recs) if r.winner in ("A", "B")]
    for i in positions:
        h = judge_health(recs[: i + 1], prior=state)
        state = h.state
    assert state is not None and state.flagged_at == want is not None
    # The flag stands: a stale read with fewer judgments, through JSON, keeps it.
    stored = JudgeHealthState.from_dict(json.loads(json.dumps(state.to_dict())))
    stale = judge_health(recs[:50], prior=stored)
    assert stale.flagged and stale.flagged_at == want
    assert judge_health(recs, prior=stored) == judge_health(recs, prior=stored)
    with pytest.raises(ValueError, match="other settings"):
        judge_health(recs, alpha=0.01, prior=stored)


def test_position_consistency_over_audited_cases() -> None:
    recs = [
        # case 1: candidate wins in both orders -> consistent
        SlotJudgment("1", "A", "A"), SlotJudgment("1", "B", "B", audit=True),
        # case 2: slot A wins both times -> the arm flips -> inconsistent
        SlotJudgment("2", "A", "A"), SlotJudgment("2", "B", "A", audit=True),
        # case 3: tie both times -> consistent
        SlotJudgment("3", "B", "tie"), SlotJudgment("3", "A", "tie", audit=True),
        # case 4: audit failed -> not a pair
        SlotJudgment("4", "A", "B"), SlotJudgment("4", "B", "error", audit=True),
        SlotJudgment("5", "B", "abstain"),
    ]
    h = judge_health(recs)
    assert h.audited_pairs == 3 and h.position_consistency == pytest.approx(2 / 3)
    assert (h.judgments, h.valid, h.decisive) == (9, 7, 3)  # decisive primary judgments: cases 1, 2, 4
    assert h.first_slot_wins == 2 and h.first_slot_win_rate == pytest.approx(2 / 3)
    assert h.error_rate == pytest.approx(1 / 9) and h.abstention_rate == pytest.approx(1 / 9)
    assert h.longer_answer_win_rate is None  # no lengths given: unknown, not 0
    assert [r.to_judgment().outcome for r in recs[:2]] == ["candidate", "candidate"]
    assert recs[3].to_judgment().outcome == "incumbent"


def test_empty() -> None:
    h = judge_health([])
    assert h.first_slot_win_rate is None and h.tie_rate is None and not h.flagged
    assert h.first_slot_sequence is None
