"""The bounded intake queue between the tap and the engine.

``offer`` never waits: when the queue is full the *newest* item is shed (the
offer returns False and the caller counts ``shed_queue_full``), so work that
already waited keeps its place and the tap answers at once whatever the
engine's pace. Depth is readable at any time for gauges.

``close`` stops accepting; ``drain_remaining`` hands back what nobody took, so
the caller can count it (``shed_stopped``) instead of losing it silently.
"""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

T = TypeVar("T")


class Intake(Generic[T]):
    def __init__(self, maxsize: int) -> None:
        if maxsize <= 0:
            raise ValueError("queue size must be positive")
        self._queue: asyncio.Queue[T] = asyncio.Queue(maxsize)
        self._closed = False
        self.maxsize = maxsize

    def offer(self, item: T) -> bool:
        """Enqueue ``item`` if there is room and the queue is open; never blocks."""
        if self._closed:
            return False
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            return False
        return True

    async def take(self) -> T:
        return await self._queue.get()

    def done(self) -> None:
        self._queue.task_done()

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def close(self) -> None:
        self._closed = True

    async def join(self) -> None:
        await self._queue.join()

    def drain_remaining(self) -> list[T]:
        out: list[T] = []
        while True:
            try:
                out.append(self._queue.get_nowait())
            except asyncio.QueueEmpty:
                return out
            self._queue.task_done()
