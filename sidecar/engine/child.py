"""The engine's process: :func:`main` is what :class:`~sidecar.engine.process.EngineProcess`
spawns. It builds the engine from the config alone (its own store connection and
provider clients), reads claims from the pipe into the engine's hand-off — waiting
for room, never shedding, so backpressure reaches the tap — and answers the
control pipe. See :mod:`sidecar.engine.process` for the protocol.

Its workers are supervised here (:mod:`sidecar.supervise`) and reported to the sidecar's
process (``("workers", views)``) on every change once it said hello; a fatal death (the
engine's loop ending) ends this process at once with a non-zero code, which the sidecar's
process sees as the engine's process exiting."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from dataclasses import dataclass
from multiprocessing import reduction
from multiprocessing.connection import Connection
from typing import Any, Sequence

from sidecar.config import Config
from sidecar.engine.engine import Engine
from sidecar.ingest.claims import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.engine.parts import engine_settings, open_providers, price_book, resolver
from sidecar.engine.pipe import decode_claims, encode_claims
from sidecar.engine.subjects import FinishHook
from sidecar.ingest.routing import RoutingTable
from sidecar.store import make_store
from sidecar.supervise import UNTIL_DONE, Death, Supervisor
from sidecar.telemetry import CountingFunnel, EngineTelemetry, Tally, Telemetry
from sidecar.telemetry.readings import engine_part

log = logging.getLogger("shadowtrial.engine")

#: Batches of room in the engine's own hand-off: enough to keep every worker fed.
ROOM_PER_WORKER = 4
#: How often, at most, the engine's process reports its in-flight count and counters: each report
#: is a message, and a wake-up of the sidecar's process (every 20 ms, it was a twentieth of the
#: engine's CPU under load; ``idle`` and the stop still answer at once).
STATUS_EVERY_S = 0.1


class ParentStderr:
    """The starting process's standard error, pickled for the process being started as a
    descriptor passed along with it (multiprocessing's ``DupFd``); unpickled there as its number."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_received_fd, (reduction.DupFd(2),))


def _received_fd(dup: Any) -> int:
    return int(dup.detach())


@dataclass(frozen=True)
class Inherited:
    """What a process forked from the fork server takes from the sidecar's process at its start,
    as a spawned one inherits it: its environment and standard error (multiprocessing itself
    passes the working directory)."""

    environ: dict[str, str]
    stderr: ParentStderr | int


def main(ctl: Connection, claims: Connection, config: Config, hooks: Sequence[FinishHook], level: int,
         inherit: Inherited | None = None) -> None:
    if inherit is not None:
        os.environ.clear()
        os.environ.update(inherit.environ)
        fd = inherit.stderr
        assert isinstance(fd, int)
        if fd != 2:
            os.dup2(fd, 2)
            os.close(fd)
    # A terminal's Ctrl-C reaches the whole foreground group, this process too: the sidecar's
    # process stops this one in order over the control pipe (its end closing ends it too), so a
    # SIGINT here is ignored rather than raised mid-case as a KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s[engine]: %(message)s")
    asyncio.run(_Child(ctl, claims, config, tuple(hooks)).run())


class _Child:
    def __init__(self, ctl: Connection, claims: Connection, config: Config, hooks: tuple[FinishHook, ...]) -> None:
        self.ctl = ctl
        self.claims = claims
        self.config = config
        #: This process's own providers: it exports its spans and counters itself.
        self.telemetry = Telemetry.start(config.telemetry, process="engine")
        tally = Tally()
        self.funnel = CountingFunnel(tally)  # the outcomes decided here before a claim, counted too
        self.handoff: Handoff[Claim] = Handoff(max(64, ROOM_PER_WORKER * config.engine.workers))
        resolve = resolver(config, price_book(config))
        self.supervisor = Supervisor(on_fatal=self._fatal)
        self.engine = Engine(
            settings=engine_settings(config, flush_funnel=True),
            open_store=lambda: make_store(config.store.location, lock_timeout_s=config.store.lock_timeout_seconds),
            open_providers=lambda: open_providers(config),
            resolve=resolve,
            routing=RoutingTable(),  # the sidecar's process routes; this one only activates subjects
            funnel=self.funnel,
            handoff=self.handoff,
            hooks=hooks,
            on_progress=self._progress,
            on_done=lambda done_through: self._send(("done", done_through)),
            revoked_subjects_file=config.auth.revoked_subjects_file,
            telemetry=EngineTelemetry(
                tally=tally, tracer=self.telemetry.tracer, sample_ratio=self.telemetry.sample_ratio,
                systems={n: p.kind for n, p in config.providers.items()},
            ),
            supervisor=self.supervisor,
        )
        self.telemetry.observe(lambda: engine_part(self.engine))
        self._send_lock = threading.Lock()
        self._status_due = False
        self.received = 0
        #: Idle requests waiting for claims to arrive (the reader signals arrivals only then).
        self._awaiting = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._arrived: asyncio.Event | None = None
        self._ended: asyncio.Event | None = None

    def _send(self, msg: tuple[Any, ...]) -> None:
        with self._send_lock:
            try:
                self.ctl.send(msg)
            except OSError:  # the sidecar's process is gone; the control loop exits on its EOF
                pass

    def _fatal(self, death: Death) -> None:
        """Logged by the supervisor; what this process held is for the sidecar's next life."""
        os._exit(70)

    def _report(self) -> None:
        """The supervisor's registry to the sidecar's process; read under the send lock, so
        reports from two threads arrive in the order they were read (the last one is current)."""
        with self._send_lock:
            views = [w.view() for w in self.supervisor.workers()]
            try:
                self.ctl.send(("workers", views))
            except OSError:  # the sidecar's process is gone; the control loop exits on its EOF
                pass

    def _progress(self) -> None:
        """On the engine's loop, after each case: report at most every ``STATUS_EVERY_S``
        (a message per case would cost the engine a tenth of its CPU under load; see the constant)."""
        if not self._status_due:
            self._status_due = True
            asyncio.get_running_loop().call_later(STATUS_EVERY_S, self._status)

    def _status(self) -> None:
        self._status_due = False
        self._send(("status", self.engine.in_flight, self.engine.counts()))

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self.supervisor.bind(self._loop)
        self._arrived = asyncio.Event()
        self._ended = asyncio.Event()
        try:
            await self.engine.start()
        except Exception as exc:
            # The sidecar's process reports it, in one line; the traceback only at DEBUG.
            log.debug("the engine could not start", exc_info=True)
            self._send(("failed", f"{type(exc).__name__}: {exc}"))
            await asyncio.to_thread(self.telemetry.shutdown)
            return
        self._send(("hello", self.engine.owner, list(self.engine.recovered)))
        self.supervisor.on_change = self._report  # only after the hello: it is the first message
        # Restarted if it raises (a message is read whole, so the pipe stays in step; the batch
        # it held is lost); its normal end is the pipe's.
        self.supervisor.thread("engine-claims", self._read, UNTIL_DONE)
        while True:
            try:
                msg = await asyncio.to_thread(self.ctl.recv)
            except (EOFError, OSError):
                # The sidecar's process died: a crash. Leave at once; the lease settles our cases.
                log.error("the sidecar process is gone; the engine exits without a drain")
                os._exit(1)
            if msg[0] == "idle":
                asyncio.create_task(self._idle(msg[1], msg[2]))
            elif msg[0] == "stop":
                self.supervisor.stop()
                self.supervisor.on_change = lambda: None  # the "stopped" message is the last
                await self._stop()
                await asyncio.to_thread(self.telemetry.shutdown)  # its last spans and counts
                self._send(("stopped", encode_claims(self.engine.watermark.uncertain()), self.engine.counts()))
                return

    def _read(self) -> None:
        """Claims from the pipe into the engine's hand-off, waiting for room; after the
        hand-off closed, the rest are counted ``shed_stopped`` up to the end marker."""
        loop, arrived, ended = self._loop, self._arrived, self._ended
        assert loop is not None and arrived is not None and ended is not None
        while True:
            try:
                data = self.claims.recv_bytes()
            except (EOFError, OSError):
                break
            if not data:
                break
            batch = decode_claims(data)
            taken = self.handoff.put_many(batch)
            for claim in batch[taken:]:
                self.funnel.add(claim.trial_id, "shed_stopped")
                self.engine.watermark.finished(claim)
            self.received += len(batch)
            if self._awaiting:  # only while an idle request waits: a wake-up per batch cost the engine's CPU
                loop.call_soon_threadsafe(arrived.set)
        loop.call_soon_threadsafe(ended.set)

    async def _idle(self, target: int, token: Any) -> None:
        assert self._arrived is not None
        # Set before ``received`` is read: a batch counted after that read sees it and wakes us.
        self._awaiting += 1
        try:
            while self.received < target:
                self._arrived.clear()
                if self.received >= target:
                    break
                await self._arrived.wait()
        finally:
            self._awaiting -= 1
        await self.engine.idle()
        await self.engine.call(self.engine.flush())
        self._send(("idle", token, self.engine.in_flight, self.engine.counts()))

    async def _stop(self) -> None:
        """Drain within ``engine.drain_seconds``: first let what the sidecar had queued arrive
        (the forwarder ends with the end marker), then stop reading, then stop the engine."""
        assert self._ended is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.engine.drain_seconds
        try:
            await asyncio.wait_for(self._ended.wait(), timeout=self.config.engine.drain_seconds)
        except asyncio.TimeoutError:
            pass
        self.handoff.close()  # the reader counts the rest of the pipe shed_stopped, up to the end marker
        try:
            await asyncio.wait_for(self._ended.wait(), timeout=30)
        except asyncio.TimeoutError:
            log.error("the claim pipe did not end; its unread claims are not counted")
        await self.engine.stop(drain_seconds=max(0.0, deadline - loop.time()))
