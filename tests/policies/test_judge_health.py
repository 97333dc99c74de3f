from __future__ import annotations

import numpy as np
import pytest

from policies.judge_health import SlotJudgment, binomial_two_sided_half, judge_health


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
        f"\nfair judge: first-slot {fair.first_slot_win_rate:.3f} p={fair.first_slot_p_value:.3f} flagged={fair.flagged};"
        f" biased: first-slot {biased.first_slot_win_rate:.3f} p={biased.first_slot_p_value:.2g} flagged={biased.flagged}"
    )
    assert not fair.flagged and biased.flagged
    assert fair.tie_rate == pytest.approx(0.2 / 0.95, abs=0.03)
    assert fair.error_rate == pytest.approx(0.05, abs=0.015)
    assert fair.longer_answer_win_rate == pytest.approx(0.7, abs=0.03)


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
    assert (h.judgments, h.valid, h.decisive) == (9, 7, 5)
    assert h.first_slot_wins == 3 and h.first_slot_win_rate == pytest.approx(3 / 5)
    assert h.error_rate == pytest.approx(1 / 9) and h.abstention_rate == pytest.approx(1 / 9)
    assert h.longer_answer_win_rate is None  # no lengths given: unknown, not 0
    assert [r.to_judgment().outcome for r in recs[:2]] == ["candidate", "candidate"]
    assert recs[3].to_judgment().outcome == "incumbent"


def test_empty() -> None:
    h = judge_health([])
    assert h.first_slot_win_rate is None and h.tie_rate is None and not h.flagged
