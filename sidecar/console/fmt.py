"""Template filters: money, shares, times. Unknown is shown as unknown, never as zero."""

from __future__ import annotations

import datetime as dt
from typing import Any


def usd(micros: int | None) -> str:
    return "unknown" if micros is None else f"${micros / 1_000_000:,.4f}"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def ratio(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def when(ts: float | None) -> str:
    if ts is None:
        return "—"
    return dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def interval(iv: dict[str, float] | None) -> str:
    return "none yet (small sample)" if iv is None else f"{pct(iv['lower'])} to {pct(iv['upper'])}"


def spend_known(spend: dict[str, Any]) -> str:
    """A trial's evaluation spend as far as it is known: an unpriced call is never read as $0."""
    coverage = spend.get("coverage", "complete")
    if coverage == "unknown":
        return f"unknown ({spend.get('unknown_calls', 0)} unpriced call(s))"
    text = usd(spend["known_micros"])
    if coverage == "partial":
        text += f" known, plus {spend.get('unknown_calls', 0)} unpriced call(s)"
    return text


def totals_known(totals: dict[str, Any]) -> str:
    """Evaluation spend summed over trials: known dollars, and how many calls could not be priced."""
    text = usd(totals["known_micros"])
    unknown = int(totals.get("unknown_calls", 0))
    return text if unknown == 0 else f"{text} known, plus {unknown} unpriced call(s)"


FILTERS = {
    "usd": usd, "pct": pct, "ratio": ratio, "when": when, "interval": interval,
    "spend_known": spend_known, "totals_known": totals_known,
}
