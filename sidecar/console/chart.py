"""The decision-bounds chart of a trial, as SVG geometry computed here and drawn by a template.

The trial keeps the running intersection of its confidence sequence (and the case count
at which it decided), not the bounds of every look, so the chart draws what is stored:
the tolerance band around parity, the decision bounds at the latest look, the current
look's bounds, the bootstrap interval, the win rate, and where the decision was
reached. :attr:`Chart.note` says so on the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sidecar.console.fmt import pct

WIDTH = 640
HEIGHT = 260
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 16, 40


@dataclass(frozen=True, slots=True)
class Mark:
    """A vertical segment (an interval at ``x``), drawn with ``css`` and labelled ``label``."""

    x: float
    y1: float
    y2: float
    css: str
    label: str


@dataclass(frozen=True, slots=True)
class Chart:
    width: int
    height: int
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    band_top: float
    band_bottom: float
    parity_y: float
    y_ticks: tuple[tuple[float, str], ...]
    x_ticks: tuple[tuple[float, str], ...]
    marks: tuple[Mark, ...]
    point: tuple[float, float] | None
    decided_x: float | None
    decided_label: str
    summary: str
    note: str


def _y(p: float) -> float:
    return TOP + (1.0 - max(0.0, min(1.0, p))) * (HEIGHT - TOP - BOTTOM)


def decision_chart(verdict: dict[str, Any]) -> Chart:
    """The chart of a trial's ``verdict`` view (``GET /v1/trials/{id}``'s ``verdict``)."""
    n = int(verdict.get("cases") or 0)
    decided = verdict.get("decided_at")
    span = max(n, int(decided or 0), 10)
    span = int(span * 1.1) + 1

    def x(cases: float) -> float:
        return LEFT + cases / span * (WIDTH - LEFT - RIGHT)

    delta = float(verdict.get("tolerance") or 0.0)
    marks: list[Mark] = []
    bounds, now, boot = verdict.get("decision_bounds"), verdict.get("decision_bounds_now"), verdict.get("interval")
    offset = 7.0
    if bounds is not None and n > 0:
        marks.append(Mark(x(n), _y(bounds["upper"]), _y(bounds["lower"]), "bounds",
                          f"decision bounds {pct(bounds['lower'])} to {pct(bounds['upper'])}"))
    if now is not None and n > 0 and now != bounds:
        marks.append(Mark(x(n) - offset, _y(now["upper"]), _y(now["lower"]), "now",
                          f"this look's bounds {pct(now['lower'])} to {pct(now['upper'])}"))
    if boot is not None and n > 0:
        marks.append(Mark(x(n) + offset, _y(boot["upper"]), _y(boot["lower"]), "boot",
                          f"bootstrap interval {pct(boot['lower'])} to {pct(boot['upper'])}"))
    win = verdict.get("win_rate")
    point = (x(n), _y(win)) if win is not None and n > 0 else None
    step = max(1, span // 5)
    x_ticks = tuple((x(c), str(c)) for c in range(0, span + 1, step))
    y_ticks = tuple((_y(p), pct(p)) for p in (0.0, 0.25, 0.5, 0.75, 1.0))
    if n == 0:
        summary = "No judged cases yet."
    else:
        parts = [f"After {n} judged case(s) the win rate is {pct(win)}"]
        if bounds is not None:
            parts.append(f"the decision bounds are {pct(bounds['lower'])} to {pct(bounds['upper'])}")
        parts.append(f"the tolerance band is {pct(0.5 - delta)} to {pct(0.5 + delta)}")
        summary = "; ".join(parts) + "."
    return Chart(
        width=WIDTH, height=HEIGHT, plot_left=LEFT, plot_right=WIDTH - RIGHT, plot_top=TOP, plot_bottom=HEIGHT - BOTTOM,
        band_top=_y(0.5 + delta), band_bottom=_y(0.5 - delta), parity_y=_y(0.5),
        y_ticks=y_ticks, x_ticks=x_ticks, marks=tuple(marks), point=point,
        decided_x=None if decided is None else x(int(decided)),
        decided_label="" if decided is None else f"decided at case {decided}",
        summary=summary,
        note=("The trial stores the running intersection of its confidence sequence, not the bounds of every "
              "look, so this chart draws what is stored: the bounds at the latest look "
              f"(n = {n}), this look's own bounds where they differ, the bootstrap interval, and the case "
              "count at which the decision was reached."),
    )
