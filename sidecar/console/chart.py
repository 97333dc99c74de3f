"""The decision-bounds chart of a trial, as SVG geometry computed here and drawn by a template.

The bounds over judged cases are recomputed from the stored case scores (the trial keeps
the running intersection of its looks, not the bounds after every case); with them the
chart draws the tolerance band around parity, the decision bounds at the latest look,
the current look's bounds, the bootstrap interval, the win rate, and where the decision
was reached. :attr:`Chart.note` says so on the page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from sidecar.console.fmt import pct

WIDTH = 640
HEIGHT = 260
LEFT, RIGHT, TOP, BOTTOM = 66, 16, 16, 40


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
    #: The decision bounds after each judged case (SVG ``points`` text): lower and upper
    #: lines, and the area between them; empty when no case was judged.
    path_lower: str = ""
    path_upper: str = ""
    path_area: str = ""
    #: The decided label's side of its line: "start" (right of it) or, past the middle, "end".
    decided_anchor: str = "start"


def round_step(span: int, most: int = 6) -> int:
    """The tick step for an axis from 0 to ``span``: 1, 2 or 5 times a power of ten, the smallest
    giving at most ``most`` intervals (ticks at 0, 100, 200, never 91, 182, 273)."""
    magnitude = 1
    while True:
        for m in (1, 2, 5):
            step = m * magnitude
            if span / step <= most:
                return step
        magnitude *= 10


def _y(p: float) -> float:
    return TOP + (1.0 - max(0.0, min(1.0, p))) * (HEIGHT - TOP - BOTTOM)


def decision_chart(verdict: dict[str, Any], path: Sequence[tuple[int, float, float]] = ()) -> Chart:
    """The chart of a trial's ``verdict`` view (``GET /v1/trials/{id}``'s ``verdict``), with
    ``path``: the decision bounds after each judged case (:func:`policies.verdict.bounds_path`)."""
    n = int(verdict.get("cases") or 0)
    decided = verdict.get("decided_at")
    span = max(n, int(decided or 0), path[-1][0] if path else 0, 10)
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
    step = round_step(span)
    x_ticks = tuple((x(c), str(c)) for c in range(0, span + 1, step))
    y_ticks = tuple((_y(p), f"{round(100 * p)}%") for p in (0.0, 0.25, 0.5, 0.75, 1.0))
    if n == 0:
        summary = "No judged cases yet."
    else:
        parts = [f"After {n} judged case(s) the win rate is {pct(win)}"]
        if bounds is not None:
            parts.append(f"the decision bounds are {pct(bounds['lower'])} to {pct(bounds['upper'])}")
        parts.append(f"the tolerance band is {pct(0.5 - delta)} to {pct(0.5 + delta)}")
        summary = "; ".join(parts) + "."
    lower = " ".join(f"{x(c):.1f},{_y(lo):.1f}" for c, lo, _ in path)
    upper = " ".join(f"{x(c):.1f},{_y(hi):.1f}" for c, _, hi in path)
    area = " ".join([upper, *(f"{x(c):.1f},{_y(lo):.1f}" for c, lo, _ in reversed(path))]) if path else ""
    return Chart(
        path_lower=lower, path_upper=upper, path_area=area,
        width=WIDTH, height=HEIGHT, plot_left=LEFT, plot_right=WIDTH - RIGHT, plot_top=TOP, plot_bottom=HEIGHT - BOTTOM,
        band_top=_y(0.5 + delta), band_bottom=_y(0.5 - delta), parity_y=_y(0.5),
        y_ticks=y_ticks, x_ticks=x_ticks, marks=tuple(marks), point=point,
        decided_x=None if decided is None else x(int(decided)),
        decided_label="" if decided is None else f"decided at case {decided}",
        decided_anchor="end" if decided is not None and x(int(decided)) > (LEFT + WIDTH - RIGHT) / 2 else "start",
        summary=summary,
        note=("The shaded band is the confidence sequence's running intersection recomputed after every judged "
              "case, in the order the cases were claimed, from the stored case scores. The trial itself decides "
              "at its looks, so its kept bounds (the bar at the latest look, "
              f"n = {n}) are at least as wide. Also drawn: this look's own bounds where they differ, the "
              "bootstrap interval, the tolerance band around parity, and the case count at which the decision "
              "was reached."),
    )


@dataclass(frozen=True, slots=True)
class Gauge:
    """A watch's detector now: its statistic against its threshold, its judged cases against
    the minimum before it may fire. Geometry for ``_watch_body.html``."""

    width: int
    height: int
    left: float
    right: float
    stat_x: float
    threshold_x: float
    stat_label: str
    threshold_label: str
    judged_x: float
    min_x: float
    judged_label: str
    min_label: str
    fired: bool
    summary: str
    note: str


def detector_gauge(watch: dict[str, Any]) -> Gauge:
    """The gauge of a watch view (``GET /v1/watches/{id}``)."""
    d = watch["detector"]
    stat, threshold = float(d["statistic"]), float(d["threshold"])
    judged, minimum = int(watch["judged"]), int(d["min_judged"])
    left, right = 150.0, 620.0

    def scale(value: float, top: float) -> float:
        return left + max(0.0, min(1.0, value / top if top > 0 else 0.0)) * (right - left)

    s_top = max(threshold * 1.25, stat * 1.05, 1e-9)
    j_top = max(minimum * 1.25, judged * 1.05, 1.0)
    state = "fired" if d["fired"] else ("armed" if judged >= minimum else "warming up")
    summary = (f"Detector statistic {stat:.3f} against threshold {threshold:.3f} ({state}); "
               f"{judged} judged case(s) against the minimum of {minimum}.")
    return Gauge(
        width=640, height=170, left=left, right=right,
        stat_x=scale(stat, s_top), threshold_x=scale(threshold, s_top),
        stat_label=f"{stat:.3f}", threshold_label=f"threshold {threshold:.3f}",
        judged_x=scale(judged, j_top), min_x=scale(minimum, j_top),
        judged_label=str(judged), min_label=f"minimum {minimum}",
        fired=bool(d["fired"]), summary=summary,
        note=("The bars are the detector's stored state: the statistic now against its threshold, and the "
              "judged cases against the minimum before an alert may fire. The line below is its history, "
              "recomputed from the sentinel's stored case scores in the order the cases were claimed (the stored "
              "statistic was stepped in the order they finished, so the two may differ by a step or two)."),
    )


@dataclass(frozen=True, slots=True)
class History:
    """A watch's detector over judged cases: its statistic line against the threshold, the
    minimum judged cases before it may fire, and where it fired. Geometry for ``_watch_body.html``."""

    width: int
    height: int
    plot_left: float
    plot_right: float
    plot_top: float
    plot_bottom: float
    line: str
    threshold_y: float
    min_x: float
    fired_x: float | None
    x_ticks: tuple[tuple[float, str], ...]
    y_ticks: tuple[tuple[float, str], ...]
    summary: str


def detector_history(watch: dict[str, Any], path: Sequence[tuple[int, float]]) -> History:
    """The chart of a watch view's detector and its ``path`` (:func:`policies.cusum.statistic_path`)."""
    d = watch["detector"]
    threshold, minimum = float(d["threshold"]), int(d["min_judged"])
    fired = d.get("fired_at_judged")
    span = int(max(path[-1][0] if path else 0, minimum, int(fired or 0), 10) * 1.1) + 1
    top = max(threshold * 1.25, max((s for _, s in path), default=0.0) * 1.05, 1e-9)
    height, bottom = 200, 200 - BOTTOM

    def x(judged: float) -> float:
        return LEFT + judged / span * (WIDTH - LEFT - RIGHT)

    def y(stat: float) -> float:
        return TOP + (1.0 - max(0.0, min(1.0, stat / top))) * (bottom - TOP)

    line = " ".join(f"{x(j):.1f},{y(s):.1f}" for j, s in ([(0, 0.0)] if path else []) + list(path))
    step = round_step(span)
    peak = max((s for _, s in path), default=0.0)
    return History(
        width=WIDTH, height=height, plot_left=LEFT, plot_right=WIDTH - RIGHT, plot_top=TOP, plot_bottom=bottom,
        line=line, threshold_y=y(threshold), min_x=x(minimum), fired_x=None if fired is None else x(int(fired)),
        x_ticks=tuple((x(c), str(c)) for c in range(0, span + 1, step)),
        y_ticks=tuple((y(v), f"{v:.1f}") for v in (0.0, threshold, top / 2, top)
                      if v == threshold or abs(y(v) - y(threshold)) > 28),
        summary=(f"Over {path[-1][0] if path else 0} judged case(s) the statistic peaked at {peak:.3f} against a "
                 f"threshold of {threshold:.3f}" + (f"; it fired at judged case {fired}." if fired else ".")),
    )
