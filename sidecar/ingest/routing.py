"""Which running trials an exchange goes to: an immutable table the tap reads.

A trial that stopped on its decision (``decided``) stays in the table, flagged, until an
operator stops or promotes it: its later exchanges are counted (``not_sampled`` or
``after_decision``), never dispatched.

The tap matches every exchange against the running trials without touching
the store. :class:`Routes` is immutable and swapped whole, so a reader on any
thread sees one consistent table. :class:`RoutingTable` holds the current
one: the admin API edits it at once when a trial is created or stopped here,
and the engine replaces it from the store every refresh interval, so a trial
created or stopped on another sidecar of the fleet shows within a second or
two. A refresh read from the store *before* a local edit is dropped rather
than undoing the edit (the next refresh sees both).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Iterable, Mapping

from sidecar.ingest.wire import Exchange
from sidecar.store.records import TrialRecord


@dataclass(frozen=True, slots=True)
class Favour:
    """Sampling's favour of a trial's rare segments (``segment_min_cases``, issue 27): the
    tracked segment keys still below their minimum of judged cases, and whether a value not
    tracked yet would be (the trial tracks fewer values than its cap). An exchange in one of
    them is sampled whatever its hash says; the spend cap still bounds every case."""

    segments: tuple[str, ...]
    short: frozenset[str]
    tracked: frozenset[str]
    room: bool

    def wants(self, keys: Iterable[str]) -> bool:
        """Whether an exchange with these segment keys should be sampled anyway."""
        for key in keys:
            if key in self.short or (self.room and key not in self.tracked):
                return True
        return False


@dataclass(frozen=True, slots=True)
class Route:
    """What the tap needs of a running trial: its filter, sample rate and site."""

    trial_id: str
    team: str
    incumbent_model: str
    route: str | None
    gateway: str | None
    sample_rate: float
    execution_site: str
    #: False: the team's content is never stored, not even in the intake journal.
    prompt_retention: bool = True
    #: True: the trial stopped on its decision (status ``decided``, :mod:`sidecar.trials.decided`):
    #: still matched and sampled, so its later exchanges are counted, but a sampled one is counted
    #: ``after_decision`` and never handed to a sink.
    decided: bool = False
    #: The trial's rare segments, sampled whatever the hash says (None: no ``segment_min_cases``).
    favour: Favour | None = None

    @classmethod
    def of(cls, r: TrialRecord, favour: Favour | None = None) -> Route:
        return cls(
            r.id, r.team, r.incumbent_model, r.route, r.gateway, r.sample_rate, r.execution_site, r.prompt_retention,
            r.status == "decided", favour,
        )

    def matches(self, exchange: Exchange) -> bool:
        if self.route is not None and exchange.route != self.route:
            return False
        return self.gateway is None or exchange.gateway == self.gateway


class Routes:
    """An immutable set of routes, indexed by (team, incumbent model).

    ``key_fields``: the exchange's fields :meth:`match` reads — team and model, and route and
    gateway only when some route filters on them. Exchanges equal in these match alike."""

    __slots__ = ("_by_key", "_ids", "key_fields")

    def __init__(self, routes: Iterable[Route] = ()) -> None:
        by_key: dict[tuple[str, str], list[Route]] = {}
        ids: dict[str, Route] = {}
        for r in routes:
            by_key.setdefault((r.team, r.incumbent_model), []).append(r)
            ids[r.trial_id] = r
        self._by_key = {k: tuple(v) for k, v in by_key.items()}
        self._ids = ids
        self.key_fields: tuple[str, ...] = (
            "team", "model",
            *(["route"] if any(r.route is not None for r in ids.values()) else []),
            *(["gateway"] if any(r.gateway is not None for r in ids.values()) else []),
        )

    def match(self, exchange: Exchange) -> tuple[Route, ...]:
        candidates = self._by_key.get((exchange.team, exchange.model))
        if candidates is None:
            return ()
        if len(candidates) == 1:  # the common case, without building a tuple
            return candidates if candidates[0].matches(exchange) else ()
        return tuple(r for r in candidates if r.matches(exchange))

    def __contains__(self, trial_id: object) -> bool:
        return trial_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self) -> list[str]:
        return list(self._ids)

    def get(self, trial_id: str) -> Route | None:
        return self._ids.get(trial_id)

    def with_route(self, route: Route) -> Routes:
        return Routes([*(r for r in self._ids.values() if r.trial_id != route.trial_id), route])

    def without(self, trial_id: str) -> Routes:
        return Routes(r for r in self._ids.values() if r.trial_id != trial_id)


def tapped(record: TrialRecord) -> bool:
    """Whether the tap routes live exchanges to ``record``: not a replay, which reads the
    retention window instead (:mod:`sidecar.services.replay`)."""
    return record.source == "live"


class RoutingTable:
    """The current :class:`Routes`, swapped whole under a lock (readers take no lock)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._edits = 0
        self.current = Routes()

    @property
    def edits(self) -> int:
        """A counter of local edits; read it before a refresh's store read."""
        return self._edits

    def add(self, record: TrialRecord) -> None:
        if not tapped(record):
            return
        with self._lock:
            self.current = self.current.with_route(Route.of(record))
            self._edits += 1

    def remove(self, trial_id: str) -> None:
        with self._lock:
            self.current = self.current.without(trial_id)
            self._edits += 1

    def replace(
        self, records: Iterable[TrialRecord], *, edits_seen: int, favour: Mapping[str, Favour] | None = None
    ) -> bool:
        """Install the running trials read from the store, unless a local edit came
        after the read began (``edits_seen``); returns whether it was installed.
        ``favour``: per trial, its rare segments (read with the trials)."""
        favour = favour or {}
        routes = Routes(Route.of(r, favour.get(r.id)) for r in records if tapped(r))
        with self._lock:
            if self._edits != edits_seen:
                return False
            self.current = routes
            return True
