"""The promotion rule, pure: evidence kind, status and verdict in; a refusal reason out."""

from __future__ import annotations

import pytest

from policies.promotion import PROMOTABLE, observation, refusal, utc_day


@pytest.mark.parametrize("verdict", ["candidate_better", "equivalent"])
@pytest.mark.parametrize("status", PROMOTABLE)
def test_an_adoptable_traffic_verdict_promotes(status: str, verdict: str) -> None:
    assert refusal(evidence="traffic", status=status, verdict=verdict) is None


@pytest.mark.parametrize("verdict", ["candidate_better", "equivalent", "regression", "inconclusive"])
def test_corpus_evidence_never_promotes_whatever_its_verdict(verdict: str) -> None:
    assert refusal(evidence="corpus", status="running", verdict=verdict) == "corpus_evidence"


@pytest.mark.parametrize("verdict", ["regression", "inconclusive"])
def test_a_verdict_that_is_not_adoptable_is_refused(verdict: str) -> None:
    assert refusal(evidence="traffic", status="running", verdict=verdict) == "not_adoptable"


def test_status_refusals_come_before_the_verdict() -> None:
    assert refusal(evidence="traffic", status="adopted", verdict="candidate_better") == "already_promoted"
    for paused in ("posture_changed", "starter_unauthorized"):
        assert refusal(evidence="traffic", status=paused, verdict="candidate_better") == "not_running_or_ended"
    assert refusal(evidence="corpus", status="adopted", verdict="regression") == "corpus_evidence"


def test_utc_day_and_observation() -> None:
    assert utc_day(1_796_083_199.0) == "2026-11-30"
    assert utc_day(1_796_083_200.0) == "2026-12-01"
    assert [observation(s) for s in (1.0, 0.5, 0.0, -0.5)] == ["old_wins", "old_wins", "tie", "new_wins"]
