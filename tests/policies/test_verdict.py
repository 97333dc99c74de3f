from __future__ import annotations

import numpy as np
import pytest

from policies import confseq
from policies.verdict import decide, evaluate


@pytest.mark.parametrize(
    ("lower", "upper", "n", "code"),
    [
        (0.51, 0.60, 100, "candidate_better"),
        (0.51, 0.54, 100, "candidate_better"),  # above parity wins over "within tolerance"
        (0.46, 0.54, 100, "equivalent"),
        (0.45, 0.55, 100, "equivalent"),
        (0.46, 0.49, 100, "equivalent"),  # below parity but within tolerance
        (0.40, 0.49, 100, "regression"),
        (0.44, 0.56, 100, "inconclusive"),
        (0.48, 0.58, 100, "inconclusive"),
        (0.51, 0.60, 19, "inconclusive"),  # below the minimum number of cases
        (0.40, 0.49, 19, "inconclusive"),
    ],
)
def test_decide(lower: float, upper: float, n: int, code: str) -> None:
    assert decide(lower, upper, n=n, parity=0.5, tolerance=0.05, min_cases=20) == code


def test_evaluate_small_sample() -> None:
    ev = evaluate([1.0] * 19, identity="t")
    assert ev.n == 19 and ev.mean_score == 1.0 and ev.win_rate == 1.0
    assert ev.interval is None and ev.small_sample and ev.note == "small sample"
    assert ev.verdict == "inconclusive"  # even 19 straight wins
    empty = evaluate([], identity="t")
    assert empty.n == 0 and empty.mean_score is None and empty.verdict == "inconclusive"
    assert (empty.sequence.lower, empty.sequence.upper) == (0.0, 1.0)


def test_evaluate_mapping_equals_sequence_and_is_on_win_rate_scale() -> None:
    seq = [1.0] * 300 + [0.0] * 150 + [-1.0] * 150 + [0.5] * 30
    a = evaluate(seq, identity="trial-9")
    b = evaluate({-1.0: 150, 0.0: 150, 0.5: 30, 1.0: 300}, identity="trial-9")
    assert a == b
    assert a.n == 630 and a.mean_score == pytest.approx(165 / 630)
    assert a.win_rate == pytest.approx((1 + 165 / 630) / 2)
    assert a.interval is not None and a.interval.lower < a.win_rate < a.interval.upper
    # The anytime-valid sequence is wider than the fixed-n bootstrap interval.
    assert a.sequence.lower < a.interval.lower and a.sequence.upper > a.interval.upper
    assert a.verdict == "candidate_better" and a.sequence.lower > 0.5


def test_equivalent_and_regression_from_evaluate() -> None:
    tied = evaluate({1.0: 2000, 0.0: 6000, -1.0: 2000}, identity="x")
    assert tied.verdict == "equivalent"
    worse = evaluate({1.0: 300, 0.0: 300, -1.0: 400}, identity="x")
    assert worse.verdict == "regression" and worse.sequence.upper < 0.5
    slightly_worse = evaluate({1.0: 9600, 0.0: 10_000, -1.0: 10_400}, identity="x")
    assert slightly_worse.sequence.upper < 0.5 and slightly_worse.verdict == "equivalent"


def test_confidence_sequence_is_tightest_near_expected_size() -> None:
    """The tuning parameter does what it says: at n = expected size (unit variance),
    the tuned boundary is narrower than boundaries tuned for other sizes."""
    for expected in (200, 1000, 5000):
        widths = {
            other: float(confseq.half_width(expected, 1.0, alpha=0.05, r2=confseq.tuning_r2(other, 0.05)))
            for other in (expected // 4, expected, expected * 4)
        }
        assert widths[expected] < widths[expected // 4] and widths[expected] < widths[expected * 4]
    x = confseq.mixture_x(0.05)
    assert x == pytest.approx(-2 * np.log(0.05) + np.log1p(x))
