"""The console's pure parts: money shown as known or unknown (never $0 for unpriced), the chart, the form."""

from __future__ import annotations

from typing import Any

from policies.verdict import bounds_path
from sidecar.console.chart import decision_chart
from sidecar.console.fmt import spend_known, totals_known
from sidecar.console.forms import field_name, trial_body
from sidecar.console.slots import promote_slot
from policies.roles import LOCAL_DEVELOPMENT


def test_unpriced_spend_is_unknown_never_zero() -> None:
    assert spend_known({"coverage": "unknown", "known_micros": 0, "unknown_calls": 3}) == "unknown (3 unpriced call(s))"
    assert spend_known({"coverage": "partial", "known_micros": 1_500_000, "unknown_calls": 2}) == (
        "$1.5000 known, plus 2 unpriced call(s)")
    assert spend_known({"coverage": "complete", "known_micros": 0, "unknown_calls": 0}) == "$0.0000"  # a known zero
    assert totals_known({"known_micros": 0, "unknown_calls": 1}) == "$0.0000 known, plus 1 unpriced call(s)"


def verdict(**over: Any) -> dict[str, Any]:
    v: dict[str, Any] = {"cases": 0, "decided_at": None, "tolerance": 0.05, "win_rate": None, "interval": None,
                         "decision_bounds": {"lower": 0.0, "upper": 1.0}, "decision_bounds_now": None}
    v.update(over)
    return v


def test_chart_draws_what_is_stored_and_says_so() -> None:
    empty = decision_chart(verdict())
    assert empty.point is None and empty.marks == () and empty.summary == "No judged cases yet."
    assert empty.path_area == "" and "recomputed after every judged case" in empty.note
    path = bounds_path([1.0, 0.5, 1.0, -1.0] * 30)
    drawn = decision_chart(verdict(cases=120, win_rate=0.75), path)
    assert len(drawn.path_upper.split()) == len(drawn.path_lower.split()) == len(path)
    assert len(drawn.path_area.split()) == 2 * len(path)
    last_x = float(drawn.path_upper.split()[-1].split(",")[0])
    assert drawn.plot_left < last_x < drawn.plot_right
    decided = decision_chart(verdict(cases=80, decided_at=40, win_rate=0.9, interval={"lower": 0.85, "upper": 0.95},
                                     decision_bounds={"lower": 0.7, "upper": 1.0},
                                     decision_bounds_now={"lower": 0.68, "upper": 1.0}))
    assert [m.css for m in decided.marks] == ["bounds", "now", "boot"]
    assert decided.decided_x is not None and decided.point is not None
    # The tolerance band straddles parity; higher win rates are drawn higher.
    assert decided.band_top < decided.parity_y < decided.band_bottom
    assert decided.point[1] < decided.parity_y
    assert "the tolerance band is 45.0% to 55.0%" in decided.summary


def test_form_fields_become_the_api_body() -> None:
    body = trial_body({"team": " team-a ", "incumbent_model": "a", "candidate_model": "b", "spend_cap_usd": "5",
                       "expected_cases": "300", "sample_rate": "lots", "judge.model": "j",
                       "candidate_price.input_per_mtok_usd": "0.5", "route": ""})
    assert body == {"team": "team-a", "incumbent_model": "a", "candidate_model": "b", "spend_cap_usd": 5.0,
                    "expected_cases": 300, "sample_rate": "lots", "judge": {"model": "j"},
                    "candidate_price": {"input_per_mtok_usd": 0.5}}
    assert field_name("$.candidate_price.input_per_mtok_usd") == "candidate_price.input_per_mtok_usd"
    assert field_name("Idempotency-Key") is None


def test_promote_slot_offers_exactly_what_the_api_allows() -> None:
    from policies.promotion import refusal
    from policies.roles import Principal

    for status in ("running", "stopped", "cap_reached", "adopted", "paused", "posture_changed"):
        for code in ("candidate_better", "equivalent", "regression", "inconclusive"):
            for evidence in ("traffic", "corpus"):
                trial = {"id": "tr_1", "team": "team-a", "status": status,
                         "verdict": {"code": code, "evidence": evidence}}
                slot = promote_slot(LOCAL_DEVELOPMENT, trial)
                why = refusal(evidence=evidence, status=status, verdict=code)
                assert slot.offered == (why is None), (status, code, evidence)
                assert slot.code == why
                assert (slot.action == "/console/trials/tr_1/promote") == slot.offered
                if why is not None:
                    assert slot.reason and slot.reason.startswith("Promotion refused:")
    viewer = Principal.of("v", ["viewer"], ["team-a"])
    adoptable = {"id": "tr_1", "team": "team-a", "status": "running", "verdict": {"code": "candidate_better"}}
    assert promote_slot(viewer, adoptable).code == "forbidden"
