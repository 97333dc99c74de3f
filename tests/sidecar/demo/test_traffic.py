"""The simulated traffic of ``shadowtrial send --simulate``: the tap's wire shape, the demo's
incumbent quality in the fake judge's marker, new ids on each run, the same draws per seed."""

from __future__ import annotations

import json
import statistics

from sidecar.demo.fake_provider import MARKER_RE
from sidecar.demo.traffic import simulated_exchanges
from sidecar.ingest.wire import decode_exchanges


def test_simulated_exchanges_are_the_wire_shape_with_the_demo_quality() -> None:
    first = list(simulated_exchanges(team="search", count=400, run="a"))
    decoded = decode_exchanges(json.dumps(first).encode(), "application/json")
    assert len(decoded) == 400 and {ex.team for ex in decoded} == {"search"}
    assert {ex.model for ex in decoded} == {"sim-incumbent-large"}
    qualities = [float(MARKER_RE.findall(ex["response"]["content"])[0]) for ex in first]
    assert abs(statistics.mean(qualities) - 0.55) < 0.03
    again = list(simulated_exchanges(team="search", count=400, run="b"))
    assert {ex["exchange_id"] for ex in first}.isdisjoint(ex["exchange_id"] for ex in again)
    assert [ex["response"]["content"] for ex in first] == [ex["response"]["content"] for ex in again]
    planted = list(simulated_exchanges(team="search", count=200, run="c", quality=0.9, route="/chat"))
    assert statistics.mean(float(MARKER_RE.findall(ex["response"]["content"])[0]) for ex in planted) > 0.85
    assert {ex["route"] for ex in planted} == {"/chat"}
