from __future__ import annotations

import json

import numpy as np
import pytest

from policies import confseq
from policies.verdict import SequenceState, decide, evaluate


@pytest.mark.parametrize(
    ("lower", "upper", "n", "code"),
    [
        (0.56, 0.60, 100, "candidate_better"),  # wholly above +tolerance
        (0.51, 0.60, 100, "not_worse"),  # above parity but straddling +tolerance: not worse, better still open
        (0.45, 0.60, 100, "not_worse"),  # above -tolerance, straddling +tolerance: Adoptable by the seed's table
        (0.51, 0.54, 100, "equivalent"),  # above parity but within tolerance: equivalent, as below parity
        (0.46, 0.54, 100, "equivalent"),
        (0.45, 0.55, 100, "equivalent"),
        (0.46, 0.49, 100, "equivalent"),  # below parity but within tolerance
        (0.40, 0.44, 100, "regression"),  # wholly below -tolerance
        (0.40, 0.49, 100, "inconclusive"),  # below parity but reaching inside the tolerance: never a regression
        (0.40, 0.55, 100, "inconclusive"),  # not better by more, perhaps worse by more: no traffic word fits
        (0.44, 0.56, 100, "inconclusive"),
        (0.48, 0.58, 100, "not_worse"),
        (0.51, 0.60, 19, "inconclusive"),  # below the minimum number of cases
        (0.40, 0.44, 19, "inconclusive"),
    ],
)
def test_decide(lower: float, upper: float, n: int, code: str) -> None:
    assert decide(lower, upper, n=n, parity=0.5, tolerance=0.05, min_cases=20) == code


_MIRROR = {"candidate_better": "regression", "regression": "candidate_better"}
# not_worse mirrors to an interval below +tolerance straddling -tolerance, which decides nothing.
_MIRROR_OF_NOT_WORSE = "inconclusive"


@pytest.mark.parametrize("lower", [k / 64 for k in range(19, 46)])
@pytest.mark.parametrize("width", [0.0, 1 / 64, 4 / 64, 7 / 64, 20 / 64])
def test_decide_is_symmetric_about_parity(lower: float, width: float) -> None:
    """Item 3: mirroring an interval about parity mirrors the verdict (dyadic values: exact mirrors)."""
    upper = lower + width
    code = decide(lower, upper, n=100, parity=0.5, tolerance=4 / 64, min_cases=20)
    mirrored = decide(1 - upper, 1 - lower, n=100, parity=0.5, tolerance=4 / 64, min_cases=20)
    if code == "not_worse":
        assert mirrored == _MIRROR_OF_NOT_WORSE
    elif mirrored == "not_worse":
        assert code == _MIRROR_OF_NOT_WORSE
    else:
        assert mirrored == _MIRROR.get(code, code)


def test_mirror_image_evidence_gets_mirror_image_verdicts() -> None:
    """Item 3, the issue's example: one way candidate_better and the other equivalent, before the fix."""
    ahead = evaluate({1.0: 2700, 0.0: 5000, -1.0: 2300}, identity="x")
    behind = evaluate({1.0: 2300, 0.0: 5000, -1.0: 2700}, identity="x")
    assert ahead.verdict == behind.verdict == "equivalent"
    assert ahead.sequence.lower == pytest.approx(1 - behind.sequence.upper)
    assert ahead.sequence.upper == pytest.approx(1 - behind.sequence.lower)


def test_evaluate_small_sample() -> None:
    ev = evaluate([1.0] * 19, identity="t")
    assert ev.n == 19 and ev.mean_score == 1.0 and ev.win_rate == 1.0
    assert ev.interval is None and ev.small_sample and ev.note == "small sample"
    assert ev.verdict == "inconclusive"  # even 19 straight wins
    empty = evaluate([], identity="t")
    assert empty.n == 0 and empty.mean_score is None and empty.verdict == "inconclusive"
    assert (empty.sequence.lower, empty.sequence.upper) == (0.0, 1.0)


def test_zero_width_bootstrap_is_not_shown_as_certain() -> None:
    """Item 7: twenty straight wins have no observed spread; no "95%" interval of zero width is shown."""
    ev = evaluate({1.0: 20}, identity="t")
    assert ev.interval is None and ev.interval_note is not None and "no observed spread" in ev.interval_note
    assert not ev.small_sample
    assert ev.sequence.upper - ev.sequence.lower > 0.1  # the decision interval still shows the uncertainty
    spread = evaluate({1.0: 19, 0.0: 1}, identity="t")
    assert spread.interval is not None and spread.interval_note is None
    assert spread.interval.upper > spread.interval.lower


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
    assert a.verdict == "candidate_better" and a.sequence.lower > 0.55


