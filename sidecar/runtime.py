"""The runtime: every resource of one sidecar process, opened and closed in order.

Held on the aiohttp apps under :data:`RUNTIME` (no module globals). The main
event loop runs the tap and the admin API with the admin's store connection.
The engine (:mod:`sidecar.engine.engine`) runs with its own store connection
and the provider clients either in a process of its own (``engine.isolation =
"process"``, the default: :mod:`sidecar.engine.process`) or on a thread and
loop of this process (``"thread"``). Between them: the routing table the tap
reads, the bounded hand-off the tap offers claims to, and the funnel counter.

``start`` opens the admin store, starts the engine (which recovers cases of
expired owners and loads running trials), the funnel flush loop and — with the
engine in its own process — the refresh of the tap's routes; ``stop`` stops the
engine (drain within the deadline, retire what is left), flushes the funnel,
closes the admin store and, last, flushes and closes this process's telemetry.

Every background task and thread is started through :attr:`Runtime.supervisor`
(:mod:`sidecar.supervise`): ``/readyz`` names a worker that died; most are restarted after a
backoff, and the death of the engine (its process or loop) sets :attr:`Runtime.failed`, on
which :func:`sidecar.app.serve` stops in order and exits non-zero.

Telemetry (:mod:`sidecar.telemetry`): :meth:`Runtime.readings` is every metric
series of the sidecar — this process's counts, the engine's (reported over the
control pipe when it has a process of its own) and the fleet's spend — for the
Prometheus endpoint. Over OTLP this process exports its own part only; an engine
in its own process exports its part itself.
"""

from __future__ import annotations

import asyncio
import os
import logging
import time
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from aiohttp import web

from sidecar.config import Config
from sidecar.engine.engine import SITE, Engine
from sidecar.ingest.claims import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.engine.parts import (
    configured_retention, engine_settings, open_providers, price_book, resolver, runnable, trial_defaults,
)
from sidecar.engine.process import EngineProcess
from sidecar.engine.subjects import FinishHook
from sidecar.errors import StartupError
from sidecar.export.forwarder import SITE as FORWARDED_SITE, Forwarder
from sidecar.ingest.journal import Journal
from sidecar.ingest.plugin_stats import PluginStats
from sidecar.ingest.routing import RoutingTable
from sidecar.retention.replay import ReplayFeeder
from sidecar.seal import Sealer
from sidecar.services.context import (
    CompareContext, LiveFigures, PostureContext, PromotionContext, ServiceContexts, TrialsContext, ViewContext,
    WatchesContext,
)
from sidecar.retention.window import RetentionWindow
from sidecar.store import make_store
from sidecar.store.base import Store
from sidecar.supervise import RESTART, Death, Supervisor
from sidecar.telemetry import CountingFunnel, EngineTelemetry, Telemetry
from sidecar.telemetry.counters import TapCounters
from sidecar.telemetry.readings import combined, engine_part, spend_part, tap_part
from sidecar.trials.create import TrialDefaults
from sidecar.trials.segments import favours
from sidecar.export.answers import ControlPlaneAnswers
from sidecar.export.delivery import open_delivery
from sidecar.export.case_results import uplink_case_result
from sidecar.export.trial_states import StatePublisher
from sidecar.engine.watch_step import watch_step, watch_step_with_uplink
from uplink.delivery import Delivery

if TYPE_CHECKING:
    from sidecar.alerts.webhook import AlertWebhook

log = logging.getLogger("shadowtrial")

RUNTIME: web.AppKey["Runtime"] = web.AppKey("runtime", object)  # type: ignore[arg-type]

FUNNEL_FLUSH_S = 0.5
#: How often the outbox's depth is read against ``uplink.max_outbox_records``.
OUTBOX_WATCH_S = 1.0


