"""The sink of execution site ``control_plane``: sampled exchanges go to the collector.

For a trial pinned to the control plane the sidecar stops at "sample" (DESIGN.md section 2):
the tap offers the claim to this sink's :attr:`Forwarder.handoff` instead of the engine's,
and the collector runs the case with its own providers and judge (issue 11 item 5).

The shape of the engine's hand-off: the tap's :meth:`~sidecar.ingest.handoff.Handoff.offer_many`
never waits; a full buffer refuses the *newest* claims, which the tap counts
``shed_queue_full``. One task on the main loop takes batches and writes each claim as an
:class:`~uplink.schema.ExchangeRecord` (bodies included, ``id``
``exchange:<trial_id>:<exchange_id>``) into the outbox, one transaction per batch
(:meth:`~sidecar.store.base.OutboxDelivery.enqueue_outbox`, the first copy of an id wins);
the delivery loop sends them with everything else, in outbox order.

Funnel. A forwarded claim is counted nowhere here: its one funnel outcome is the collector's.
A claim whose trial is no longer routed here when its turn comes (paused, stopped, or
re-pinned since) is not forwarded and is counted ``shed_stopped``; one of a trial the collector
says it no longer runs (:meth:`Forwarder.halt`, issue 25 item 5) is counted here with that
outcome (``cap_reached``, else ``shed_stopped``); one of a trial that is
not pinned to the control plane with retention on (the predicate makes that impossible; it
is checked all the same, content must never leave for a trial whose posture forbids it) is
counted ``not_at_site`` and logged. A store failure is retried with the batch after a pause;
at shutdown what is still buffered after the drain deadline is counted ``shed_stopped``.
Crash safety: with an intake journal (``store.journal_dir``) the tap writes each claim it
hands here to a journal of the forwarder's own before answering; :attr:`Forwarder.done_through`
tells it which are in the outbox (or counted), and a restart offers the rest again. A claim
forwarded twice is one outbox record and one collector record (the id is the same).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Callable

import msgspec

from sidecar.ingest.claims import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.routing import RoutingTable
from sidecar.redact import describe
from sidecar.store.base import Store
from sidecar.store.records import OutboxRecord
from sidecar.supervise import UNTIL_DONE, Supervisor
from uplink.schema import ExchangeRecord, PostureRecord, encode_record

log = logging.getLogger("shadowtrial.forwarder")

SITE = "control_plane"
TOPIC = "exchange"
#: The most claims written in one transaction.
BATCH = 200
#: The pause before a failed write is tried again.
RETRY_S = 0.5


def exchange_record(claim: Claim) -> ExchangeRecord:
    """The wire record of a claim: the exchange as the gateway sent it, under the trial."""
    ex = claim.content()
    return ExchangeRecord(
        id=f"exchange:{claim.trial_id}:{ex.exchange_id}", trial_id=claim.trial_id, team=ex.team,
        exchange_id=ex.exchange_id, gateway=ex.gateway, model=ex.model,
        request=msgspec.to_builtins(ex.request), response=msgspec.to_builtins(ex.response),
        served_at=ex.served_at, latency_ms=ex.latency_ms, route=ex.route, tags=dict(ex.tags),
    )


class Forwarder:
    """Claims of control-plane trials, from the tap into the outbox; see the module's docs."""

    def __init__(
        self, store: Store, routing: RoutingTable, funnel: FunnelCounter, *, queue_size: int,
        clock: Callable[[], float], supervisor: Supervisor | None = None, gateway: str = "",
    ) -> None:
        """``gateway``: this sidecar's (``[sidecar] gateway``), named in the posture records."""
        self.handoff: Handoff[Claim] = Handoff(queue_size)
        self._gateway = gateway
        self._supervisor = supervisor or Supervisor()
        self._store = store
        self._routing = routing
        self._funnel = funnel
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        #: Claims written to the outbox, and those not forwarded, by reason.
        self.forwarded = 0
        self.dropped: Counter[str] = Counter()
        #: Every claim numbered up to this is in the outbox or counted (its journal may forget it).
        self.done_through = 0
        #: The batch :meth:`_run` holds until it is in the outbox (counted if the loop dies with it).
        self._holding: list[Claim] = []
        self._settled: set[int] = set()
        #: Trials the collector no longer runs (its answers say so), with the outcome their
        #: claims are counted instead of forwarded (:meth:`halt`).
        self._halted: dict[str, str] = {}

    def halt(self, trial_id: str, outcome: str) -> None:
        """Forward no more of the trial's claims: each is counted ``outcome`` here instead
        (``cap_reached`` when the collector reached the trial's cap, else ``shed_stopped``)."""
        self._halted[trial_id] = outcome

    @property
    def halted(self) -> dict[str, str]:
        return dict(self._halted)

    async def start(self) -> None:
        self.handoff.attach(asyncio.get_running_loop())
        # Restarted if it dies: it takes its work from the hand-off again. Its one normal end:
        # the hand-off closed and empty (:meth:`stop`).
        self._task = self._supervisor.task("forwarder", self._run, UNTIL_DONE, on_death=self._died)

    async def stop(self, drain_s: float) -> None:
        """Stop accepting, write what is buffered within ``drain_s``, count the rest ``shed_stopped``."""
        self.handoff.close()
        task, self._task = self._task, None
        if task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout=drain_s)
            except asyncio.TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        for claim in self.handoff.drain_remaining():
            self._funnel.add(claim.trial_id, "shed_stopped")

    def _died(self) -> None:
        """The loop died holding a batch not yet in the outbox: its claims get their one outcome."""
        held, self._holding = self._holding, []
        for claim in held:
            if id(claim) not in self._settled:  # not already counted by _records before it raised
                self._drop(claim, "shed_stopped")
        self._settled = set()

    async def _run(self) -> None:
        while True:
            self._holding, self._settled = [], set()
            claims = await self.handoff.take_many(BATCH)
            if not claims:  # closed and empty
                return
            self._holding = claims
            taken = self._records(claims)
            records = self._postures(taken, claims) + [r for _, r in taken]
            while records:
                try:
                    await self._store.enqueue_outbox(records, now=self._clock())
                except asyncio.CancelledError:
                    for trial_id, _ in taken:  # counted, never lost silently
                        self._funnel.add(trial_id, "shed_stopped")
                    raise
                except Exception as exc:
                    log.error("forwarding %d exchange(s) to the outbox failed (%s); trying again", len(records),
                              describe(exc))
                    await asyncio.sleep(RETRY_S)
                    continue
                self.forwarded += len(taken)
                break
            self.done_through = max(self.done_through, claims[-1].seq)  # the tap numbers them in hand-off order

    def _records(self, claims: list[Claim]) -> list[tuple[str, OutboxRecord]]:
        """(trial id, outbox record) of each claim that may be forwarded; the others counted."""
        routes = self._routing.current
        out: list[tuple[str, OutboxRecord]] = []
        for claim in claims:
            route = routes.get(claim.trial_id)
            halted = self._halted.get(claim.trial_id)
            if halted is not None:  # ended or paused at the collector: not forwarded, counted here
                self._drop(claim, halted)
                continue
            if route is None:
                self._drop(claim, "shed_stopped")
                continue
            if route.execution_site != SITE or not route.prompt_retention:
                log.error("trial %s is not pinned to the control plane with retention on: its exchange is not "
                          "forwarded", claim.trial_id)
                self._drop(claim, "not_at_site")
                continue
            record = exchange_record(claim)
            out.append((claim.trial_id, OutboxRecord(record_id=record.id, topic=TOPIC,
                                                     body=encode_record(record).decode())))
        return out

    def _postures(self, taken: list[tuple[str, OutboxRecord]], claims: list[Claim]) -> list[OutboxRecord]:
        """Ahead of a batch's exchanges, in the same transaction, a ``posture`` record per team
        saying the posture they are forwarded under (their trials are routed here as
        control-plane trials with retention on: content uplink on at every gateway, retention
        on, cut over). The collector takes a team's content on the word of its latest posture
        record (issue 25 item 5), so an exchange never arrives ahead of the posture it was sent
        under; the heartbeat's records say when the posture moves away."""
        trials = {trial_id for trial_id, _ in taken}
        teams = sorted({c.exchange.team for c in claims if c.trial_id in trials})
        now = self._clock()
        out = []
        for team in teams:
            record = PostureRecord(id=f"posture:{team}:{self._gateway}:{int(now * 1e6)}", team=team,
                                   gateway=self._gateway, revision=int(now * 1e6), at=now, content_uplink=True,
                                   prompt_retention=True, site=SITE)
            out.append(OutboxRecord(record_id=record.id, topic="posture", body=encode_record(record).decode()))
        return out

    def _drop(self, claim: Claim, outcome: str) -> None:
        self._settled.add(id(claim))
        self.dropped[outcome] += 1
        self._funnel.add(claim.trial_id, outcome)