def test_equivalent_and_regression_from_evaluate() -> None:
    tied = evaluate({1.0: 2000, 0.0: 6000, -1.0: 2000}, identity="x")
    assert tied.verdict == "equivalent"
    worse = evaluate({1.0: 250, 0.0: 300, -1.0: 450}, identity="x")
    assert worse.verdict == "regression" and worse.sequence.upper < 0.45
    # Below parity but not below -tolerance: never a regression (issue 23, item 2).
    inside = evaluate({1.0: 300, 0.0: 300, -1.0: 400}, identity="x")
    assert inside.sequence.upper < 0.5 and inside.sequence.upper > 0.45 and inside.verdict == "inconclusive"
    slightly_worse = evaluate({1.0: 9600, 0.0: 10_000, -1.0: 10_400}, identity="x")
    assert slightly_worse.sequence.upper < 0.5 and slightly_worse.verdict == "equivalent"
    slightly_better = evaluate({1.0: 10_400, 0.0: 10_000, -1.0: 9600}, identity="x")
    assert slightly_better.sequence.lower > 0.5 and slightly_better.verdict == "equivalent"


def test_sequence_state_contract() -> None:
    """Idempotent on the same counts, JSON round trip, settings checked, contradiction restarts."""
    first = evaluate({1.0: 350, 0.0: 100, -1.0: 50}, identity="x")
    assert first.verdict == "candidate_better" and first.sequence_state.decided_at == 500
    again = evaluate({1.0: 350, 0.0: 100, -1.0: 50}, identity="x", prior=first.sequence_state)
    assert again == first
    stored = json.loads(json.dumps(first.sequence_state.to_dict()))
    assert SequenceState.from_dict(stored) == first.sequence_state
    # A stale look (fewer cases) is still a valid look: it can only narrow the kept interval.
    stale = evaluate({1.0: 250, 0.0: 100, -1.0: 50}, identity="x", prior=first.sequence_state)
    assert first.sequence.lower <= stale.sequence.lower <= stale.sequence.upper <= first.sequence.upper
    assert stale.sequence_state.n == 500 and stale.verdict == "candidate_better"
    with pytest.raises(ValueError, match="other settings"):
        evaluate({1.0: 300}, identity="x", expected_cases=500, prior=first.sequence_state)
    # The traffic turns: the current interval no longer overlaps the kept one.
    turned = evaluate({1.0: 350, 0.0: 100, -1.0: 5000}, identity="x", prior=first.sequence_state)
    assert turned.contradicted and turned.note is not None and "contradicts" in turned.note
    assert turned.sequence_state.restarts == 1 and turned.sequence == turned.sequence_now
    assert turned.verdict == "regression" and turned.sequence_state.decided_at == 5450


def test_boundary_is_the_empirical_bernstein_mixture() -> None:
    """The radius is the root of the mixture equation, approached from above (never too narrow)."""
    mix = confseq.eb_mixture(1000, 0.05)
    assert np.exp(mix.log_weight).sum() == pytest.approx(1.0)
    q = np.array([0.0, 3.5, 100.0, 1e4, 1e6])
    r = confseq.eb_radius(q, alpha=0.05, expected_cases=1000)
    for qi, ri in zip(q, r):
        total = np.exp(mix.log_weight + mix.k * ri - mix.psi * qi).sum()
        assert 40.0 <= total <= 40.0 * (1 + 1e-6)


def test_each_bet_is_a_supermartingale_step() -> None:
    """The inequality the boundary rests on: E exp(k (x - mu) - psi(k) x^2) <= 1 for x in [-1, 1]."""
    rng = np.random.default_rng(12)
    k = np.linspace(0.0, 0.99, 100)
    psi = -np.log1p(-k) - k
    for _ in range(200):
        values = rng.uniform(-1, 1, 4)
        p = rng.dirichlet(np.ones(4))
        mu = float(p @ values)
        expect = (p[:, None] * np.exp(k[None, :] * (values[:, None] - mu) - psi[None, :] * values[:, None] ** 2)).sum(0)
        assert (expect <= 1 + 1e-12).all()


def test_confidence_sequence_is_tightest_near_expected_size() -> None:
    """The tuning parameter does what it says: at Q = expected size, the tuned boundary is
    narrower than boundaries tuned for other sizes."""
    for expected in (200, 1000, 5000):
        radius = {
            other: float(confseq.eb_radius(expected, alpha=0.05, expected_cases=other))
            for other in (expected // 4, expected, expected * 4)
        }
        assert radius[expected] < radius[expected // 4] and radius[expected] < radius[expected * 4]
    x = confseq.mixture_x(0.05)
    assert x == pytest.approx(-2 * np.log(0.05) + np.log1p(x))
