"""The paired view: the candidate against the incumbent over the same judged cases (pure).

Each row is one judged case: (candidate cost, its coverage, incumbent cost, its coverage,
candidate latency, incumbent latency), costs in micro-dollars. Cost is compared only over
cases both priced completely — an unknown cost is never read as zero — and latency as
medians over cases with both latencies. Both stores compute the view with this one function.
"""

from __future__ import annotations

import statistics
from typing import Sequence

PairedRow = tuple[int | None, str | None, int, str, float | None, float | None]


def paired_figures(rows: Sequence[PairedRow]) -> dict[str, float | int | None]:
    cost_pairs = [(cc or 0, ic) for cc, ccv, ic, icv, _, _ in rows if ccv == "complete" and icv == "complete"]
    lat_pairs = [(cl, il) for _, _, _, _, cl, il in rows if cl is not None and il is not None]
    cand_cost = sum(c for c, _ in cost_pairs)
    inc_cost = sum(i for _, i in cost_pairs)
    cand_lat = statistics.median([c for c, _ in lat_pairs]) if lat_pairs else None
    inc_lat = statistics.median([i for _, i in lat_pairs]) if lat_pairs else None
    return {
        "cost_cases": len(cost_pairs),
        "candidate_cost_micros": cand_cost,
        "incumbent_cost_micros": inc_cost,
        "cost_ratio": (cand_cost / inc_cost) if cost_pairs and inc_cost > 0 else None,
        "latency_cases": len(lat_pairs),
        "candidate_latency_ms_p50": cand_lat,
        "incumbent_latency_ms_p50": inc_lat,
        "latency_ratio": (cand_lat / inc_lat) if cand_lat is not None and inc_lat else None,
    }
