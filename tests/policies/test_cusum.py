"""The watch detector: false-alarm run length and detection delay, by simulation."""

from __future__ import annotations

import json

import numpy as np
import pytest

from policies import cusum
from policies.cusum import CusumDesign, CusumState

RUNS = 2_000


def simulate_run_lengths(
    d: CusumDesign, p_old_wins: float, runs: int, rng: np.random.Generator, chunk: int = 4096
) -> np.ndarray:
    """Decisive judgments until the alarm, for ``runs`` independent detectors (no ties).

    Page's recursion S_t = max(0, S_{t-1} + x_t) is the walk W_t minus its
    running minimum (floored at 0), so a whole chunk of steps is a cumsum and an
    accumulate; the alarm is the first t >= min_judged with S_t >= threshold.
    """
    walk = np.zeros(runs, dtype=np.int64)
    low = np.zeros(runs, dtype=np.int64)
    lengths = np.zeros(runs, dtype=np.int64)
    alive = np.arange(runs)
    start = 0
    while alive.size:
        inc = np.where(rng.random((alive.size, chunk)) < p_old_wins, d.up, -d.down)
        w = walk[alive, None] + np.cumsum(inc, axis=1)
        m = np.minimum(low[alive, None], np.minimum.accumulate(w, axis=1))
        t = start + np.arange(1, chunk + 1)
        hit = (w - m >= d.threshold) & (t >= d.min_judged)
        fired = hit.any(axis=1)
        lengths[alive[fired]] = start + hit[fired].argmax(axis=1) + 1
        walk[alive], low[alive] = w[:, -1], m[:, -1]
        alive = alive[~fired]
        start += chunk
    return lengths


@pytest.fixture(scope="module")
def watch() -> CusumDesign:
    return cusum.design(0.5)


def test_simulation_follows_the_detector(watch: CusumDesign) -> None:
    rng = np.random.default_rng(1)
    for p in (0.5, 0.65):
        obs = ["old_wins" if u < p else "new_wins" for u in rng.random(3000)]
        state, fired_at = CusumState(), None
        for o in obs:
            state = cusum.step(watch, state, o)  # type: ignore[arg-type]
            if state.fired and fired_at is None:
                fired_at = state.judged
        inc = np.where(np.array(obs) == "old_wins", watch.up, -watch.down)
        w = np.cumsum(inc)
        s = w - np.minimum(0, np.minimum.accumulate(w))
        t = np.arange(1, len(obs) + 1)
        hit = (s >= watch.threshold) & (t >= watch.min_judged)
        assert fired_at == (int(hit.argmax()) + 1 if hit.any() else None)


def test_false_alarm_run_length_and_detection_delay(watch: CusumDesign) -> None:
    arl0 = simulate_run_lengths(watch, 0.5, RUNS, np.random.default_rng(2024))
    delay = simulate_run_lengths(watch, 0.6, RUNS, np.random.default_rng(2025))
    exact1 = cusum.average_run_length(watch.up, watch.down, watch.threshold, 0.6)
    print(
        f"\nCUSUM p0=0.50 -> p1=0.60, threshold h={watch.threshold_llr:.3f} (lattice {watch.threshold}),"
        f" min {watch.min_judged} judged:"
        f"\n  run length to a false alarm (no shift), {RUNS} runs: mean {arl0.mean():.0f}"
        f" (median {np.median(arl0):.0f}, 5th pct {np.percentile(arl0, 5):.0f}); exact ARL0 {watch.arl0:.0f}"
        f"\n  detection delay for 0.50 -> 0.60, {RUNS} runs: mean {delay.mean():.0f}"
        f" (median {np.median(delay):.0f}, 90th pct {np.percentile(delay, 90):.0f}); exact {exact1:.0f}"
        f"\n  (units: decisive judgments; with ties the counts in judged cases are larger)"
    )
    se0 = arl0.std() / np.sqrt(RUNS)
    assert watch.arl0 >= 10_000
    assert arl0.mean() > 10_000 - 4 * se0
    assert abs(arl0.mean() - watch.arl0) < 4 * se0 + 0.01 * watch.arl0
    se1 = delay.std() / np.sqrt(RUNS)
    assert abs(delay.mean() - exact1) < 4 * se1 + 1
    assert delay.mean() < 400  # a 10-point shift is caught within a few hundred judgments


def test_no_alarm_before_min_judged(watch: CusumDesign) -> None:
    state = cusum.run(watch, CusumState(), ["old_wins"] * 29)
    assert state.statistic >= watch.threshold and not state.fired
    assert cusum.step(watch, state, "old_wins").fired_at == 30
    assert cusum.step(watch, state, "tie").fired_at == 30  # a tie is a judged case too
    again = cusum.step(watch, cusum.step(watch, state, "tie"), "new_wins")
    assert again.fired_at == 30 and again.statistic == state.statistic  # fired stays fired


def test_ties_do_not_move_the_statistic(watch: CusumDesign) -> None:
    s = cusum.run(watch, CusumState(), ["old_wins", "tie", "tie", "new_wins", "tie"])
    assert (s.judged, s.decisive) == (5, 2)
    assert s.statistic == max(0, watch.up - watch.down)


def test_state_and_design_store_and_resume(watch: CusumDesign) -> None:
    rng = np.random.default_rng(6)
    obs = [("old_wins", "new_wins", "tie")[i] for i in rng.choice(3, 500, p=[0.45, 0.35, 0.2])]
    whole = cusum.run(watch, CusumState(), obs)  # type: ignore[arg-type]
    half = cusum.run(watch, CusumState(), obs[:250])  # type: ignore[arg-type]
    stored_state = json.loads(json.dumps(half.to_dict()))
    stored_design = json.loads(json.dumps(watch.to_dict()))
    resumed = cusum.run(CusumDesign.from_dict(stored_design), CusumState.from_dict(stored_state), obs[250:])  # type: ignore[arg-type]
    assert resumed == whole and CusumDesign.from_dict(stored_design) == watch


def test_baseline_is_capped_at_parity() -> None:
    assert cusum.baseline_from_promotion(70, 30) == 0.5
    assert cusum.baseline_from_promotion(30, 70) == pytest.approx(0.3)
    assert cusum.baseline_from_promotion(0, 0) == 0.5
    d = cusum.design(cusum.baseline_from_promotion(30, 70))
    assert (d.baseline, d.alternative) == pytest.approx((0.3, 0.4))
    assert d.arl0 >= 10_000
    assert cusum.average_run_length(d.up, d.down, d.threshold - 1, 0.3) < 10_000  # smallest such threshold
