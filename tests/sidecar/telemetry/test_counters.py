"""The main process's typed counts: one field per name in sidecar.telemetry.names, read as a mapping."""

from __future__ import annotations

import pytest

from sidecar.telemetry.counters import TapCounters
from sidecar.telemetry.names import TAP_COUNTER_SERIES, TAP_COUNTERS, TAP_COUNTERS_UNEXPORTED
from sidecar.telemetry.readings import TAP_COUNTER_KEYS


def test_every_field_is_a_named_counter_and_every_series_one_of_them() -> None:
    assert list(TapCounters()) == list(TAP_COUNTERS)
    assert set(TAP_COUNTER_KEYS) == set(TAP_COUNTER_SERIES)
    assert not set(TAP_COUNTER_SERIES) & set(TAP_COUNTERS_UNEXPORTED)
    assert dict(TapCounters()) == dict.fromkeys(TAP_COUNTERS, 0)


def test_labelled_writes_land_on_their_field_and_refuse_other_labels() -> None:
    counters = TapCounters()
    counters.tap_rejected("too_large")
    counters.figures_excluded({"cost_usd": 2})
    counters.webhook_skipped({"shadow_call": 3})
    counters.exchanges_received += 5
    assert counters["tap_rejected_too_large"] == 1 and counters.tap_figures_excluded_cost_usd == 2
    assert counters["litellm_webhook_skipped_shadow_call"] == 3 and counters["exchanges_received"] == 5
    with pytest.raises(KeyError):
        counters.figures_excluded({"temperature": 1})
    with pytest.raises(KeyError):
        counters["anything_else"]
