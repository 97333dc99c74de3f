"""Expected cases, and cost, to a decision at a trial's settings (issue 31): pure, from a measured table.

``MEASURED`` is the shipped betting sequence's row of bench/betting.py (2,000 trials x 5,000
cases per row, alpha 0.05, 30% ties, 10% audited, a look after every case, 20-case floor): the
median and 90th percentile of the cases until the interval lies wholly above parity, at true
win rates 0.55 / 0.60 / 0.65 / 0.70, i.e. at true *margins* of 0.05 / 0.10 / 0.15 / 0.20 above
the threshold tested. The bets for a threshold m depend on the data only through y - m, so the
cases to clear any threshold are read from the margin the truth has over it (an approximation:
the spread of the scores about m changes a little with m), interpolated log-log between the
measured margins and left out beyond them.

A trial's verdict reads *Adoptable* once its interval is above parity - tolerance and
``candidate_better`` once above parity + tolerance (:mod:`policies.decision`); so at a true win
rate w it needs the margin w - (0.5 - tolerance) for the first and w - (0.5 + tolerance) for
the second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: margin over the threshold -> (median cases, 90th-percentile cases), measured (see above).
MEASURED: dict[float, tuple[int, int]] = {0.05: (548, 1281), 0.10: (125, 297), 0.15: (51, 117), 0.20: (29, 60)}
#: The true win rates the trial page shows a forecast for.
WIN_RATES = (0.50, 0.55, 0.60, 0.65, 0.70)


def cases_to_clear(margin: float) -> tuple[int, int] | None:
    """(median, 90th percentile) cases until the interval clears a threshold the truth exceeds
    by ``margin``; None outside the measured margins."""
    points = sorted(MEASURED)
    if not points[0] - 1e-12 <= margin <= points[-1] + 1e-12:
        return None
    for lo, hi in zip(points, points[1:]):
        if margin <= hi + 1e-12:
            f = (math.log(margin) - math.log(lo)) / (math.log(hi) - math.log(lo))
            f = min(max(f, 0.0), 1.0)
            med = math.exp((1 - f) * math.log(MEASURED[lo][0]) + f * math.log(MEASURED[hi][0]))
            p90 = math.exp((1 - f) * math.log(MEASURED[lo][1]) + f * math.log(MEASURED[hi][1]))
            return round(med), round(p90)
    return None  # pragma: no cover - the range check above returns first


@dataclass(frozen=True, slots=True)
class Forecast:
    """At true win rate ``win_rate``: cases (median, 90th percentile) to *Adoptable* and to
    ``candidate_better`` (None: outside the measured range), and their cost in micro-dollars
    at ``cost_per_case_micros`` (None when no case has been charged yet)."""

    win_rate: float
    adoptable: tuple[int, int] | None
    better: tuple[int, int] | None
    adoptable_cost_micros: tuple[int, int] | None
    better_cost_micros: tuple[int, int] | None


def forecast(*, tolerance: float, min_cases: int, cost_per_case_micros: float | None) -> list[Forecast]:
    """The forecast rows for a trial's tolerance, floor and observed cost per judged case."""
    out = []
    for w in WIN_RATES:
        rows = []
        for threshold in (0.5 - tolerance, 0.5 + tolerance):
            got = cases_to_clear(round(w - threshold, 12))
            rows.append(None if got is None else (max(got[0], min_cases), max(got[1], min_cases)))
        costs = [None if r is None or cost_per_case_micros is None
                 else (round(r[0] * cost_per_case_micros), round(r[1] * cost_per_case_micros)) for r in rows]
        out.append(Forecast(w, rows[0], rows[1], costs[0], costs[1]))
    return out
