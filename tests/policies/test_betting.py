"""The betting confidence sequence (policies/betting.py) and its case-by-case fold (policies/stream.py).

Seeded and small: the error bound with a margin, the order contract (any split of a stream into
batches gives the same state bit for bit), and the grid rule. The big table (2,000 trials x
5,000 cases per row) is bench/betting.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from policies import betting, forecast
from policies.stream import StreamState, bounds_path, fold_cases
from tests.policies._sim import first_true, simulate_case_scores

SETTINGS: dict[str, Any] = dict(alpha=0.05, tolerance=0.05, min_cases=20, expected_cases=1000)


def _stream(rng: np.random.Generator, n: int, win_rate: float) -> list[tuple[int, float]]:
    x = simulate_case_scores(rng, 1, n, win_rate=win_rate)[0]
    return [(i + 1, float(v)) for i, v in enumerate(x)]


@pytest.mark.parametrize("ties", [0.0, 0.3, 0.7])
def test_null_trials_exclude_parity_at_most_alpha_with_a_margin(ties: float) -> None:
    """800 null trials x 2,000 cases, every case a look from the first: the share whose interval
    ever excludes parity (the strictest reading: an upper bound on wrong decisions under any
    tolerance, floor or intersection) stays under alpha = 5% (measured 3.6-4.5% on these seeds,
    one standard error about 0.7 points; the mixed bets spend most of alpha, as a valid
    sequence that decides fast should). Measured on the capital at parity, which bounds the
    grid rule from above (it also needs every point below rejected)."""
    trials, cases = 800, 2000
    x = simulate_case_scores(np.random.default_rng(31 + int(ties * 10)), trials, cases, win_rate=0.5, tie_share=ties)
    cap, lp, lm = betting.advance(betting.start(trials, 1), (1 + x) / 2, np.array([0.5]))
    level = math.log(2 / 0.05)
    wrong = ((lp[..., 0] >= level) | (lm[..., 0] >= level)).any(axis=1).mean()
    assert wrong <= 0.05, f"{wrong:.1%} of null trials excluded parity"
    assert cap.t == cases


def test_a_better_candidate_is_decided_in_about_the_fixed_sample_size() -> None:
    """True win rate 0.70 (fixed-sample 80%-power size 26 cases): the median trial's interval is
    wholly above parity by about 29 cases (bench: 29), with the 20-case floor."""
    x = simulate_case_scores(np.random.default_rng(7), 200, 150, win_rate=0.70)
    lo, _hi, _cap = betting.running_bounds((1 + x) / 2)
    n = np.arange(1, 151)
    first = first_true((np.maximum.accumulate(lo, axis=1) > 0.5) & (n >= 20))
    assert (first > 0).all()
    assert 26 <= np.median(first) <= 40


@pytest.mark.parametrize(("win_rate", "cases", "fixed"), [(0.55, 1500, 515), (0.60, 500, 124), (0.70, 120, 26)])
def test_the_mixed_bets_meet_the_issue_targets_at_parity(win_rate: float, cases: int, fixed: int) -> None:
    """600 trials, 30% ties, every case a look, 20-case floor: cases until K+(parity) reaches
    2 / alpha, median <= 1.25x and 90th percentile <= 2.6x the fixed-sample 80%-power size
    (issue 31). On this seed the aGRAPA bets shipped before missed at 0.55 (1.27x, 2.63x) and their
    0.70 median sat at 1.23x; the mixed constant bets give 1.06x / 2.41x there."""
    x = simulate_case_scores(np.random.default_rng(3), 600, cases, win_rate=win_rate)
    _cap, lp, _lm = betting.advance(betting.start(600, 1), (1 + x) / 2, np.array([0.5]))
    hit = lp[..., 0] >= math.log(2 / 0.05)
    first = np.maximum(np.where(hit.any(axis=1), hit.argmax(axis=1) + 1, cases), 20)
    assert np.median(first) <= 1.25 * fixed
    assert np.percentile(first, 90) <= 2.6 * fixed


def test_the_capital_is_the_equal_mixture_of_the_constant_bets() -> None:
    """log K+(m) is log of the mean over the bets of prod (1 + b / m (y_i - m)), K-(m) likewise
    with b / (1 - m): the wealth of each constant bettor, averaged (a reference computation)."""
    y = (1 + simulate_case_scores(np.random.default_rng(8), 1, 60, win_rate=0.6)) / 2
    m = np.array([0.3, 0.5, 0.55, 0.8])
    _cap, lp, lm = betting.advance(betting.start(1, m.size), y, m)
    for j, point in enumerate(m.tolist()):
        for t in (1, 17, 60):
            z = y[0, :t] - point
            plus = np.mean([np.prod(1 + b / point * z) for b in betting.BETS])
            minus = np.mean([np.prod(1 - b / (1 - point) * z) for b in betting.BETS])
            assert lp[0, t - 1, j] == pytest.approx(math.log(plus), rel=1e-9, abs=1e-9)
            assert lm[0, t - 1, j] == pytest.approx(math.log(minus), rel=1e-9, abs=1e-9)


def test_a_state_kept_with_the_earlier_agrapa_bets_is_read_and_folds_on() -> None:
    """A state written before the mixed bets (no ``bets`` key, one log capital per grid point)
    gives every bet that capital: the interval read from it is the one the old state showed,
    and folding goes on from there (old capital times the mixture's growth)."""
    g = betting.grid(0.5, 0.05)
    rng = np.random.default_rng(12)
    plus, minus = rng.uniform(-2, 4, g.size), rng.uniform(-2, 4, g.size)
    old = {"t": 40, "total": 24.0, "spread": 7.5, "log_plus": plus.tolist(), "log_minus": minus.tolist(),
           "eb_sum": 8.0, "eb_sq": 30.0}
    state = betting.BettingState.from_dict(old)
    cap = state.capital()
    mixed_plus = np.log(np.exp(cap.log_plus).mean(axis=-1))
    assert np.allclose(mixed_plus[0], plus) and np.allclose(np.log(np.exp(cap.log_minus).mean(axis=-1))[0], minus)
    assert betting.BettingState.from_dict(state.to_dict()) == state
    assert state.to_dict()["bets"] == betting.BET_RULE
    lo, hi, after = betting.running_bounds(np.array([0.75, 1.0]), capital=cap)
    assert after.t == 42 and lo.shape == hi.shape == (2,)
    with pytest.raises(ValueError):
        betting.BettingState.from_dict({**state.to_dict(), "bets": "something-else"})


def test_any_split_of_a_stream_folds_to_the_same_state_bit_for_bit() -> None:
    stream = _stream(np.random.default_rng(3), 400, 0.6)
    whole = fold_cases(None, stream, **SETTINGS)
    one_by_one: StreamState | None = None
    for case in stream:
        one_by_one = fold_cases(one_by_one, [case], **SETTINGS).state
    rng = np.random.default_rng(4)
    cuts = sorted(set(rng.integers(0, 400, size=12).tolist()) | {0, 400})
    pieces: StreamState | None = None
    for a, b in zip(cuts, cuts[1:]):
        # A fold may also see cases it already folded (a stale read): they are skipped.
        pieces = fold_cases(pieces, stream[max(0, a - 3):b], **SETTINGS).state
    assert whole.state == one_by_one == pieces
    assert whole.state.sequence is not None and whole.verdict != "inconclusive"
    assert StreamState.from_dict(whole.state.to_dict()) == whole.state, "the JSON form round-trips exactly"


def test_the_decision_and_its_case_do_not_depend_on_when_the_trial_is_read() -> None:
    """Folding case by case and folding a prefix at once agree at every prefix: verdict,
    decided_at and state (every case is a look, whoever reads and whenever)."""
    stream = _stream(np.random.default_rng(11), 120, 0.65)
    state: StreamState | None = None
    seen = set()
    for k, case in enumerate(stream, 1):
        state = fold_cases(state, [case], **SETTINGS).state
        if k % 7 == 0 or k == len(stream):
            at_once = fold_cases(None, stream[:k], **SETTINGS)
            assert at_once.state == state
            assert state.sequence is not None
            seen.add(state.sequence.decision)
    assert "inconclusive" in seen and len(seen) > 1, "the stream reached a decision along the way"


def test_a_fold_stops_at_a_gap_and_skips_what_it_folded() -> None:
    stream = _stream(np.random.default_rng(5), 30, 0.6)
    first = fold_cases(None, stream[:10], **SETTINGS)
    gap = fold_cases(first.state, stream[11:], **SETTINGS)  # case 11 not visible yet
    assert gap.folded == 0 and gap.state == first.state
    again = fold_cases(first.state, stream[:10], **SETTINGS)
    assert again.folded == 0 and again.state == first.state
    rest = fold_cases(first.state, stream[10:], **SETTINGS)
    assert rest.folded == 20 and rest.state.cursor == 30


def test_the_interval_reads_the_tests_at_the_thresholds_exactly() -> None:
    """lower > parity + tolerance exactly when K+ rejected parity + tolerance and every grid
    point below it; the bounds are the floats just past the last rejected point."""
    m = betting.grid(0.5, 0.05)
    assert {0.45, 0.5, 0.55} <= set(m.tolist())
    level = math.log(2 / 0.05)
    plus = np.where(m <= 0.55, level, 0.0)[None, :]
    minus = np.where(m >= 0.9, level + 1, level - 1e-9)[None, :]
    lo, hi = betting.bounds_from_capital(plus, minus, m, alpha=0.05)
    assert lo[0] == np.nextafter(0.55, 1) and lo[0] > 0.55
    assert hi[0] == np.nextafter(0.9, 0) and hi[0] < 0.9
    holes = plus.copy()
    holes[0, 10] = 0.0  # one point below not rejected: the lower bound stops under it
    lo2, _ = betting.bounds_from_capital(holes, minus, m, alpha=0.05)
    assert lo2[0] == np.nextafter(m[9], 1) and lo2[0] < 0.45


def test_every_factor_keeps_capital_positive_and_the_settings_are_checked() -> None:
    y = np.array([[0.0, 1.0] * 50])
    cap, lp, lm = betting.advance(betting.start(1, betting.grid().size), y, betting.grid())
    assert np.isfinite(lp).all() and np.isfinite(lm).all()
    assert lp.min() >= 100 * math.log(1 - betting.TRUNCATION) - 1e-9
    with pytest.raises(ValueError):
        betting.running_bounds(np.array([1.5]))
    with pytest.raises(ValueError):
        fold_cases(None, [(1, 2.0)], **SETTINGS)


def test_the_forecast_reads_the_measured_table_by_margin() -> None:
    assert forecast.cases_to_clear(0.10) == forecast.MEASURED[0.10]
    assert forecast.cases_to_clear(0.04) is None and forecast.cases_to_clear(0.25) is None
    mid = forecast.cases_to_clear(0.12)
    assert mid is not None and forecast.MEASURED[0.15][0] < mid[0] < forecast.MEASURED[0.10][0]
    rows = {f.win_rate: f for f in forecast.forecast(tolerance=0.05, min_cases=40, cost_per_case_micros=1000.0)}
    fast, mid = forecast.MEASURED[0.20], forecast.MEASURED[0.10]
    assert fast[0] < 40 and rows[0.65].adoptable == (40, max(40, fast[1])), "the floor holds a fast decision back"
    assert rows[0.65].better == mid and rows[0.65].better_cost_micros == (mid[0] * 1000, mid[1] * 1000)
    assert rows[0.5].better is None


def test_the_chart_path_is_the_kept_interval_case_by_case() -> None:
    stream = _stream(np.random.default_rng(21), 90, 0.62)
    path = bounds_path(stream, points=200, **SETTINGS)
    assert [n for n, _, _ in path] == list(range(1, 91))
    for n, lo, hi in path[::9]:
        kept = fold_cases(None, stream[:n], **SETTINGS).state.sequence
        assert kept is not None and (kept.lower, kept.upper) == (lo, hi)
