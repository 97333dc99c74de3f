"""The detector's history for the watch's chart (``policies.cusum.statistic_path``)."""

from __future__ import annotations

from policies import cusum


def test_the_path_is_run_one_step_at_a_time_and_ends_where_run_ends() -> None:
    design = cusum.design(0.05, min_judged=10)
    observations: list[cusum.Observation] = (["new_wins", "tie"] * 40) + (["old_wins"] * 60)
    path = cusum.statistic_path(design, observations, points=500)
    assert [j for j, _ in path] == list(range(1, 141))
    state = cusum.CusumState()
    for (judged, stat), obs in zip(path, observations):
        state = cusum.step(design, state, obs)
        assert (judged, stat) == (state.judged, state.statistic * design.unit)
    final = cusum.run(design, cusum.CusumState(), observations)
    assert path[-1] == (final.judged, final.statistic * design.unit) and final.fired
    thinned = cusum.statistic_path(design, observations, points=20)
    assert len(thinned) == 20 and thinned[0] == path[0] and thinned[-1] == path[-1]
    assert cusum.statistic_path(design, []) == []
