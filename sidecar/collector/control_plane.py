"""The collector's engine: control-plane trials run from the exchanges the collector stored.

The same :class:`~sidecar.engine.engine.Engine` a sidecar runs, with ``site="control_plane"``
(so it runs only trials pinned there, rule 7), the collector's own providers, models and
judge (the ``[providers]``, ``[models]``, ``[judge]``, ``[prices]`` and ``[engine]`` tables of
its config), and its own store — the collector's. Every case goes through the store's
ledger, so the cap is the trial's cap, and ``claim_case`` deduplicates (trial, exchange):
a case is judged once however often its exchange is offered.

No shedding for room here: the engine is driven from the *stored* records. One task offers the
stored exchanges of running control-plane trials that have no case yet as the engine's hand-off
has room, leased to this engine
(:meth:`~sidecar.collector.store.base.CollectedStore.lease_exchanges`: in turn by team, so one
team's backlog does not hold back another's; collectors sharing one PostgreSQL split them, and
a dead collector's leases end and pass to the others); it looks again when a batch is stored,
when a case finishes, and every ``POLL_S``.

Every stored exchange gets exactly one outcome here (issue 21 item 8). One whose trial is
paused, or re-pinned to another site by a resume, when the task comes to it — forwarded
before the pause, and held while the collector was away or in the same batch as the pause —
is recorded ``shed_stopped`` as a finished case of the trial
(:meth:`ControlPlane.settle_unrunnable`), counted in its funnel here, and never run later:
as a sidecar's engine sheds the claims it holds when its trial pauses. The sidecar counts
nothing for an exchange it forwarded; the two funnels add up to what was sampled. An exchange is acknowledged to the sidecar once stored, so a collector that
restarts loses nothing: what it had not claimed is offered again by the next life (a case
in flight at a crash is marked ``indeterminate`` by recovery, like a sidecar's, and not re-run).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import AsyncIterator, Callable, Sequence

import msgspec

from policies.site import Site
from sidecar.config import Config
from sidecar.engine.case import case_id_for
from sidecar.engine.engine import Engine
from sidecar.ingest.claims import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.engine.parts import engine_settings, open_providers, price_book, resolver
from sidecar.ingest.routing import RoutingTable
from sidecar.ingest.wire import Exchange, ExchangeRequest, ExchangeResponse
from sidecar.collector.store import make_collector_store
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.store.records import CaseFinish, CaseStart
from sidecar.supervise import RESTART, Supervisor
from sidecar.telemetry import CountingFunnel
from uplink.schema import ExchangeRecord

log = logging.getLogger("shadowtrial.control_plane")

SITE: Site = "control_plane"
#: How often stored exchanges are looked at when nothing wakes the driver.
POLL_S = 0.5
#: The most exchanges of paused or re-pinned trials recorded in one pass.
SETTLE_BATCH = 500
#: Why such an exchange was not run (the case's error; no content).
NOT_RUN = "its trial was paused or re-pinned before the control plane ran it"

_exchange = msgspec.json.Decoder(ExchangeRecord)


def collected_traffic(store: ControlPlaneStore) -> Callable[[str], AsyncIterator[Exchange]]:
    """A team's retained traffic at the control plane: the exchanges forwarded for its trials
    (:meth:`~sidecar.collector.store.base.CollectedStore.collected_exchanges`), oldest first; for seeding
    datasets (a record that does not decode is skipped)."""

    async def source(team: str) -> AsyncIterator[Exchange]:
        after = 0
        while rows := await store.collected_exchanges(team, after_seq=after, limit=500):
            for seq, body in rows:
                after = seq
                try:
                    yield claim_of(body).content()
                except (msgspec.ValidationError, msgspec.DecodeError):
                    continue

    return source


def claim_of(body: bytes) -> Claim:
    """The engine's claim of a stored ``exchange`` record. Raises ``msgspec.ValidationError``
    (or ``DecodeError``) for a body that is not one."""
    rec = _exchange.decode(body)
    return Claim(rec.trial_id, Exchange(
        exchange_id=rec.exchange_id, team=rec.team, model=rec.model,
        request=msgspec.convert(rec.request, ExchangeRequest), response=msgspec.convert(rec.response, ExchangeResponse),
        gateway=rec.gateway, route=rec.route, served_at=rec.served_at, latency_ms=rec.latency_ms, tags=rec.tags,
    ))


class ControlPlane:
    """The engine of ``shadowtrial collector`` and the task that drives it (see the module's docs).

    ``start(store)``: the engine opens its own connection to ``location`` (the collector's
    store); ``store`` is the collector's main-loop connection the driver reads from.
    ``stop()``: the driver first, then the engine (drain within ``[engine] drain_seconds``;
    cases still in flight are retired ``indeterminate``)."""

    def __init__(
        self, config: Config, *, location: str, clock: Callable[[], float] = time.time,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.supervisor = supervisor or Supervisor()
        self.handoff: Handoff[Claim] = Handoff(max(config.engine.workers * 4, 16))
        self.funnel = CountingFunnel()
        settings = dataclasses.replace(engine_settings(config, flush_funnel=True), gateway="", posture_teams=())
        lock_timeout = config.store.lock_timeout_seconds
        self.engine = Engine(
            settings=settings,
            open_store=lambda: make_collector_store(location, lock_timeout_s=lock_timeout),
            open_providers=lambda: open_providers(config),
            resolve=resolver(config, price_book(config)),
            routing=RoutingTable(),
            funnel=self.funnel,
            handoff=self.handoff,
            on_progress=self._progressed,
            clock=clock,
            site=SITE,
            supervisor=self.supervisor,
        )
        self._clock = clock
        self._lease_s = config.engine.lease_seconds
        self._store: ControlPlaneStore | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        #: (trial, exchange) offered and not yet seen with a case; bodies that are not exchanges.
        self._offered: set[tuple[str, str]] = set()
        self._bad: set[bytes] = set()
        #: Claims offered to the engine in all.
        self.offered = 0

    async def start(self, store: ControlPlaneStore) -> None:
        self._store = store
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await self.engine.start()
        # Restarted if it dies: it reads the stored exchanges again.
        self._task = self.supervisor.task("control-plane", self._drive, RESTART)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.engine.stop()

    def wake(self) -> None:
        """Look at the stored exchanges now (on the collector's loop)."""
        if self._wake is not None:
            self._wake.set()

    def _progressed(self) -> None:
        """On the engine's thread: a case finished, so the hand-off has room."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.wake)

    async def _drive(self) -> None:
        assert self._wake is not None
        while True:
            self._wake.clear()
            try:
                await self.settle_unrunnable()
                await self.offer_pending()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.error("reading stored exchanges failed (%s); trying again", type(exc).__name__)
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=POLL_S)
            except asyncio.TimeoutError:
                pass

    async def settle_unrunnable(self) -> int:
        """Record ``shed_stopped`` each stored exchange, with no case yet, of a trial that is
        paused or pinned to another site (see the module's docs); how many were recorded now.

        Through the case ledger, under the engine's owner: the claim of a paused (or ended)
        trial's case is recorded at once with its outcome and counted; one of a trial
        re-pinned elsewhere (running, so claimed) is finished ``shed_stopped`` at once. A
        (trial, exchange) with a case already — run, or counted, on this or another
        collector — is a duplicate and counts nothing, so each is counted once; a crash
        between the claim and its finish leaves the case to the lease's recovery
        (``indeterminate``), still one outcome."""
        assert self._store is not None
        store = self._store
        bodies = await store.unrunnable_exchanges(limit=SETTLE_BATCH + len(self._bad))
        recorded = 0
        for claim in self._readable(bodies):
            trial_id, exchange_id, now = claim.trial_id, claim.exchange.exchange_id, self._clock()
            start = CaseStart(
                case_id=case_id_for(trial_id, exchange_id), trial_id=trial_id, exchange_id=exchange_id,
                owner=self.engine.owner, incumbent_latency_ms=None, incumbent_output_tokens=None,
                incumbent_cost_micros=0, incumbent_cost_coverage="unknown", created_at=now,
            )
            claimed = await store.claim_case(start)
            if claimed == "not_running":
                recorded += 1
            elif claimed == "claimed":
                finish = CaseFinish(
                    case_id=start.case_id, trial_id=trial_id, outcome="shed_stopped", charged_micros=0, known_micros=0,
                    unknown_calls=0, priced_calls=0, candidate_cost_micros=None, candidate_cost_coverage="unknown",
                    judge_cost_micros=None, judge_cost_coverage="unknown", candidate_latency_ms=None,
                    candidate_output_tokens=None, score=None, error=NOT_RUN, finished_at=now, exchange_id=exchange_id,
                )
                if await store.finish_case(finish, self.engine.owner):
                    recorded += 1
        if recorded:
            log.warning("%d stored exchange(s) of paused or re-pinned trials recorded shed_stopped", recorded)
        return recorded

    def _readable(self, bodies: Sequence[bytes]) -> list[Claim]:
        """The claims of stored exchange records; one that cannot be read is logged once and
        skipped from then on (``self._bad``)."""
        claims: list[Claim] = []
        for body in bodies:
            if body in self._bad:
                continue
            try:
                claims.append(claim_of(body))
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                log.error("a stored exchange record cannot be read (%s); it is skipped", type(exc).__name__)
                self._bad.add(body)
        return claims

    async def offer_pending(self) -> int:
        """Offer stored exchanges without a case to the engine, as many as it has room for."""
        assert self._store is not None
        room = self.handoff.maxsize - self.handoff.depth
        if room <= 0:
            return 0
        now = self._clock()
        # Leased to this engine (a peer collector's engine leases others); ours renewed each pass.
        bodies = await self._store.lease_exchanges(owner=self.engine.owner, now=now, lease_until=now + self._lease_s,
                                                   limit=room + len(self._offered) + len(self._bad))
        pending = [((claim.trial_id, claim.exchange.exchange_id), claim) for claim in self._readable(bodies)]
        # What is no longer pending has its case now (claimed, run, or counted).
        self._offered &= {key for key, _ in pending}
        fresh = [(key, claim) for key, claim in pending if key not in self._offered][:room]
        taken = self.handoff.offer_many([claim for _, claim in fresh])
        self._offered.update(key for key, _ in fresh[:taken])
        self.offered += taken
        return taken
