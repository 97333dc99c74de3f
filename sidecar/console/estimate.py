"""What a new trial would take at the current traffic: an estimate, and labelled one (issue 28, item 5).

From this process's own figures only: the exchanges the tap received since the console
started (every team's: the tap's count has no team dimension, so the team's share is at most
that), the form's sample rate and case counts, and the evaluation cost of a judged case as
the last seven days' cases averaged it. Nothing here is a promise: traffic varies, and the
spend cap stops a trial whatever the estimate said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_SAMPLE_RATE = 0.1
DEFAULT_EXPECTED_CASES = 1000
DEFAULT_MIN_CASES = 20


@dataclass(frozen=True, slots=True)
class Estimate:
    #: Exchanges a minute the tap received, all teams together; None before any was received.
    per_minute: float | None
    sample_rate: float
    cases_per_hour: float | None
    min_cases: int
    expected_cases: int
    to_min_s: float | None
    to_expected_s: float | None
    #: Evaluation cost of one judged case (micro-dollars), the last 7 days' average; None without a case.
    case_micros: int | None
    expected_micros: int | None
    cap_micros: int | None


def duration(seconds: float | None) -> str:
    """About how long, in the largest unit that reads well ("about 3 h", "about 40 min")."""
    if seconds is None or not math.isfinite(seconds):
        return "unknown"
    if seconds < 90:
        return f"about {max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"about {round(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"about {seconds / 3600:.1f} h"
    return f"about {seconds / 86400:.1f} days"


def _number(text: str | None, default: float) -> float:
    try:
        value = float(text) if text else default
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


def estimate(*, received: int, elapsed_s: float, charged_micros: int, cases: int,
             values: dict[str, str]) -> Estimate:
    """The estimate for the form's ``values`` (its own defaults where a field is empty or unreadable)."""
    rate = min(1.0, _number(values.get("sample_rate"), DEFAULT_SAMPLE_RATE))
    expected = int(_number(values.get("expected_cases"), DEFAULT_EXPECTED_CASES))
    minimum = int(_number(values.get("min_cases"), DEFAULT_MIN_CASES))
    cap = values.get("spend_cap_usd")
    cap_micros = round(_number(cap, 0.0) * 1_000_000) if cap else None
    per_s = received / elapsed_s if received > 0 and elapsed_s > 0 else None
    sampled_per_s = None if per_s is None else per_s * rate
    case_micros = round(charged_micros / cases) if cases > 0 else None
    expected_micros = None if case_micros is None else case_micros * expected
    if expected_micros is not None and cap_micros:
        expected_micros = min(expected_micros, cap_micros)
    return Estimate(
        per_minute=None if per_s is None else per_s * 60, sample_rate=rate,
        cases_per_hour=None if sampled_per_s is None else sampled_per_s * 3600,
        min_cases=minimum, expected_cases=expected,
        to_min_s=None if not sampled_per_s else minimum / sampled_per_s,
        to_expected_s=None if not sampled_per_s else expected / sampled_per_s,
        case_micros=case_micros, expected_micros=expected_micros, cap_micros=cap_micros or None,
    )
