"""The tap benchmark's engine-alone phase ends on both counts of its cases, not on one.

A CI run ended the phase on the trial's funnel alone (every case judged) while the gauges,
which the engine's process reports at most every 0.1 s, still showed 4 cases in flight: the
benchmark printed "in flight 4 ... TIMED OUT" and its quick test failed.
"""

from __future__ import annotations

from types import ModuleType

def sample(tap: ModuleType, *, sampled: int, depth: int, in_flight: int, outcomes: dict[str, int]) -> object:
    meter = tap.Meter(None, {}, None, 0.0, None)
    return tap.Sample(0.0, depth, in_flight, sampled, meter, outcomes)


def test_the_funnel_complete_with_cases_still_in_flight_by_the_gauges_is_not_the_end(tap: ModuleType) -> None:
    # The CI run's last sample: funnel {'judged': 30}, in flight 4, queue depth 0, 30 offered.
    s = sample(tap, sampled=30, depth=0, in_flight=4, outcomes={"judged": 30})
    assert not tap.all_ended(s, before=0, offered=30)


def test_the_gauges_settled_with_the_funnel_behind_is_not_the_end(tap: ModuleType) -> None:
    s = sample(tap, sampled=30, depth=0, in_flight=0, outcomes={"judged": 26})
    assert not tap.all_ended(s, before=0, offered=30)


def test_both_counts_complete_is_the_end(tap: ModuleType) -> None:
    s = sample(tap, sampled=30, depth=0, in_flight=0, outcomes={"judged": 29, "candidate_error": 1})
    assert tap.all_ended(s, before=0, offered=30)


def test_cases_finished_before_the_phase_count_against_its_own(tap: ModuleType) -> None:
    # A sidecar shared between phases (--quick) finished 10 cases before this one began.
    s = sample(tap, sampled=40, depth=0, in_flight=0, outcomes={"judged": 30})
    assert tap.all_ended(s, before=10, offered=30)
    s = sample(tap, sampled=40, depth=1, in_flight=0, outcomes={"judged": 30})
    assert not tap.all_ended(s, before=10, offered=30)
