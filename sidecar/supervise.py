"""Supervised workers: no background task or thread of a process dies silently.

Every long-lived worker of the sidecar and of the collector (its loops, its threads, the
engine's process) is started through a :class:`Supervisor` under a name and a
:class:`Policy`, never with a bare ``asyncio.create_task`` or ``threading.Thread``. The
supervisor keeps a registry of them that ``/readyz`` reads (:mod:`sidecar.api.health`).

When a worker ends unexpectedly — it raises, or it returns while it should run until its
owner stops it, or (reported with :meth:`Supervisor.died`) the engine's process exits — the
supervisor:

1. logs it **once**, at ERROR, with its name, the exception's *type* and the place it was
   raised (file, line, function): never the message, which may echo a prompt or a token;
2. marks it down in the registry, so ``/readyz`` answers 503 naming it;
3. then, by the worker's policy, either restarts it in place after a backoff
   (:data:`RESTART`: first ``Backoff.first_s``, doubling up to ``cap_s``; ready again once
   it runs) or leaves it dead and calls ``on_fatal`` (:data:`EXIT`), on which the process
   stops in order and exits non-zero so the orchestrator restarts it.

Which policy a worker gets is said where it is started. The rule: restart when the worker
keeps no state a death could have corrupted (a loop that reads its work from the store or a
queue again); exit when its death loses state only a fresh process rebuilds correctly (the
engine's process or loop holds leases, in-flight cases and connections; recovery on start
and the intake journal are the tested way back).

An end after :attr:`Supervisor.stopping` is set (the owner is shutting down), or a
cancellation, is expected: nothing is logged or restarted. A worker with ``forever=False``
(a replay's feeder) may also return when its work is done.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Coroutine, Literal

log = logging.getLogger("shadowtrial.supervise")

Action = Literal["restart", "exit"]
State = Literal["running", "restarting", "failed", "done", "stopped"]


@dataclass(frozen=True)
class Policy:
    """What follows a worker's unexpected end: ``restart`` it after a backoff, or ``exit``
    (the process stops and exits non-zero). ``forever=False``: returning is its normal end."""

    action: Action
    forever: bool = True


RESTART = Policy("restart")
EXIT = Policy("exit")
#: A worker whose return is its normal end (a replay's feeder), restarted if it raises.
UNTIL_DONE = Policy("restart", forever=False)


@dataclass(frozen=True)
class Backoff:
    """The wait before the n-th restart in a row: ``min(cap_s, first_s * 2**(n-1))``. A worker
    that ran longer than ``cap_s`` before dying starts again from ``first_s``."""

    first_s: float = 0.5
    cap_s: float = 30.0

    def delay(self, attempt: int) -> float:
        return min(self.cap_s, self.first_s * float(2 ** min(max(attempt - 1, 0), 30)))


@dataclass(frozen=True)
class Death:
    """One unexpected end, as logged and shown: content-free."""

    worker: str
    #: The exception's type name, ``returned``, or ``exited with code N``.
    error: str
    #: ``sidecar/engine/process.py:62 in encode_claims`` (the innermost frame), or "".
    place: str
    at: float
    action: Action


@dataclass
class Worker:
    """A registry entry (read under the supervisor's lock; copies are handed out)."""

    name: str
    policy: Policy
    state: State = "running"
    restarts: int = 0
    last: Death | None = None

    def view(self) -> dict[str, Any]:
        last = self.last
        return {
            "name": self.name, "state": self.state, "policy": self.policy.action, "restarts": self.restarts,
            "error": None if last is None else last.error, "place": None if last is None else last.place,
        }


def place_of(exc: BaseException) -> str:
    """Where ``exc`` was raised: file (from the package folder on), line and function."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if not frames:
        return ""
    last = frames[-1]
    parts = last.filename.replace(os.sep, "/").split("/")
    roots = [i for i, part in enumerate(parts) if part in ("sidecar", "uplink", "judge", "policies", "tests")]
    parts = parts[roots[0]:] if roots else parts[-1:]
    return f"{'/'.join(parts)}:{last.lineno} in {last.name}"


class Supervisor:
    """The registry and the starter of one process's workers (see the module's docs).

    Thread-safe: workers run on the main loop, on the engine's loop and on threads; each
    restarts where it ran. ``on_fatal`` is called once, with the first fatal death, on the
    loop :meth:`bind` named (else on the dying worker's thread)."""

    def __init__(
        self, *, on_fatal: Callable[[Death], None] = lambda death: None, backoff: Backoff = Backoff(),
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.on_fatal = on_fatal
        self.backoff = backoff
        self.clock = clock
        self._lock = threading.Lock()
        self._workers: dict[str, Worker] = {}
        #: Every unexpected end so far, oldest first (the last 100).
        self.deaths: list[Death] = []
        self.fatal: Death | None = None
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        #: Called (from any thread) after each change of the registry; the engine's process
        #: reports its workers to the sidecar's with it.
        self.on_change: Callable[[], None] = lambda: None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop ``on_fatal`` runs on (the owner's)."""
        self._loop = loop

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def stop(self) -> None:
        """The owner is shutting down: every end from now on is expected (and a thread's
        backoff wait ends at once)."""
        self._stopping.set()

    # -- the registry ------------------------------------------------------------

    def workers(self) -> list[Worker]:
        with self._lock:
            return [dataclasses.replace(w) for w in self._workers.values()]

    def down(self) -> list[Worker]:
        """Workers that died and are not running again (restarting, or failed for good)."""
        return [w for w in self.workers() if w.state in ("restarting", "failed")]

    def worker(self, name: str) -> Worker | None:
        with self._lock:
            w = self._workers.get(name)
            return None if w is None else dataclasses.replace(w)

    def _register(self, name: str, policy: Policy) -> Worker:
        with self._lock:
            w = self._workers.get(name)
            if w is None:
                w = self._workers[name] = Worker(name, policy)
            else:  # started again by its owner (a second start): a fresh life
                w.policy, w.state = policy, "running"
        self.on_change()
        return w

    def _set(self, w: Worker, state: State, *, restarted: bool = False) -> None:
        with self._lock:
            w.state = state
            if restarted:
                w.restarts += 1
        self.on_change()

    def adopt(self, prefix: str, views: list[dict[str, Any]]) -> None:
        """Take the registry another process reported (the engine's) under ``prefix``: its
        workers show on this process's ``/readyz``; it restarts them itself."""
        with self._lock:
            for name in [n for n in self._workers if n.startswith(prefix)]:
                del self._workers[name]
            for v in views:
                w = Worker(prefix + v["name"], Policy(v["policy"]), v["state"], v["restarts"])
                if v["error"] is not None:
                    w.last = Death(w.name, v["error"], v["place"] or "", self.clock(), w.policy.action)
                self._workers[w.name] = w

    # -- deaths --------------------------------------------------------------------

    def died(self, name: str, error: str, *, place: str = "", policy: Policy = EXIT) -> Death | None:
        """Report an unexpected end seen from outside the worker (the engine's process exited).
        Returns the death, or None when the owner is stopping (expected)."""
        with self._lock:
            w = self._workers.get(name)
            if w is None:
                w = self._workers[name] = Worker(name, policy)
        return self._record(w, error, place)

    def _record(self, w: Worker, error: str, place: str) -> Death | None:
        if self.stopping:
            self._set(w, "stopped")
            return None
        death = Death(w.name, error, place, self.clock(), w.policy.action)
        first_fatal = False
        with self._lock:
            w.last = death
            w.state = "restarting" if death.action == "restart" else "failed"
            self.deaths = [*self.deaths[-99:], death]
            if death.action == "exit" and self.fatal is None:
                self.fatal = first_fatal = death  # type: ignore[assignment]
        where = f" at {place}" if place else ""
        if death.action == "restart":
            log.error("worker %s died (%s%s); it is restarted after a backoff", w.name, error, where)
        else:
            log.error("worker %s died (%s%s); this process stops and exits non-zero so it is restarted",
                      w.name, error, where)
        self.on_change()
        if first_fatal:
            loop = self._loop
            if loop is not None and not loop.is_closed():
                try:
                    loop.call_soon_threadsafe(self.on_fatal, death)
                except RuntimeError:  # the loop closed meanwhile: the process is ending anyway
                    pass
            else:
                self.on_fatal(death)
        return death

    def _ended(self, w: Worker, exc: BaseException | None, expected: bool = False) -> Death | None:
        """A worker's run ended (``exc``: what it raised; None: it returned). The death, or None
        when the end was expected."""
        if exc is None:
            if not w.policy.forever or self.stopping or expected:
                self._set(w, "done" if not self.stopping else "stopped")
                return None
            return self._record(w, "returned", "")
        return self._record(w, type(exc).__name__, place_of(exc))

    # -- starting workers ------------------------------------------------------------

    def task(
        self, name: str, factory: Callable[[], Coroutine[Any, Any, None]], policy: Policy = RESTART, *,
        expected_end: Callable[[], bool] = lambda: False, on_death: Callable[[], None] | None = None,
    ) -> asyncio.Task[None]:
        """Run ``factory()`` as a task on the running loop, supervised. The task is the
        owner's to cancel (a cancellation is a stop); a restart calls ``factory`` again in
        the same task. ``expected_end``: true when a return now is the owner's doing;
        ``on_death``: as for :meth:`thread`."""
        w = self._register(name, policy)
        keep = self._keep(w, factory, expected_end, on_death)
        return asyncio.get_running_loop().create_task(keep, name=f"shadowtrial-{name}")

    def _clean_up(self, w: Worker, on_death: Callable[[], None] | None) -> None:
        if on_death is None:
            return
        try:
            on_death()
        except Exception as exc:
            log.error("worker %s: its clean-up failed too (%s at %s)", w.name, type(exc).__name__, place_of(exc))

    async def _keep(
        self, w: Worker, factory: Callable[[], Coroutine[Any, Any, None]], expected_end: Callable[[], bool],
        on_death: Callable[[], None] | None,
    ) -> None:
        attempt = 0
        while True:
            began = time.monotonic()
            try:
                await factory()
                death = self._ended(w, None, expected_end())
            except asyncio.CancelledError:
                self._set(w, "stopped")
                raise
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as exc:
                death = self._ended(w, exc)
            if death is not None:
                self._clean_up(w, on_death)
            if death is None or death.action == "exit":
                return
            attempt = 1 if time.monotonic() - began > self.backoff.cap_s else attempt + 1
            try:
                await asyncio.sleep(self.backoff.delay(attempt))
            except asyncio.CancelledError:  # a stop during the backoff
                self._set(w, "stopped")
                raise
            self._set(w, "running", restarted=True)

    def thread(
        self, name: str, target: Callable[[], None], policy: Policy = RESTART, *,
        on_death: Callable[[], None] | None = None, expected_end: Callable[[], bool] = lambda: False,
    ) -> threading.Thread:
        """Start ``target`` on a daemon thread, supervised; a restart runs ``target`` again on
        the same thread. ``on_death`` runs on that thread after an unexpected end, before the
        restart or the exit (e.g. to count the claims the worker held); ``expected_end``: as
        for :meth:`task`."""
        w = self._register(name, policy)

        def main() -> None:
            attempt = 0
            while True:
                began = time.monotonic()
                try:
                    target()
                    death = self._ended(w, None, expected_end())
                except BaseException as exc:  # a thread has nobody else to tell
                    death = self._ended(w, exc)
                if death is not None:
                    self._clean_up(w, on_death)
                if death is None or death.action == "exit":
                    return
                attempt = 1 if time.monotonic() - began > self.backoff.cap_s else attempt + 1
                if self._stopping.wait(self.backoff.delay(attempt)):
                    self._set(w, "stopped")
                    return
                self._set(w, "running", restarted=True)

        thread = threading.Thread(target=main, name=f"shadowtrial-{name}", daemon=True)
        thread.start()
        return thread
