"""The engine in a process of its own (``engine.isolation = "process"``, the default).

An engine on a thread shares the tap's GIL: under a full-speed flood the tap's
loop holds it three quarters of the time and the engine judges a fifth of what
it judges alone (``bench/tap.py --phases starvation``). In its own process the
engine has its own interpreter, and the operating system shares the cores.

The seam is the same :class:`~sidecar.engine.engine.Claim` the tap hands any
sink. This side (in the sidecar's process) keeps the tap's bounded
:class:`~sidecar.engine.handoff.Handoff`, the one place where claims are shed
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
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing as mp
import threading
from multiprocessing.connection import Connection
from typing import Any, Callable, Sequence

import msgspec

from sidecar.config import Config
from sidecar.engine.engine import Claim
from sidecar.engine.handoff import Handoff
from sidecar.engine.subjects import FinishHook
from sidecar.ingest import wide_ints
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.wire import Exchange

log = logging.getLogger("shadowtrial.engine")

#: Claims per message on the pipe.
BATCH = 64
#: How long the engine's process may take to open its store and report in.
START_TIMEOUT_S = 60.0

ENCODER = msgspec.msgpack.Encoder()
DECODER = msgspec.msgpack.Decoder(list[tuple[int, str, Exchange, bool]], ext_hook=wide_ints.ext_hook)
#: The forwarder's last message: everything queued has been sent.
END = b""


def encode_claims(claims: Sequence[Claim]) -> bytes:
    """The claims as one pipe message. An integer wider than msgpack's 64 bits (JSON has no
    bound; ``"seed": 2**64`` is valid) travels as an extension value (:mod:`sidecar.ingest.wide_ints`)."""
    return wide_ints.encode(ENCODER.encode, [(c.seq, c.trial_id, c.exchange, c.content_kept) for c in claims], 2)


def decode_claims(data: bytes) -> list[Claim]:
    return [Claim(t, ex, seq, kept) for seq, t, ex, kept in DECODER.decode(data)]


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
    ) -> None:
        self.config = config
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

        ctx = mp.get_context("spawn")  # never fork a process that runs threads and an event loop
        claims_in, self._claims = ctx.Pipe(duplex=False)
        self._ctl, child_ctl = ctx.Pipe()
        level = logging.getLogger().getEffectiveLevel()
        self._proc = ctx.Process(
            target=child.main, args=(child_ctl, claims_in, self.config, self.hooks, level),
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
        self._threads = [
            threading.Thread(target=self._listen, name="shadowtrial-engine-listen", daemon=True),
            threading.Thread(target=lambda: asyncio.run(self._forward()), name="shadowtrial-forward", daemon=True),
        ]
        for t in self._threads:
            t.start()

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
            if not broken:
                try:
                    self._claims.send_bytes(encode_claims(batch))  # waits while the engine is full
                    continue
                except OSError:
                    broken = True
                    log.error("the engine process is gone; claims are counted shed_stopped")
            for claim in batch:
                self.funnel.add(claim.trial_id, "shed_stopped")
        if not broken:
            try:
                self._claims.send_bytes(END)
            except OSError:
                pass
        self._claims.close()

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
            log.error("the engine process exited (code %s); this sidecar is not ready", self._proc.exitcode)
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
