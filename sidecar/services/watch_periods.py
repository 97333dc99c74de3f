"""A watch's periods, for its page (issue 26, item 3; issue 23, item 5).

A watch starts period 1 at its promotion; resolving the period's alert re-arms it into the next
period (the detector and its counts start again). Each period: its number, start, end (the
resolve that re-armed it; a stopped watch's current period ends at the stop; the current one is
open), its judged cases and its alert. The judged count is exact for the current period and
for the earlier periods together (``judged_before``), so exact for a single earlier period; of
several earlier periods each is known only as at least the count at which its alert fired
(``judged_at_least``): cases judged between an alert and its resolve are counted in that
period, but only their sum is kept.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


def watch_periods(view: Mapping[str, Any], alerts: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Newest first: one dict per period of the watch ``view`` (``WatchService.view``), from its
    ``alerts`` (``alert_view`` dicts; any other watch's are ignored)."""
    mine = {int(a["period"]): a for a in alerts if a["watch_id"] == view["id"]}
    current = int(view["period"]["number"])
    out: list[dict[str, Any]] = []
    started = float(view["created_at"])
    for number in range(1, current + 1):
        alert = mine.get(number)
        last = number == current
        if last:
            started = float(view["period"]["started_at"])
            ended = view.get("stopped_at")
            judged: int | None = int(view["judged"])
        else:
            ended = None if alert is None else alert.get("resolved_at")
            judged = int(view["period"]["judged_before"]) if current == 2 else None
        at_alert = None if alert is None else (alert.get("evidence") or {}).get("judged")
        out.append({
            "number": number, "started_at": started, "ended_at": ended, "current": last,
            "judged": judged, "judged_at_least": None if judged is not None or at_alert is None else int(at_alert),
            "alert": None if alert is None else {"id": alert["id"], "status": alert["status"],
                                                 "raised_at": alert["raised_at"]},
        })
        if ended is not None:
            started = float(ended)
    return out[::-1]
