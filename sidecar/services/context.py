"""What each family of services needs, handed in explicitly (no runtime reach-through).

One frozen context per family, holding exactly what its services read and write: the store
(the protocols of :mod:`sidecar.store.base` it uses; posture and trials write through the whole
:class:`~sidecar.store.base.Store`, as :func:`sidecar.trials.spec.pause_effects` takes it),
the clock, the config sections they read (as values, not the whole config), the live parts of
the process they act on (the tap's routing table, the sinks' sites, the replay feeders, the
retention window) and the counts they add to. The runtime (:mod:`sidecar.runtime`) builds
them once, as :class:`ServiceContexts`; a service is constructed from its own context only.
:class:`sidecar.collector.corpus.context.CorpusContext` is the same pattern for the collector.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from sidecar.config import JudgeConfig, TeamConfig
from sidecar.ingest.routing import RoutingTable
from sidecar.providers.base import Provider
from sidecar.retention.window import RetentionWindow
from sidecar.store.base import ReadModel, Store, TrialStore, WatchStore
from sidecar.store.records import TrialRecord
from sidecar.telemetry import CountingFunnel
from sidecar.telemetry.counters import TapCounters
from sidecar.trials.create import Resolved, TrialDefaults

Clock = Callable[[], float]


class ViewBackend(TrialStore, ReadModel, Protocol):
    """The store as a trial's read uses it (its record, snapshot and scores)."""


class WatchBackend(TrialStore, ReadModel, WatchStore, Protocol):
    """The store as the watch services use it (watches, alerts, their day trials and spend)."""


class _Queue(Protocol):
    @property
    def depth(self) -> int: ...
    @property
    def maxsize(self) -> int: ...


class _Engine(Protocol):
    @property
    def in_flight(self) -> int: ...


class Feeder(Protocol):
    """The replay feeders (:class:`sidecar.retention.replay.ReplayFeeder`)."""

    def feed(self, record: TrialRecord) -> None: ...


@dataclass(frozen=True, slots=True)
class ViewContext:
    """Reading a trial: the store and the funnel counts not yet flushed to it."""

    store: ViewBackend
    funnel: CountingFunnel


@dataclass(frozen=True, slots=True)
class LiveFigures:
    """This process's intake figures and counts, as ``/v1/live`` and the overview show them."""

    queue: _Queue
    engine: _Engine
    counters: TapCounters

    def intake(self) -> dict[str, int]:
        return {"depth": self.queue.depth, "capacity": self.queue.maxsize, "in_flight": self.engine.in_flight}

    def counts(self) -> dict[str, int]:
        return dict(self.counters)


@dataclass(frozen=True, slots=True)
class PostureContext:
    """Teams' posture: ``[uplink] stale_seconds``, the ``[teams.NAME]`` seeds and the config's
    retention default; a change reaches the tap's routes and the retention window."""

    store: Store
    clock: Clock
    stale_after_s: float
    teams: Mapping[str, TeamConfig]
    default_retention: Callable[[str], bool]
    routing: RoutingTable
    retention: RetentionWindow | None


@dataclass(frozen=True, slots=True)
class TrialsContext:
    """Trials and replay trials: created, paused, resumed, read."""

    views: ViewContext
    posture: PostureContext
    live: LiveFigures
    store: Store
    clock: Clock
    resolve: Callable[[str], Resolved]
    defaults: TrialDefaults
    #: The execution sites this sidecar has a sink for.
    sites: Collection[str]
    routing: RoutingTable
    replays: Feeder
    retention: RetentionWindow | None


@dataclass(frozen=True, slots=True)
class WatchesContext:
    """Watches, their alerts and the overview (``[uplink] enabled``: an alert's move is sent)."""

    views: ViewContext
    live: LiveFigures
    store: WatchBackend
    clock: Clock
    routing: RoutingTable
    uplink_enabled: bool
    #: The control plane's console (``[uplink] console_url``), where corpus evidence is; "" if none.
    control_plane_console: str = ""


@dataclass(frozen=True, slots=True)
class PromotionContext:
    """Promoting a trial's candidate: its read, the resolver of the old incumbent's price, the routes."""

    views: ViewContext
    store: WatchStore
    clock: Clock
    resolve: Callable[[str], Resolved]
    routing: RoutingTable


@dataclass(frozen=True, slots=True)
class CompareContext:
    """A compare: ``[judge]`` defaults, the shadow header of ``[engine]``, fresh provider clients,
    and the store and clock its spend is kept with (content-free, issue 28)."""

    resolve: Callable[[str], Resolved]
    judge: JudgeConfig
    shadow_header: str
    open_providers: Callable[[], dict[str, Provider]]
    counters: TapCounters
    store: WatchStore
    clock: Clock


@dataclass(frozen=True, slots=True)
class ServiceContexts:
    """Every family's context, built once by the runtime."""

    views: ViewContext
    posture: PostureContext
    trials: TrialsContext
    watches: WatchesContext
    promotion: PromotionContext
    compare: CompareContext


