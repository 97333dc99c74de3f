"""Readings: the current value of every metric series a process holds, by key.

Two parts, each belonging to the process that decides its counts:

- the **tap's** (the sidecar's main process): exchanges received, cases sampled, tap
  refusals, the funnel outcomes decided before a claim (not sampled, redacted, queue
  full...), the intake queue's depth, the running trials;
- the **engine's** (its own process by default, else a thread of the main one): the
  outcomes of claimed cases, judgments, provider calls, cases in flight.

The Prometheus endpoint shows both (the engine's process reports its part on the control
pipe, :mod:`sidecar.engine.process`) plus the fleet's spend from the store. Over OTLP each
process exports only its own part, so nothing is counted twice at the collector.
"""

from __future__ import annotations

from typing import Mapping, Protocol

from sidecar.store.records import OUTCOMES
from sidecar.telemetry.names import (
    CALL_RESULTS,
    JUDGMENT_OUTCOMES,
    PLUGIN_DROP_REASONS,
    ROLES,
    TAP_COUNTER_SERIES,
)
from sidecar.telemetry.tally import Tally

#: Keys of the counters each part always reports, zero until counted.
OUTCOME_KEYS = tuple(f"outcome.{o}" for o in OUTCOMES)
ENGINE_KEYS = (
    OUTCOME_KEYS
    + tuple(f"judgment.{o}" for o in JUDGMENT_OUTCOMES)
    + tuple(f"call.{role}.{r}" for role in ROLES for r in CALL_RESULTS)
)
TAP_COUNTER_KEYS = TAP_COUNTER_SERIES
#: ``TrialService.fleet_spend`` keys → reading keys.
SPEND_KEYS = {"known": "spend.known", "reserved": "spend.reserved", "unknown_calls": "spend.unknown_calls"}


class _Queue(Protocol):
    @property
    def depth(self) -> int: ...


class EngineCounts(Protocol):
    """What an engine, on a thread or in its own process, reports."""

    @property
    def in_flight(self) -> int: ...

    def counts(self) -> Mapping[str, int]: ...


class _PluginDrops(Protocol):
    @property
    def ignored(self) -> int: ...

    def totals(self) -> Mapping[str, int]: ...


def tap_part(
    counters: Mapping[str, int], funnel: Tally, queue: _Queue, running_trials: int, plugins: _PluginDrops,
    *, outbox_depth: int = 0, outbox_delivered: int = 0,
) -> dict[str, float]:
    out: dict[str, float] = {key: counters.get(key, 0) for key in TAP_COUNTER_KEYS}
    totals = plugins.totals()
    out.update((f"plugin_dropped_{r}", totals.get(r, 0)) for r in PLUGIN_DROP_REASONS)
    out["plugin_stats_ignored"] = plugins.ignored
    out.update(dict.fromkeys(OUTCOME_KEYS, 0))
    out.update(funnel.snapshot())
    out["queue_depth"] = queue.depth
    out["running_trials"] = running_trials
    out["outbox_depth"] = outbox_depth
    out["outbox_delivered"] = outbox_delivered
    return out


def engine_part(engine: EngineCounts) -> dict[str, float]:
    out: dict[str, float] = dict.fromkeys(ENGINE_KEYS, 0)
    out.update(engine.counts())
    out["in_flight"] = engine.in_flight
    return out


def spend_part(totals: Mapping[str, int]) -> dict[str, float]:
    return {key: totals.get(name, 0) for name, key in SPEND_KEYS.items()}


def combined(*parts: Mapping[str, float]) -> dict[str, float]:
    """Parts summed key by key (both parts count funnel outcomes: different ones)."""
    out: dict[str, float] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return out
