"""A watch's periods from its view and alerts (:mod:`sidecar.services.watch_periods`)."""

from __future__ import annotations

from typing import Any

from sidecar.services.watch_periods import watch_periods


def _view(period: int, started: float, judged_before: int, judged: int, stopped: float | None = None) -> dict[str, Any]:
    return {"id": "w1", "created_at": 100.0, "stopped_at": stopped, "judged": judged,
            "period": {"number": period, "started_at": started, "judged_before": judged_before}}


def _alert(period: int, raised: float, resolved: float | None, judged: int, watch: str = "w1") -> dict[str, Any]:
    return {"id": f"{watch}.alert" + ("" if period == 1 else f".{period}"), "watch_id": watch, "period": period,
            "status": "resolved" if resolved else "firing", "raised_at": raised, "resolved_at": resolved,
            "evidence": {"judged": judged, "period": period}}


def test_a_new_watch_has_one_open_period() -> None:
    [p] = watch_periods(_view(1, 100.0, 0, 12), [])
    assert (p["number"], p["started_at"], p["ended_at"], p["current"], p["judged"], p["alert"]) == (
        1, 100.0, None, True, 12, None)


def test_each_resolve_ends_a_period_and_starts_the_next() -> None:
    alerts = [_alert(1, 150.0, 160.0, 40), _alert(2, 200.0, 210.0, 35), _alert(3, 250.0, None, 30),
              _alert(1, 1.0, None, 9, watch="w2")]
    periods = watch_periods(_view(3, 210.0, 95, 31), alerts)
    assert [(p["number"], p["started_at"], p["ended_at"]) for p in periods] == [
        (3, 210.0, None), (2, 160.0, 210.0), (1, 100.0, 160.0)]
    assert [p["alert"]["status"] for p in periods] == ["firing", "resolved", "resolved"]
    # Current: exact; several earlier periods: only their sum is kept, so each is "at least".
    assert [(p["judged"], p["judged_at_least"]) for p in periods] == [(31, None), (None, 35), (None, 40)]


def test_a_single_earlier_period_has_its_exact_count_and_a_stop_ends_the_current_one() -> None:
    periods = watch_periods(_view(2, 160.0, 80, 5, stopped=300.0), [_alert(1, 150.0, 160.0, 60)])
    assert [(p["number"], p["judged"], p["ended_at"]) for p in periods] == [(2, 5, 300.0), (1, 80, 160.0)]
