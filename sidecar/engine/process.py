"""The engine in a process of its own (``engine.isolation = "process"``, the default).

An engine on a thread shares the tap's GIL: under a full-speed flood the tap's
loop holds it three quarters of the time and the engine judges a fifth of what
it judges alone (``bench/tap.py --phases starvation``). In its own process the
engine has its own interpreter, and the operating system shares the cores.

The seam is the same :class:`~sidecar.engine.engine.Claim` the tap hands any
sink. This side (in the sidecar's process) keeps the tap's bounded
:class:`~sidecar.ingest.handoff.Handoff`, the one place where claims are shed
and counted; a forwarder thread takes batches from it and writes them to a
pipe (msgpack). In the engine's process (:mod:`sidecar.engine.child`) a reader
puts them into the engine's own small hand-off, *waiting* for room, so a busy
engine stops reading, the pipe fills, the forwarder waits, and the tap's
hand-off fills and sheds — backpressure, nothing unbounded, nothing lost.

The engine's process opens its own store connection and provider clients from
the config, writes its funnel counts itself, and reports on a control pipe:
its owner id at start, its in-flight count and its counters (what
:meth:`counts` gives the Prometheus endpoint: the outcomes it decided,
judgments, provider calls) as cases finish, idleness when asked, and the end of
its drain. It exports its own traces and metrics over OTLP when configured
(docs/telemetry.md). If the sidecar's process dies, the engine's
process sees the pipe close and exits at once, without a drain: its cases are
left to its lease, as for any crash. If the engine's process dies, this side
logs it, counts every claim it cannot forward ``shed_stopped``, and the
runtime reports not ready, so an orchestrator restarts the pod.

Supervision (:mod:`sidecar.supervise`): the engine's process exiting unbidden is a fatal
death (``engine-process``): its cases, lease and pipe are gone, and a fresh sidecar recovers
them; so is the listening thread dying (the control pipe's state is then unknown). The
forwarding thread (``engine-forward``) is restarted after a backoff if it raises: the
claims it held are counted ``shed_stopped``, the rest wait in the hand-off. The engine's
process supervises its own workers and reports them here (``engine-process:<name>`` on
``/readyz``).

How the engine's process starts (:func:`use_start_method`): by default a fresh interpreter
(``spawn``), which imports the engine first (about 0.75 s of CPU). A program that starts many
engines (the test suite) may choose ``forkserver``: one warm, single-threaded server process
imports the engine's modules once, and each engine's process is forked from it. Never ``fork``:
the sidecar's process runs threads and an event loop by then, and a fork would copy their locks,
its store connections and its loop into the child.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import threading
from multiprocessing.connection import Connection
import os
from typing import Any, Callable, Literal, Sequence


from sidecar.config import Config
from sidecar.engine.pipe import END, decode_claims, encode_claims
from sidecar.ingest.claims import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.engine.subjects import FinishHook
from sidecar.ingest.funnel import FunnelCounter
from sidecar.supervise import UNTIL_DONE, Policy, Supervisor

log = logging.getLogger("shadowtrial.engine")

#: Claims per message on the pipe.
BATCH = 64
#: How long the engine's process may take to open its store and report in.
START_TIMEOUT_S = 60.0

#: What the server process of ``forkserver`` imports once (the engine's process's entry and,
#: through it, the engine, its store, its provider clients and its telemetry).
PRELOAD = ("sidecar.engine.child",)

StartMethod = Literal["spawn", "forkserver"]
_start_method: StartMethod = "spawn"


def use_start_method(method: StartMethod) -> None:
    """How every later :meth:`EngineProcess.start` in this process starts the engine's process.

    ``spawn`` (the default): a fresh interpreter each time. ``forkserver``: multiprocessing's
    fork server, started with the first engine, imports :data:`PRELOAD` once and forks each
    engine's process from there; the engine's process still gets this process's environment,
    working directory and standard error as they are at its start, as with ``spawn``. Either
    way it is a separate process: its death closes its pipes, which this side notices."""
    global _start_method
    if method not in ("spawn", "forkserver"):
        raise ValueError(f"unknown start method {method!r}: spawn or forkserver")
    if method == "forkserver":
        mp.get_context("forkserver").set_forkserver_preload(list(PRELOAD))
    _start_method = method


def start_method() -> StartMethod:
    return _start_method


class EngineStartError(RuntimeError):
    """The engine's process could not start (its message says why)."""


