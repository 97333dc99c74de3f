"""The paired view: cost only over cases both priced completely (unknown is never zero),
latency as medians over cases with both latencies."""

from __future__ import annotations

from policies.paired import paired_figures


def test_costs_compare_only_completely_priced_pairs_and_latencies_by_median() -> None:
    rows = [
        (100, "complete", 400, "complete", 20.0, 100.0),
        (300, "complete", 600, "complete", 40.0, 300.0),
        (None, "unknown", 500, "complete", None, 200.0),  # candidate cost unknown: left out, not zero
        (50, "complete", 0, "unknown", 30.0, None),  # incumbent cost and latency unknown
    ]
    f = paired_figures(rows)
    assert (f["cost_cases"], f["candidate_cost_micros"], f["incumbent_cost_micros"]) == (2, 400, 1000)
    assert f["cost_ratio"] == 0.4
    assert (f["latency_cases"], f["candidate_latency_ms_p50"], f["incumbent_latency_ms_p50"]) == (2, 30.0, 200.0)
    assert f["latency_ratio"] == 0.15


def test_nothing_paired_is_none_not_zero() -> None:
    f = paired_figures([(None, "unknown", 0, "unknown", None, None)])
    assert f["cost_ratio"] is None and f["latency_ratio"] is None and f["cost_cases"] == 0
