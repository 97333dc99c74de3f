"""The engine: its own thread and event loop, off the tap's.

The tap's loop only decodes, matches, samples and offers :class:`Claim`\\ s to
the :class:`~sidecar.ingest.handoff.Handoff`; everything that waits on a
provider or the store happens here, so a flood of exchanges cannot starve the
cases and a slow provider cannot delay the tap. The engine owns, on its loop:
its own store connection, the provider clients, the subjects of running
trials, ``workers`` case tasks, and three housekeeping tasks —

- **refresh**: every ``refresh_seconds`` re-reads the running trials from the
  store, activates new subjects and installs the tap's routing table, so a
  trial created or stopped on another sidecar of the fleet is seen here;
- **heartbeat**: renews this process's lease every third of ``lease_seconds``;
- **sweep**: marks ``indeterminate`` the in-flight cases of owners whose lease
  expired (a crashed peer, or this host's previous life) — never a live
  peer's, never this process's own (however late its heartbeat), never re-run;
- **fold**: every ``refresh_seconds``, trials this engine judged cases for
  since their last fold have their evidence folded into the verdict state kept
  with them (:mod:`sidecar.trials.fold`; a long trial less often, see :meth:`Engine.fold`),
  so a decision stands from about the case that reached it, whether or not
  anybody reads the trial.

Shutdown (:meth:`Engine.stop`): stop accepting; let workers finish what is
queued and in hand within the drain deadline; count what is left queued
``shed_stopped``; cancel what is still in hand and *retire* this owner, which
marks those cases ``indeterminate`` at once; close providers and the store.

Supervision (:mod:`sidecar.supervise`): the workers and the housekeeping tasks are restarted
if they die (each takes its work from the hand-off or the store again); the engine's thread
ending while nobody stopped it is fatal to the process, since the cases in flight, the
store connection and the lease lived on its loop (a new process recovers them).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Coroutine, Mapping, Sequence, TypeVar

from policies.site import Site, runs_here
from sidecar.engine.case import CaseRunner
from sidecar.seal import Sealer
from sidecar.auth.revocations import Revocations
from sidecar.trials.decided import stop_if_decided
from sidecar.trials.fold import fold_trial
from sidecar.ingest.claims import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.engine.subjects import FinishHook, Subject, SubjectKind, activate
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.routing import RoutingTable
from sidecar.providers.base import Provider
from sidecar.redact import describe
from sidecar.engine.posture_report import report_and_pause
from sidecar.store.base import Store
from sidecar.store.records import TrialRecord
from sidecar.supervise import EXIT, RESTART, Supervisor
from sidecar.telemetry import EngineTelemetry
from sidecar.trials.create import Resolved
from sidecar.trials.watch_rows import roll_watches
from sidecar.trials.segments import favours

log = logging.getLogger("shadowtrial.engine")

T = TypeVar("T")

#: A sidecar's engine's execution site (DESIGN.md section 9): it runs local trials only. The
#: collector's engine runs with ``site="control_plane"`` (:mod:`sidecar.collector.control_plane`).
SITE: Site = "local"


@dataclass(frozen=True, slots=True)
class EngineSettings:
    workers: int
    drain_seconds: float
    shadow_header: str
    lease_seconds: float
    refresh_seconds: float
    reserve_wait_seconds: float
    #: Write the funnel counter to the store from this loop (an engine in its own process,
    #: whose counts no runtime flushes), every ``FUNNEL_FLUSH_S`` and at the end.
    flush_funnel: bool = False
    #: The gateway this sidecar serves (``[sidecar] gateway``; empty: report nothing), its
    #: content uplink (``[uplink] content``), and the teams it reports for with their
    #: configured retention (``[teams]``, which also seeds their stored posture at start).
    gateway: str = ""
    content_uplink: bool = False
    posture_teams: tuple[tuple[str, bool], ...] = ()
    uplink_stale_seconds: float = 300.0
    #: Write the uplink's ``case_result`` of each case recovery finishes (``[uplink]`` set).
    report_recovered: bool = False
    #: The retention key (``retention.key_env``): a retention-on case's kept bodies are sealed with it.
    retention_key: bytes | None = None


#: How often pending funnel counts are written to the store.
FUNNEL_FLUSH_S = 0.5
#: With an uplink, each team's posture record is sent again every this many heartbeats, changed
#: or not (one content-free record per team): a collector that lost it learns it again.
POSTURE_RESEND_BEATS = 6
#: The longest a trial with new judged cases waits for its fold (see :meth:`Engine.fold`).
FOLD_AT_LEAST_S = 30.0


class Engine:
    def __init__(
        self,
        *,
        settings: EngineSettings,
        open_store: Callable[[], Store],
        open_providers: Callable[[], dict[str, Provider]],
        resolve: Callable[[str], Resolved],
        routing: RoutingTable,
        funnel: FunnelCounter,
        handoff: Handoff[Claim],
        hooks: Sequence[FinishHook] = (),
        on_progress: Callable[[], None] = lambda: None,
        on_done: Callable[[int], None] = lambda done_through: None,
        clock: Callable[[], float] = time.time,
        revoked_subjects_file: str = "",
        telemetry: EngineTelemetry | None = None,
        site: Site = SITE,
        supervisor: Supervisor | None = None,
    ) -> None:
        from sidecar.engine.watermark import Watermark

        #: Starts the engine's thread and tasks; the owner's (its ``/readyz`` reads it).
        self.supervisor = supervisor or Supervisor()
        self._closing = False

        #: The execution site this engine runs cases for; every other trial's case is ``not_at_site``.
        self.site: Site = site
        self.settings = settings
        self._open_store = open_store
        self._open_providers = open_providers
        self.resolve = resolve
        self.routing = routing
        self.funnel = funnel
        self.handoff = handoff
        self.hooks = tuple(hooks)
        self.on_progress = on_progress
        self.on_done = on_done
        self.clock = clock
        self.revoked_subjects_file = revoked_subjects_file
        #: The counts its metrics read and the tracer of its cases (docs/telemetry.md).
        self.telemetry = telemetry if telemetry is not None else EngineTelemetry()
        #: Which journaled claims are done (:mod:`sidecar.engine.watermark`).
        self.watermark = Watermark()
        #: This process in the fleet's case ledger.
        self.owner = f"{uuid.uuid4().hex[:12]}"
        #: Per team, the posture last put in the outbox for the collector (content uplink,
        #: retention, site): a record is sent when it changes, once per process life, and every
        #: :data:`POSTURE_RESEND_BEATS` heartbeats.
        self._posture_sent: dict[str, tuple[bool, bool, str]] = {}
        #: Heartbeats since the posture records were last sent whole (:data:`POSTURE_RESEND_BEATS`).
        self._posture_beats = 0
        self.in_flight = 0
        self.recovered: list[str] = []
        #: Cases judged here since each trial's last fold, and in all (see :meth:`fold`).
        self._unfolded: dict[str, int] = {}
        self._judged: dict[str, int] = {}
        self._folded_at: dict[str, float] = {}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._store: Store | None = None
        self._providers: dict[str, Provider] = {}
        self._subjects: dict[str, Subject] = {}
        self._runner: CaseRunner | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._chores: list[asyncio.Task[None]] = []
        self._idle: asyncio.Event | None = None

    # -- running code on the engine's loop from another -----------------------

    async def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the engine's loop and await its result from the caller's loop."""
        assert self._loop is not None, "engine not started"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        ready = threading.Event()

        def main() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._closing = False
        self._thread = self.supervisor.thread("engine", main, EXIT, expected_end=lambda: self._closing)
        await asyncio.to_thread(ready.wait)
        try:
            await self.call(self._start())
        except BaseException:
            await self._stop_thread()
            raise

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        self.handoff.attach(loop)
        self._idle = asyncio.Event()
        self._idle.set()
        self._store = self._open_store()
        await self._store.open()
        self._providers = self._open_providers()
        s = self.settings
        self._revocations = Revocations(self.revoked_subjects_file)
        self._runner = CaseRunner(
            sealer=None if s.retention_key is None else Sealer(s.retention_key),
            store=self._store,
            owner=self.owner,
            funnel=self.funnel,
            shadow_header=s.shadow_header,
            hooks=self.hooks,
            reserve_wait_s=s.reserve_wait_seconds,
            clock=self.clock,
            authorise=self._authorise,
            may_spend=lambda subject: not self._revocations.revoked(subject.record.started_by),
            tally=self.telemetry.tally,
            tracer=self.telemetry.tracer,
            sample_ratio=self.telemetry.sample_ratio,
        )
        await self._store.heartbeat(self.owner, now=self.clock(), lease_s=s.lease_seconds)
        await self._seed_posture()
        await self._report_uplink()
        self.recovered = await self._store.recover_expired(self.clock(), report=self.settings.report_recovered,
                                                           alive=self.owner)
        self.telemetry.tally.outcome("indeterminate", len(self.recovered))
        if self.recovered:
            log.warning("marked %d case(s) of a stopped process indeterminate; none is re-run", len(self.recovered))
        await self.refresh()
        sup = self.supervisor
        self._workers = [sup.task(f"engine-worker-{i}", self._worker, RESTART) for i in range(s.workers)]
        self._chores = [
            sup.task("engine-refresh", lambda: self._every(s.refresh_seconds, self.refresh), RESTART),
            sup.task("engine-fold", lambda: self._every(s.refresh_seconds, self.fold), RESTART),
            sup.task("engine-heartbeat", lambda: self._every(s.lease_seconds / 3, self._heartbeat), RESTART),
            sup.task("engine-sweep", lambda: self._every(s.lease_seconds / 2, self._sweep), RESTART),
            sup.task("engine-account", lambda: self._every(FUNNEL_FLUSH_S, self._account), RESTART),
        ]

    async def stop(self, drain_seconds: float | None = None) -> None:
        """Drain within ``drain_seconds`` (default: the settings'), then stop; see the module's docs."""
        if self._loop is None:
            return
        if self._loop.is_closed():  # it ended unbidden (a fatal death): nothing there drains; count the queue
            self.handoff.close()
            for claim in self.handoff.drain_remaining():
                self.funnel.add(claim.trial_id, "shed_stopped")
            await self._stop_thread()
            return
        try:
            await self.call(self._stop(self.settings.drain_seconds if drain_seconds is None else drain_seconds))
        finally:
            await self._stop_thread()

    async def _stop(self, drain_seconds: float) -> None:
        self.handoff.close()
        try:
            await asyncio.wait_for(self.wait_idle(), timeout=drain_seconds)
        except asyncio.TimeoutError:
            log.warning("drain deadline passed with %d queued and %d in flight", self.handoff.depth, self.in_flight)
        for task in self._workers + self._chores:
            task.cancel()
        await asyncio.gather(*self._workers, *self._chores, return_exceptions=True)
        for claim in self.handoff.drain_remaining():
            self.funnel.add(claim.trial_id, "shed_stopped")
            self.watermark.finished(claim)
        store = self._store
        if store is not None:
            try:
                retired = await store.retire(self.owner, self.clock(), report=self.settings.report_recovered)
                self.telemetry.tally.outcome("indeterminate", len(retired))
                if retired:
                    log.warning("%d case(s) in flight at shutdown marked indeterminate; none is re-run", len(retired))
                if self.settings.flush_funnel:
                    await self.funnel.flush(store)
                await self.fold(final=True)  # what was judged since the last fold, before the store closes
            finally:
                for p in self._providers.values():
                    await p.aclose()
                await store.close()

    async def _stop_thread(self) -> None:
        loop, thread = self._loop, self._thread
        self._closing = True
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            await asyncio.to_thread(thread.join)
        self._loop = None
        self._thread = None

    async def idle(self) -> None:
        """From any other loop: until nothing is queued and nothing in flight."""
        await self.call(self.wait_idle())

    async def wait_idle(self) -> None:
        """Until nothing is queued and nothing in flight (on the engine's loop)."""
        assert self._idle is not None
        while self.handoff.depth or self.in_flight:
            self._idle.clear()
            await self._idle.wait()

    # -- work ----------------------------------------------------------------

    async def _worker(self) -> None:
        assert self._runner is not None and self._idle is not None
        while True:
            claim = await self.handoff.take()
            self.in_flight += 1
            self.watermark.taken(claim)
            try:
                await self._run(claim)
                self.watermark.finished(claim)  # not when cancelled: then it is uncertain
            finally:
                self.in_flight -= 1
                self._idle.set()
                self.on_progress()

    async def _run(self, claim: Claim) -> None:
        assert self._runner is not None
        subject = self._subjects.get(claim.trial_id) or await self._load(claim.trial_id)
        if subject is None:
            self.funnel.add(claim.trial_id, "shed_stopped")
            return
        if not runs_here(subject.record.execution_site, self.site):
            # A resume may have re-pinned the trial here since its subject was activated.
            subject = await self._load(claim.trial_id)
            if subject is None or not runs_here(subject.record.execution_site, self.site):
                self.funnel.add(claim.trial_id, "not_at_site")
                return
        try:
            if claim.content_kept:
                if await self._runner.run(subject, claim.content()) == "judged":
                    self._unfolded[subject.id] = self._unfolded.get(subject.id, 0) + 1
                    self._judged[subject.id] = self._judged.get(subject.id, 0) + 1
                    if subject.record.on_decision == "stop" and subject.kind == "trial":  # live trials only
                        await self.fold_now(subject.id)
            else:
                await self._runner.record_unrun(subject, claim.exchange.exchange_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The store failed under the case: it stays in flight with our owner, and
            # retire (or a peer's sweep after our lease) gives it its outcome.
            log.error("case of %s could not be recorded (%s); it is settled by recovery", claim.trial_id, describe(exc))

    async def _load(self, trial_id: str) -> Subject | None:
        """A claim for a trial this engine holds no subject of: created moments ago (here or on
        a peer), or ended since. Its subject is activated whatever its status, so the claim
        goes through the store like any other: a re-delivery is a duplicate, and a case of
        an ended trial is counted with the reason the store gives."""
        assert self._store is not None
        record = await self._store.get_trial(trial_id)
        return None if record is None else self._activate(record)

    def _activate(self, record: TrialRecord) -> Subject | None:
        try:
            subject = activate(
                record, resolve=self.resolve, providers=self._providers, shadow_header=self.settings.shadow_header,
                wrap=self.telemetry.wrap, kind=_kind(record),
            )
        except (LookupError, KeyError) as exc:
            log.error("trial %s cannot run on this sidecar: %s", record.id, exc)
            return None
        self._subjects[record.id] = subject
        return subject

    # -- housekeeping ----------------------------------------------------------

    async def refresh(self) -> None:
        """Re-read running trials; activate new ones; install the tap's routes."""
        assert self._store is not None
        edits = self.routing.edits
        await roll_watches(self._store, self.clock())  # a watch's new UTC day: its row, with the day's cap
        running = await self._store.list_trials(status="running")
        decided = await self._store.list_trials(status="decided")  # matched and counted, never run
        fresh: dict[str, Subject] = {}
        for record in running:
            subject = self._subjects.get(record.id)
            if subject is None or _repinned(subject.record, record):
                subject = self._activate(record)
            if subject is not None:
                fresh[record.id] = subject
        self._subjects = fresh
        # A trial pinned elsewhere is routed whatever this engine can run: its claims go to
        # that site's sink (the forwarder), never to this engine.
        self.routing.replace(
            [r for r in running if r.id in fresh or not runs_here(r.execution_site, self.site)] + decided,
            edits_seen=edits, favour=await favours(self._store, running),
        )

    async def flush(self) -> None:
        """Write pending funnel counts (on the engine's loop, with its store)."""
        assert self._store is not None
        await self.funnel.flush(self._store)

    async def _account(self) -> None:
        """Note which journaled claims are done; write the funnel counts when this engine owns
        them (its own process); publish ``done_through`` once the counts behind it are stored."""
        self.watermark.mark(self.handoff.oldest_seq(), self.funnel.epoch)
        if self.settings.flush_funnel:
            await self.flush()
        if self.watermark.publish(self.funnel.committed_epoch):
            self.on_done(self.watermark.done_through)

    async def _authorise(self, subject: Subject) -> str | None:
        """Before each dispatch: may the trial's starter still run it? A starter whose subject is
        revoked pauses the trial ``starter_unauthorized`` (once; the store's update is conditional)."""
        starter = subject.record.started_by
        if not self._revocations.revoked(starter):
            return None
        assert self._store is not None
        fresh = await self._store.get_trial(subject.id)  # resumed since by someone else?
        if fresh is not None and fresh.status == "running" and not self._revocations.revoked(fresh.started_by):
            self._activate(fresh)  # the new starter's record, for the next cases
            return None
        reason = f"the trial's starter {starter!r} lost the right to run it"
        _, changed = await self._store.set_trial_status(
            subject.id, "starter_unauthorized", reason, ended=False, now=self.clock()
        )
        if changed:
            log.warning("trial %s paused: %s", subject.id, reason)
            self.routing.remove(subject.id)
        return reason

    async def fold(self, *, final: bool = False) -> None:
        """Fold the evidence of trials judged here since their last fold into their kept states.

        A fold evaluates the trial's whole evidence (from counts the store makes, and its scored
        cases since the last fold), so a long trial is folded less often: once
        its new cases reach 2% of those judged here (at least one), or after
        ``FOLD_AT_LEAST_S``; at stop, whatever is pending. How often looks are folded
        changes how tight the kept interval is, never its validity."""
        assert self._store is not None
        now = time.monotonic()
        for trial_id, new in sorted(self._unfolded.items()):
            due = new >= max(1, self._judged.get(trial_id, 0) // 50)
            if not (final or due or now - self._folded_at.get(trial_id, 0.0) >= FOLD_AT_LEAST_S):
                continue
            await self._fold_one(trial_id, new, now)

    async def fold_now(self, trial_id: str) -> None:
        """After a judged case of a trial that stops on its decision: fold it at once when due
        (the same 2% rule as :meth:`fold`, not the interval), so it stops within a case or so of
        its decision rather than up to ``refresh_seconds`` later (:mod:`sidecar.trials.decided`)."""
        new = self._unfolded.get(trial_id, 0)
        if new and new >= max(1, self._judged.get(trial_id, 0) // 50):
            await self._fold_one(trial_id, new, time.monotonic())

    async def _fold_one(self, trial_id: str, new: int, now: float) -> None:
        assert self._store is not None
        try:
            # Counts the store makes, not every judgment: a fold's cost must not grow with the trial.
            got = await self._store.fold_inputs(trial_id)
            if got is not None:
                folded = await fold_trial(self._store, got.record, got.score_counts,
                                          first_slot=(got.decisive, got.first_slot_wins))
                decided = await stop_if_decided(self._store, got.record, folded.evaluation, now=self.clock())
                if decided is not None:
                    log.info("trial %s decided (%s); it stops on its decision", trial_id, folded.evaluation.verdict)
                    self.routing.add(decided)  # still matched, now counted after_decision at the tap
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # left pending: folded at a later interval
            log.warning("trial %s could not be folded (%s); trying again next interval", trial_id, describe(exc))
            return
        left = self._unfolded.get(trial_id, 0) - new
        if left > 0:
            self._unfolded[trial_id] = left
        else:
            self._unfolded.pop(trial_id, None)
        self._folded_at[trial_id] = now

    async def _heartbeat(self) -> None:
        assert self._store is not None
        await self._store.heartbeat(self.owner, now=self.clock(), lease_s=self.settings.lease_seconds)
        await self._report_uplink()

    async def _seed_posture(self) -> None:
        """Store the configured posture of each ``[teams]`` team the store has none of; say so
        when the stored one differs from the config (the stored one counts: docs/posture.md)."""
        assert self._store is not None
        if self.settings.gateway and not self.settings.posture_teams:
            log.warning("[sidecar] gateway = %r, but no [teams.NAME] table names a team to report its content "
                        "uplink for: it counts towards no team's posture", self.settings.gateway)
        for team, retention in self.settings.posture_teams:
            if not await self._store.seed_posture(team, prompt_retention=retention, cut_over=False, now=self.clock()):
                stored = await self._store.get_posture(team)
                if stored is not None and stored.prompt_retention != retention:
                    log.warning("team %r: the stored posture (prompt_retention=%s) counts, not [teams] in the config",
                                team, stored.prompt_retention)

    async def _report_uplink(self) -> None:
        """Report this sidecar's gateway's content uplink for its teams; pause the running trials
        a changed posture moves (a gateway turned on or off, or gone stale)."""
        s = self.settings
        if not s.gateway or not s.posture_teams:
            return
        assert self._store is not None
        retention = dict(s.posture_teams)
        self._posture_beats += 1
        resend = self._posture_beats >= POSTURE_RESEND_BEATS
        paused = await report_and_pause(
            self._store, teams=[t for t, _ in s.posture_teams], gateway=s.gateway, content_uplink=s.content_uplink,
            now=self.clock(), stale_after_s=s.uplink_stale_seconds, default_retention=lambda team: retention[team],
            sent=self._posture_sent if s.report_recovered else None,  # with an uplink: tell the collector
            resend=resend,
        )
        if resend:
            self._posture_beats = 0
        for trial_id in paused:
            log.warning("trial %s paused posture_changed: its team's posture moved", trial_id)
            self.routing.remove(trial_id)

    async def _sweep(self) -> None:
        assert self._store is not None
        # Never this process's own cases: a loop that stalled past its own lease (a loaded host,
        # a long GC) is late, not dead, and its next heartbeat renews the lease.
        recovered = await self._store.recover_expired(self.clock(), report=self.settings.report_recovered,
                                                      alive=self.owner)
        self.telemetry.tally.outcome("indeterminate", len(recovered))
        if recovered:
            log.warning("marked %d case(s) of an expired peer indeterminate; none is re-run", len(recovered))
            self.on_progress()

    async def _every(self, seconds: float, chore: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await chore()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("engine chore %s failed; it runs again next interval", getattr(chore, "__name__", chore))

    @property
    def done_through(self) -> int:
        return self.watermark.done_through

    def counts(self) -> dict[str, int]:
        """This engine's counters (:mod:`sidecar.telemetry.readings`), from any thread."""
        return self.telemetry.tally.snapshot()

    @property
    def subjects(self) -> Mapping[str, Subject]:
        return self._subjects


def _repinned(held: TrialRecord, fresh: TrialRecord) -> bool:
    """Whether a resume changed what a held subject was activated with (its site, retention or
    starter): then it is activated again from the fresh record."""
    return (held.execution_site, held.prompt_retention, held.started_by) != (
        fresh.execution_site, fresh.prompt_retention, fresh.started_by
    )



def _kind(record: TrialRecord) -> SubjectKind:
    """What a case of ``record`` runs for: a watch's day row, a replay, or a live trial."""
    if record.kind == "watch":
        return "watch"
    return "replay" if record.source == "replay" else "trial"