class EngineProcess:
    """The sidecar's handle on the engine's process; the same surface as
    :class:`~sidecar.engine.engine.Engine` offers the runtime."""

    def __init__(
        self,
        config: Config,
        *,
        handoff: Handoff[Claim],
        funnel: FunnelCounter,
        hooks: Sequence[FinishHook] = (),
        on_progress: Callable[[], None] = lambda: None,
        on_exit: Callable[[], None] = lambda: None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.config = config
        self.supervisor = supervisor or Supervisor()
        #: The batch the forwarding thread holds (counted if it dies with it).
        self._sending: Sequence[Claim] = ()
        self.handoff = handoff
        self.funnel = funnel
        self.hooks = tuple(hooks)
        self.on_progress = on_progress
        self.on_exit = on_exit
        self.owner = ""
        self.recovered: list[str] = []
        #: As the engine's process last reported them.
        self.in_flight = 0
        self.done_through = 0
        self._counts: dict[str, int] = {}
        #: After a stop: claims the engine's process had in hand when its drain deadline
        #: passed, and whether its last counts reached the store (see :mod:`sidecar.engine.watermark`).
        self.uncertain: list[Claim] = []
        self.stopped_clean = False
        self.alive = False
        self._proc: Any = None
        self._ctl: Connection | None = None
        self._claims: Connection | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiters: dict[Any, asyncio.Future[None]] = {}
        self._tokens = itertools.count()
        self._threads: list[threading.Thread] = []
        self._stopping = False

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else int(self._proc.pid)

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        from sidecar.engine import child

        method = _start_method
        # Never fork a process that runs threads and an event loop (see the module's text).
        ctx = mp.get_context("forkserver") if method == "forkserver" else mp.get_context("spawn")
        claims_in, self._claims = ctx.Pipe(duplex=False)
        self._ctl, child_ctl = ctx.Pipe()
        level = logging.getLogger().getEffectiveLevel()
        # A spawned process inherits them at its start; one forked from the server has the server's.
        inherit = None if method == "spawn" else child.Inherited(
            environ=dict(os.environ), stderr=child.ParentStderr())
        self._proc = ctx.Process(
            target=child.main, args=(child_ctl, claims_in, self.config, self.hooks, level, inherit),
            name="shadowtrial-engine", daemon=True,
        )
        self._proc.start()
        child_ctl.close()  # only the child holds its ends, so each side sees the other's exit as EOF
        claims_in.close()
        hello = await asyncio.to_thread(self._hello)
        if hello[0] != "hello":
            await asyncio.to_thread(self._proc.join, 10)
            raise EngineStartError(f"the engine process did not start: {hello[1]}")
        _, self.owner, self.recovered = hello
        self.alive = True
        self._loop = asyncio.get_running_loop()
        sup = self.supervisor
        self._threads = [
            # It ends when the engine's process does (reported as ``engine-process``); raising is fatal.
            sup.thread("engine-listen", self._listen, Policy("exit", forever=False), on_death=self._listen_died),
            sup.thread("engine-forward", lambda: asyncio.run(self._forward()), UNTIL_DONE,
                       on_death=self._forward_died),
        ]

    def _hello(self) -> tuple[Any, ...]:
        assert self._ctl is not None
        try:
            if not self._ctl.poll(START_TIMEOUT_S):
                self._proc.kill()
                return ("failed", f"no word within {START_TIMEOUT_S:g} s")
            msg: tuple[Any, ...] = self._ctl.recv()
            return msg
        except (EOFError, OSError):
            return ("failed", f"it exited with code {self._proc.exitcode}; see its log above")

    async def stop(self) -> None:
        """Close the hand-off (the forwarder sends what is queued, then the end), let the
        engine's process drain within ``engine.drain_seconds`` and stop, then join it."""
        if self._proc is None:
            return
        self._stopping = True
        self.handoff.close()
        forward = self.supervisor.worker("engine-forward")
        if forward is not None and forward.state != "running" and self._claims is not None:
            # Its thread died and waits for a restart the stop cancels: end the pipe in its place,
            # so the engine's process drains at once (what it left queued is counted below).
            try:
                self._claims.send_bytes(END)
            except OSError:
                pass
            self._claims.close()
        if self.alive:
            try:
                await asyncio.wait_for(self._ask(("stop",), "stopped"), timeout=self.config.engine.drain_seconds + 30)
            except (asyncio.TimeoutError, EngineGone):
                log.error("the engine process did not confirm its stop; ending it")
        await asyncio.to_thread(self._proc.join, 10)
        if self._proc.is_alive():
            self._proc.kill()
            await asyncio.to_thread(self._proc.join, 5)
        for t in self._threads:
            await asyncio.to_thread(t.join, 10)
        for claim in self.handoff.drain_remaining():  # only if the forwarder could not finish
            self.funnel.add(claim.trial_id, "shed_stopped")
        self._proc = None

    def counts(self) -> dict[str, int]:
        """The engine process's counters as it last reported them (monotonic totals; a
        report replaces the previous one, so a lost or late one loses nothing)."""
        return self._counts

    async def idle(self) -> None:
        """Until everything offered so far has reached the engine's process and finished there,
        and its funnel counts are written."""
        await self._ask(("idle", self.handoff.accepted), next(self._tokens))

    # -- the two threads -------------------------------------------------------

    async def _forward(self) -> None:
        """Move claims from the tap's hand-off to the pipe, in batches; ``END`` once it closed."""
        assert self._claims is not None
        self.handoff.attach(asyncio.get_running_loop())
        broken = False
        while batch := await self.handoff.take_many(BATCH):
            self._sending = batch
            if not broken:
                try:
                    self._claims.send_bytes(encode_claims(batch))  # waits while the engine is full
                    self._sending = ()
                    continue
                except OSError:
                    broken = True
                    log.error("the engine process is gone; claims are counted shed_stopped")
            for claim in batch:
                self.funnel.add(claim.trial_id, "shed_stopped")
            self._sending = ()
        if not broken:
            try:
                self._claims.send_bytes(END)
            except OSError:
                pass
        self._claims.close()

    def _forward_died(self) -> None:
        """The forwarding thread died holding a batch: its claims get their one outcome."""
        held, self._sending = self._sending, ()
        for claim in held:
            self.funnel.add(claim.trial_id, "shed_stopped")

    def _listen_died(self) -> None:
        """The listening thread raised: nobody reads the control pipe any more. Close it, so
        the engine's process sees the end and exits, and a stop does not wait for its answer."""
        self.alive = False
        if self._ctl is not None:
            self._ctl.close()
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._fail_waiters)

    def _listen(self) -> None:
        assert self._ctl is not None
        while True:
            try:
                msg = self._ctl.recv()
            except (EOFError, OSError):
                break
            if msg[0] == "status":  # ("status", in_flight, counts)
                self.in_flight = msg[1]
                self._counts = msg[2]
                self.on_progress()
            elif msg[0] == "done":
                self.done_through = msg[1]
            elif msg[0] == "workers":  # ("workers", views): the engine process's supervisor
                self.supervisor.adopt("engine-process:", msg[1])
            elif msg[0] == "idle":  # ("idle", token, in_flight, counts)
                self.in_flight = msg[2]
                self._counts = msg[3]
                self._settle(msg[1])
            else:  # ("stopped", uncertain claims, counts)
                self.uncertain = decode_claims(msg[1])
                self._counts = msg[2]
                self.stopped_clean = True
                self._settle("stopped")
        self.alive = False
        if not self._stopping:
            self._proc.join(1)  # its exit code, when it has one
            self.supervisor.died("engine-process", f"exited with code {self._proc.exitcode}")
            self.handoff.close()  # the forwarder counts what is left
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._fail_waiters)
            loop.call_soon_threadsafe(self.on_exit)

    # -- requests on the control pipe --------------------------------------------

    async def _ask(self, msg: tuple[Any, ...], key: Any) -> None:
        if not self.alive:
            raise EngineGone("the engine process is not running")
        assert self._ctl is not None
        fut = asyncio.get_running_loop().create_future()
        self._waiters[key] = fut
        try:
            self._ctl.send(msg + ((key,) if msg[0] == "idle" else ()))
            await fut
        finally:
            self._waiters.pop(key, None)

    def _settle(self, key: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def done() -> None:
            fut = self._waiters.get(key)
            if fut is not None and not fut.done():
                fut.set_result(None)

        loop.call_soon_threadsafe(done)

    def _fail_waiters(self) -> None:
        for fut in self._waiters.values():
            if not fut.done():
                fut.set_exception(EngineGone("the engine process exited"))


class EngineGone(RuntimeError):
    """The engine's process exited while a request was waiting on it."""