class Runtime:
    def __init__(
        self,
        config: Config,
        *,
        clock: Callable[[], float] = time.time,
        hooks: Sequence[FinishHook] = (),
        telemetry: Telemetry | None = None,
    ) -> None:
        """``telemetry``: this process's providers (tests hand in in-memory ones, and close
        them); by default built from ``[telemetry]`` and closed by :meth:`stop`."""
        self.config = config
        #: Starts and watches every background worker of this process (:mod:`sidecar.supervise`):
        #: ``/readyz`` reads it; a worker whose death only a restart of the process mends ends it.
        self.supervisor = Supervisor(on_fatal=self._worker_failed)
        #: Set when such a worker died: :func:`sidecar.app.serve` then stops and exits non-zero.
        self.failed = asyncio.Event()
        if config.uplink.enabled:  # each finished case writes its content-free record with its outcome
            hooks = (*hooks, uplink_case_result, watch_step_with_uplink)
        else:  # a watch's judged case steps its detector in the transaction that records it
            hooks = (*hooks, watch_step)
        #: The uplink's delivery loop (``[uplink]`` set), started and stopped with the runtime.
        self.delivery: Delivery | None = None
        #: The uplink's outbox holds ``uplink.max_outbox_records``: the tap samples no new case
        #: (``shed_outbox_full``) until delivery makes room. Set by :meth:`_outbox_loop`.
        self.outbox_full = False
        #: Writes the ``trial_state`` records (``[uplink]`` set).
        self.states: StatePublisher | None = None
        #: The outbox's depth at the last reading (``/metrics``).
        self.outbox_depth = 0
        self.telemetry = telemetry if telemetry is not None else Telemetry.start(config.telemetry, process="sidecar")
        self._own_telemetry = telemetry is None
        #: The fleet's spend as last read for the OTLP gauges (the Prometheus endpoint reads its own).
        self._spend: dict[str, int] | None = None
        self.secrets = config.secrets
        self.clock = clock
        self.store: Store = make_store(config.store.location, lock_timeout_s=config.store.lock_timeout_seconds)
        self.routing = RoutingTable()
        self.funnel = CountingFunnel()
        self.handoff: Handoff[Claim] = Handoff(config.tap.queue_size)
        #: Where a claim goes, by the trial's pinned execution site: the local engine's hand-off,
        #: and with ``[uplink]`` the forwarder of ``control_plane`` claims to the collector.
        self.forwarder: Forwarder | None = None
        sinks: dict[str, Handoff[Claim]] = {SITE: self.handoff}
        if config.uplink.enabled:
            self.forwarder = Forwarder(self.store, self.routing, self.funnel, queue_size=config.tap.queue_size,
                                       clock=clock, supervisor=self.supervisor,
                                       gateway=config.sidecar.gateway)
            sinks[FORWARDED_SITE] = self.forwarder.handoff
        self.sinks: Mapping[str, Handoff[Claim]] = sinks
        #: This process's own counts (the tap's, intake's, the retention window's, compare's).
        self.counters = TapCounters()
        #: Drop counts gateway plugins report in their requests' stats header (the tap's loop only).
        self.plugin_stats = PluginStats()
        self.tap_token: str | None = config.secrets.tap_token
        self.price_book = price_book(config)
        self.resolve = resolver(config, self.price_book)
        #: Set (on the main loop) whenever the engine finishes a case.
        self.progress = asyncio.Event()
        self.engine: Engine | EngineProcess
        if config.engine.isolation == "process":
            self.engine = EngineProcess(
                config, handoff=self.handoff, funnel=self.funnel, hooks=hooks,
                on_progress=self._progressed, on_exit=self._engine_exited, supervisor=self.supervisor,
            )
        else:
            self.engine = Engine(
                settings=engine_settings(config),
                open_store=lambda: make_store(config.store.location, lock_timeout_s=config.store.lock_timeout_seconds),
                open_providers=lambda: open_providers(config),
                resolve=self.resolve,
                routing=self.routing,
                funnel=self.funnel,
                handoff=self.handoff,
                hooks=hooks,
                on_progress=self._progressed,
                clock=clock,
                revoked_subjects_file=config.auth.revoked_subjects_file,
                telemetry=EngineTelemetry(
                    tracer=self.telemetry.tracer, sample_ratio=self.telemetry.sample_ratio,
                    systems={n: p.kind for n, p in config.providers.items()},
                ),
                supervisor=self.supervisor,
            )
        self._loop: asyncio.AbstractEventLoop | None = None
        self._chores: list[asyncio.Task[None]] = []
        #: The alert webhook (``[alerts] webhook_url`` set), started and stopped with the runtime.
        self.webhook: AlertWebhook | None = None
        intake = config.store.intake_dir
        #: With a retention key, every body kept at rest is sealed with it: the window's, a
        #: case's kept bodies, and both intake journals' (issue 21, item 13).
        sealer = Sealer(config.secrets.retention_key) if config.secrets.retention_key else None
        #: Sampled claims written before the tap answers (:mod:`sidecar.ingest.journal`): the
        #: local engine's, and the forwarder's in a directory of their own, until each is done.
        self.journal: Journal | None = Journal(intake, sealer=sealer) if intake else None
        self.forward_journal: Journal | None = (
            Journal(os.path.join(intake, "forward"), sealer=sealer, what="forwarded exchange(s)")
            if intake and self.forwarder is not None else None
        )
        journals = {SITE: self.journal, FORWARDED_SITE: self.forward_journal}
        self.journals: Mapping[str, Journal] = {site: j for site, j in journals.items() if j is not None}
        #: The retention window (``[retention]`` with a key): the tap offers it every exchange.
        self.retention: RetentionWindow | None = None
        if config.retention.enabled and sealer is not None:
            self.retention = RetentionWindow(
                config.retention, sealer, self.store, self.counters,
                default_retention=self.prompt_retention, clock=clock, supervisor=self.supervisor,
            )
        #: Replay trials' feeders (:mod:`sidecar.retention.replay`); without a retention key it
        #: feeds nothing (no replay can be created, and a running one waits for its key).
        self.replays = ReplayFeeder(
            self.store, self.handoff, sealer, self.funnel, clock=clock, window_seconds=config.retention.window_seconds,
            supervisor=self.supervisor,
        )
        self.ready = False
        #: What ``/readyz`` says while not ready.
        self.unready_reason = "starting or stopping"
        #: What each family of services is handed (:mod:`sidecar.services.context`), built once.
        self.contexts = self._service_contexts()

    def _service_contexts(self) -> ServiceContexts:
        config = self.config
        views = ViewContext(store=self.store, funnel=self.funnel)
        live = LiveFigures(queue=self.handoff, engine=self.engine, counters=self.counters)
        posture = PostureContext(
            store=self.store, clock=self.clock, stale_after_s=config.uplink.stale_seconds, teams=config.teams,
            default_retention=self.prompt_retention, routing=self.routing, retention=self.retention,
        )
        return ServiceContexts(
            views=views,
            posture=posture,
            trials=TrialsContext(
                views=views, posture=posture, live=live, store=self.store, clock=self.clock, resolve=self.resolve,
                defaults=self.defaults(), sites=frozenset(self.sinks), routing=self.routing, replays=self.replays,
                retention=self.retention,
            ),
            watches=WatchesContext(views=views, live=live, store=self.store, clock=self.clock, routing=self.routing,
                                   uplink_enabled=config.uplink.enabled,
                                   control_plane_console=config.uplink.console_url),
            promotion=PromotionContext(views=views, store=self.store, clock=self.clock, resolve=self.resolve,
                                       routing=self.routing),
            compare=CompareContext(resolve=self.resolve, judge=config.judge, shadow_header=config.engine.shadow_header,
                                   open_providers=lambda: open_providers(config), counters=self.counters,
                                   store=self.store, clock=self.clock),
        )

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.supervisor.bind(self._loop)
        await self.store.open()
        try:
            await self.engine.start()
        except BaseException:
            await self.store.close()
            await self._close_telemetry()
            raise
        try:
            self._replay()
        except BaseException:
            await self.engine.stop()
            await self.store.close()
            await self._close_telemetry()
            raise
        # The chores below read their work again on each pass: each is restarted if it dies.
        self._chores = [self.supervisor.task("funnel-flush", self._flush_loop, RESTART)]
        if self.retention is not None:
            self.retention.start()
        await self.replays.resume()
        if self.config.uplink.enabled:
            try:
                # The collector's answers flow back: trials it no longer runs, exchanges it refused.
                answers = ControlPlaneAnswers(self.store, self.forwarder, self.funnel, clock=self.clock,
                                             routing=self.routing)
                self.delivery = open_delivery(self.config.uplink, self.store, on_answer=answers)
            except ValueError as exc:
                await self.stop()
                raise StartupError(f"uplink: {exc}") from exc
            await self.delivery.start(spawn=self.supervisor.task)
            if self.forwarder is not None:
                await self.forwarder.start()
                self._replay_forwarded()
            await self.watch_outbox()
            self._chores.append(self.supervisor.task("outbox-bound", self._outbox_loop, RESTART))
            self.states = StatePublisher(self.store)
            states, every = self.states, self.config.uplink.state_interval_seconds
            self._chores.append(self.supervisor.task("trial-states", lambda: states.run(every), RESTART))
        if self.config.alerts.enabled and self.config.secrets.webhook_secret:
            from sidecar.alerts.webhook import AlertWebhook

            self.webhook = AlertWebhook(self.store, self.config.alerts, self.config.secrets.webhook_secret,
                                        clock=self.clock, supervisor=self.supervisor)
            await self.webhook.start()
        if isinstance(self.engine, EngineProcess):
            await self.refresh_routes()
            self._chores.append(self.supervisor.task("routes", self._route_loop, RESTART))
        if self.telemetry.meter_provider is not None:
            self.telemetry.observe(self._own_readings)
            self._chores.append(self.supervisor.task("spend-reading", self._spend_loop, RESTART))
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        self.supervisor.stop()  # from here on a worker's end is ours: nothing is restarted
        await self.replays.stop()
        await self.engine.stop()
        if self.retention is not None:
            await self.retention.stop()
        if self.webhook is not None:  # what it has not delivered stays pending for the next life
            await self.webhook.stop()
            self.webhook = None
        for task in self._chores:
            task.cancel()
        await asyncio.gather(*self._chores, return_exceptions=True)
        if self.forwarder is not None:  # what it holds goes into the outbox first, within the drain deadline
            await self.forwarder.stop(self.config.engine.drain_seconds)
        if self.states is not None:  # the states the engine's last cases left, for the next life to send
            try:
                await self.states.publish()
            except Exception:
                log.exception("the last trial states could not be written to the outbox")
        if self.delivery is not None:  # what it has not sent stays in the outbox for the next life
            await self.delivery.stop()
            self.delivery = None
        try:
            await self.funnel.flush(self.store)
            flushed = True
        except Exception:
            log.exception("the last funnel counts could not be written")
            flushed = False
        finally:
            await self.store.close()
        if self.journal is not None:
            self.journal.close(keep=self._uncertain() if flushed else None)
        if self.forward_journal is not None:  # every claim is in the outbox or counted, once flushed
            self.forward_journal.close(keep=[] if flushed else None)
        await self._close_telemetry()

    async def _close_telemetry(self) -> None:
        if self._own_telemetry:
            await asyncio.to_thread(self.telemetry.shutdown)

    def _uncertain(self) -> list[Claim] | None:
        """After a stop: the claims whose fate the store may not hold, or None when even the
        engine's last counts are in doubt (then the journal keeps everything)."""
        if isinstance(self.engine, EngineProcess):
            return self.engine.uncertain if self.engine.stopped_clean else None
        return self.engine.watermark.uncertain()

    def _replay(self) -> None:
        """Open the intake journal and offer again what a previous life had not finished."""
        if self.journal is None:
            log.warning("no intake journal (store.journal_dir is unset for a PostgreSQL store): "
                        "cases queued at a crash are not kept")
            return
        left = self.journal.open()
        if left:
            numbered = self.journal.number(left)
            taken = self.handoff.offer_many(numbered)
            self.journal.write(numbered[:taken])
            for claim in numbered[taken:]:
                self.funnel.add(claim.trial_id, "shed_queue_full")
        self.journal.forget_previous()

    def _replay_forwarded(self) -> None:
        """Offer the forwarder again what a previous life had sampled and not yet written to the
        outbox (their records' ids make a second copy harmless: the outbox and the collector keep one)."""
        journal, forwarder = self.forward_journal, self.forwarder
        if journal is None or forwarder is None:
            return
        left = journal.open()
        if left:
            numbered = journal.number(left)
            taken = forwarder.handoff.offer_many(numbered)
            journal.write(numbered[:taken])
            for claim in numbered[taken:]:
                self.funnel.add(claim.trial_id, "shed_queue_full")
        journal.forget_previous()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FUNNEL_FLUSH_S)
            try:
                await self.funnel.flush(self.store)
            except Exception:
                log.exception("funnel flush failed; counts kept for the next try")
            if self.journal is not None:
                self.journal.prune(self.engine.done_through)
            if self.forward_journal is not None and self.forwarder is not None:
                self.forward_journal.prune(self.forwarder.done_through)

    async def refresh_routes(self) -> None:
        """Install the running trials this sidecar can run as the tap's routes (with the
        engine in its own process; an engine on a thread installs them itself)."""
        edits = self.routing.edits
        running = await self.store.list_trials(status="running")
        decided = await self.store.list_trials(status="decided")  # matched and counted, never run
        self.routing.replace(
            [r for r in running if r.execution_site != SITE or runnable(r, self.resolve, self.config)] + decided,
            edits_seen=edits, favour=await favours(self.store, running),
        )

    async def watch_outbox(self) -> None:
        """Read the outbox's depth against its bound (one count query; the tap never waits on it)."""
        self.outbox_depth = await self.store.outbox_depth()
        self.outbox_full = self.outbox_depth >= self.config.uplink.max_outbox_records

    async def _outbox_loop(self) -> None:
        while True:
            await asyncio.sleep(OUTBOX_WATCH_S)
            try:
                await self.watch_outbox()
            except Exception:
                log.exception("reading the outbox's depth failed; the bound keeps its last reading")

    async def _route_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.engine.refresh_seconds)
            try:
                await self.refresh_routes()
            except Exception:
                log.exception("route refresh failed; the tap keeps its routes until the next try")

    # -- metrics ---------------------------------------------------------------

    def readings(self, spend: Mapping[str, int]) -> dict[str, float]:
        """Every series the Prometheus endpoint shows (``spend``: the store's fleet totals)."""
        return combined(self._tap_readings(), engine_part(self.engine), spend_part(spend))

    def _tap_readings(self) -> dict[str, float]:
        delivered = self.delivery.stats.records_deleted if self.delivery is not None else 0
        return tap_part(self.counters, self.funnel.tally, self.handoff, len(self.routing.current), self.plugin_stats,
                        outbox_depth=self.outbox_depth, outbox_delivered=delivered)

    def _own_readings(self) -> dict[str, float]:
        """What this process exports over OTLP (on the reader's thread): an engine in its own
        process exports its part itself."""
        parts = [self._tap_readings()]
        if not isinstance(self.engine, EngineProcess):
            parts.append(engine_part(self.engine))
        if self._spend is not None:
            parts.append(spend_part(self._spend))
        return combined(*parts)

    async def _spend_loop(self) -> None:
        """Keep the fleet's spend read for the OTLP gauges, once per export interval (a
        reader's callback runs on its own thread and cannot wait for the store)."""
        while True:
            try:
                self._spend = await self.store.total_spend()
            except Exception as exc:
                log.warning("spend reading for telemetry failed (%s); the last one is exported", type(exc).__name__)
            await asyncio.sleep(self.config.telemetry.export_interval_seconds)

    def _worker_failed(self, death: Death) -> None:
        """A worker whose death a restart of the process mends died (on this loop): stop
        reporting ready; :func:`sidecar.app.serve` stops in order and exits non-zero."""
        self.ready = False
        self.unready_reason = f"worker {death.worker} died ({death.error}); this sidecar stops and exits non-zero"
        self.failed.set()

    def _engine_exited(self) -> None:
        """The engine's process died: stop reporting ready, so an orchestrator restarts us."""
        self.ready = False
        self.unready_reason = "the engine process exited; restart this sidecar"

    def _progressed(self) -> None:
        """Called on the engine's thread when a case finished."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.progress.set)

    async def idle(self) -> None:
        """Wait until nothing is queued for the engine and nothing is in flight."""
        await self.engine.idle()

    # -- what a new trial is built with (sidecar.services.trials) ---------------

    def defaults(self) -> TrialDefaults:
        return trial_defaults(self.config)

    def prompt_retention(self, team: str) -> bool:
        return configured_retention(self.config, team)
