"""The bounded hand-off from the tap's event loop to the engine's.

The shape of OpenTelemetry's batch span processor: producers on any thread
call :meth:`Handoff.offer_many`, which never waits — it takes the lock for a
few list operations and, only when the consumer is asleep, schedules one
wake-up on the consumer's loop (one per batch, not per item). When the queue
is full the *newest* items are refused: the offer returns how many it took
and the caller counts the rest ``shed_queue_full``, so work that already
waited keeps its place and the tap answers at once whatever the engine's pace.

:meth:`take` runs on the consumer's loop only (the one given to
:meth:`attach`). :meth:`close` stops accepting; :meth:`drain_remaining`
hands back what nobody took, so the caller counts it (``shed_stopped``)
instead of losing it. ``depth`` is safe to read from any thread.

Two more ends serve the engine in its own process (:mod:`sidecar.engine.process`):
:meth:`take_many` lets a forwarder take batches and learn that the queue closed,
and :meth:`put_many` lets the engine process's reader wait for room instead of
shedding, so backpressure travels back through the pipe to the tap's hand-off,
the one place where claims are shed and counted.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from typing import Generic, Sequence, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    def __init__(self, maxsize: int) -> None:
        if maxsize <= 0:
            raise ValueError("queue size must be positive")
        self.maxsize = maxsize
        self._items: deque[T] = deque()
        self._lock = threading.Lock()
        self._closed = False
        self._sleeping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready: asyncio.Event | None = None
        self._room = threading.Condition(self._lock)
        #: How many items were ever accepted (any thread may read it).
        self.accepted = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Bind the consumer side to ``loop``; call on that loop before :meth:`take`."""
        self._loop = loop
        self._ready = asyncio.Event()

    def offer_many(self, items: Sequence[T]) -> int:
        """Enqueue as many of ``items`` as fit, in order; never blocks. Returns how many."""
        with self._lock:
            if self._closed:
                return 0
            room = self.maxsize - len(self._items)
            taken = items if len(items) <= room else items[: max(room, 0)]
            self._items.extend(taken)
            self.accepted += len(taken)
            wake = self._sleeping and bool(taken)
            if wake:
                self._sleeping = False
        if wake:
            self._wake()
        return len(taken)

    def put_many(self, items: Sequence[T]) -> int:
        """Enqueue all of ``items``, waiting (this thread) for room; for a producer that must not
        shed because backpressure is its job (the engine process's reader). Returns how many
        went in before :meth:`close`; the caller counts the rest."""
        done = 0
        while done < len(items):
            with self._room:
                # Wake for half the queue at a time, not per item: one thread switch per batch.
                while not self._closed and len(self._items) > self.maxsize // 2:
                    self._room.wait()
                if self._closed:
                    return done
            done += self.offer_many(items[done:])
        return done

    def _wake(self) -> None:
        if self._loop is not None and self._ready is not None:
            try:
                self._loop.call_soon_threadsafe(self._ready.set)
            except RuntimeError:  # the consumer's loop closed meanwhile; drain_remaining counts the items
                pass

    def offer(self, item: T) -> bool:
        return self.offer_many((item,)) == 1

    async def take(self) -> T:
        """The oldest item; waits (on the consumer's loop) while the queue is empty."""
        assert self._ready is not None, "attach() the consumer loop first"
        while True:
            with self._lock:
                if self._items:
                    if len(self._items) == self.maxsize // 2 + 1:
                        self._room.notify()
                    return self._items.popleft()
                self._sleeping = True
                self._ready.clear()
            await self._ready.wait()

    async def take_many(self, limit: int) -> list[T]:
        """Up to ``limit`` of the oldest items, waiting while the queue is empty; ``[]`` once it is
        closed and empty (a forwarder's signal to finish)."""
        assert self._ready is not None, "attach() the consumer loop first"
        while True:
            with self._lock:
                if self._items:
                    n = min(limit, len(self._items))
                    out = [self._items.popleft() for _ in range(n)]
                    self._room.notify_all()
                    return out
                if self._closed:
                    return []
                self._sleeping = True
                self._ready.clear()
            await self._ready.wait()

    @property
    def depth(self) -> int:
        return len(self._items)

    def oldest_seq(self) -> int | None:
        """The journal number of the oldest queued item (items with a ``seq``), or None."""
        with self._lock:
            return getattr(self._items[0], "seq", None) if self._items else None

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop accepting; wake a waiting producer (:meth:`put_many`) and a sleeping consumer."""
        with self._lock:
            self._closed = True
            wake = self._sleeping
            self._sleeping = False
            self._room.notify_all()
        if wake:
            self._wake()

    def drain_remaining(self) -> list[T]:
        with self._lock:
            out = list(self._items)
            self._items.clear()
        return out
