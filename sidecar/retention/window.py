"""The retention window's writer: served exchanges kept, sealed, off the serving path.

The tap calls :meth:`RetentionWindow.offer` with every exchange it decoded; ``offer``
never awaits and never blocks: it appends to a bounded buffer and returns. When the
buffer holds ``retention.buffer_size`` exchanges the *newest* are shed (the buffer keeps
what already waited) and counted ``retention_shed_buffer_full``. A writer task on the same
loop takes batches of ``retention.batch_size``; drops the exchanges of teams whose prompt
retention is off (``retention_skipped_retention_off``: nothing of them is written
anywhere) and redacted ones; seals the rest on a worker thread
(:class:`~sidecar.seal.Sealer`); and writes them with the window's bounds in one
store transaction, which evicts the oldest (counted by reason: ``evicted_age``,
``evicted_count``, ``evicted_bytes``). A failed write drops its batch, counted
``retention_write_failed``; the window is a convenience for replay, never a reason to fail.

Eviction by age does not wait for traffic: when no batch was written for
:func:`sweep_interval` (a tenth of ``window_seconds``, between ``SWEEP_MIN_S`` and
``SWEEP_MAX_S``), the writer evicts on its own, so a quiet sidecar keeps nothing much past
its window (issue 21, item 12). Expiry is read on the injected clock against ``kept_at``;
replay selection applies the same bound (:meth:`RetentionWindow.keep_after`), so an expired
exchange is never replayed even before the sweep removes it.

A team's retention is read from its stored posture (else ``[teams]``), at most every
``POSTURE_TTL_S`` per team; when it is (or turns) off, whatever the window holds of that team
is forgotten at once (``PUT /v1/teams/{team}/posture`` forgets it too, when it turns it off). :meth:`stop` drains within a deadline; what is still buffered
then is counted ``retention_shed_buffer_full``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from datetime import datetime, timezone
from typing import Callable, Sequence

import msgspec

from sidecar.config import RetentionConfig
from sidecar.ingest.wire import Exchange
from sidecar.redact import describe
from sidecar.seal import Sealer
from sidecar.store.base import Store
from sidecar.store.records import RetainedExchange, RetainResult
from sidecar.supervise import RESTART, Supervisor
from sidecar.telemetry.counters import TapCounters

log = logging.getLogger("shadowtrial.retention")

#: How long a team's retention setting is trusted before the store is read again.
POSTURE_TTL_S = 2.0
#: Bounds of the pause between two evictions by age when no batch is written.
SWEEP_MIN_S = 0.1
SWEEP_MAX_S = 60.0


def sweep_interval(window_seconds: float) -> float:
    """How long an idle writer waits between evictions: an exchange outlives its window by at
    most this (a tenth of the window, at least ``SWEEP_MIN_S``, at most ``SWEEP_MAX_S``)."""
    return min(SWEEP_MAX_S, max(SWEEP_MIN_S, window_seconds / 10))

_encode = msgspec.json.Encoder().encode


def served_epoch(exchange: Exchange, default: float) -> float:
    """The exchange's ``served_at`` in epoch seconds (UTC when it has no offset), else ``default``."""
    if not exchange.served_at:
        return default
    try:
        when = datetime.fromisoformat(exchange.served_at)
    except ValueError:
        return default
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return when.timestamp()


class RetentionWindow:
    """See the module's docstring. Bound to the loop :meth:`start` runs on (the tap's)."""

    def __init__(
        self,
        config: RetentionConfig,
        sealer: Sealer,
        store: Store,
        counters: TapCounters,
        *,
        default_retention: Callable[[str], bool],
        clock: Callable[[], float] = time.time,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.config = config
        self._supervisor = supervisor or Supervisor()
        self.sealer = sealer
        self._store = store
        self._counters = counters
        self._default = default_retention
        self._clock = clock
        self._buffer: deque[tuple[Exchange, float]] = deque()
        self._wake = asyncio.Event()
        self._busy = False
        self._task: asyncio.Task[None] | None = None
        self._cache: dict[str, tuple[bool, float]] = {}
        self._sweep_s = sweep_interval(config.window_seconds)
        #: When (monotonic) the window was last evicted by age, by a write or a sweep.
        self._evicted_at = time.monotonic()

    @property
    def depth(self) -> int:
        return len(self._buffer)

    def keep_after(self) -> float:
        """The window's age bound now: exchanges kept before it have expired."""
        return self._clock() - self.config.window_seconds

    def offer(self, exchanges: Sequence[Exchange]) -> int:
        """Buffer ``exchanges`` for the writer; never waits. Returns how many were taken."""
        room = self.config.buffer_size - len(self._buffer)
        taken = exchanges if len(exchanges) <= room else exchanges[: max(room, 0)]
        if len(taken) < len(exchanges):
            self._counters.retention_shed_buffer_full += len(exchanges) - len(taken)
        if taken:
            now = self._clock()
            self._buffer.extend((ex, now) for ex in taken)
            self._wake.set()
        return len(taken)

    def start(self) -> None:
        # Restarted if it dies: what it had not taken stays buffered (a batch in hand is lost).
        self._task = self._supervisor.task("retention-writer", self._run, RESTART)

    async def stop(self, deadline_s: float = 5.0) -> None:
        """Write what is buffered within ``deadline_s``; count the rest shed."""
        try:
            await asyncio.wait_for(self.idle(), timeout=deadline_s)
        except asyncio.TimeoutError:
            pass
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._buffer:
            self._counters.retention_shed_buffer_full += len(self._buffer)
            self._buffer.clear()

    async def idle(self) -> None:
        """Until nothing is buffered and no batch is being written (poll; tests and stop)."""
        while self._buffer or self._busy:
            await asyncio.sleep(0.01)

    async def _run(self) -> None:
        while True:
            if not self._buffer:
                self._wake.clear()
                due = self._evicted_at + self._sweep_s - time.monotonic()
                if due > 0:
                    try:
                        await asyncio.wait_for(self._wake.wait(), timeout=due)
                    except asyncio.TimeoutError:
                        pass
                if not self._buffer:  # quiet: evict by age all the same
                    await self._sweep()
                    continue
            n = min(self.config.batch_size, len(self._buffer))
            batch = [self._buffer.popleft() for _ in range(n)]
            self._busy = True
            try:
                await self._write(batch)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._counters.retention_write_failed += len(batch)
                log.warning("retention write of %d exchange(s) failed (%s); they are not kept", len(batch),
                            describe(exc))
            finally:
                self._busy = False

    async def _sweep(self) -> None:
        """Evict what has expired (and anything over the size bounds), with no batch to write."""
        self._busy = True
        try:
            cfg = self.config
            result = await self._store.retain(
                [], keep_after=self.keep_after(), max_count=cfg.max_count, max_bytes=cfg.max_bytes
            )
            self._count(result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("evicting expired retained exchanges failed (%s); trying again in %.1f s", describe(exc),
                        self._sweep_s)
        finally:
            self._evicted_at = time.monotonic()
            self._busy = False

    def _count(self, result: RetainResult) -> None:
        self._counters.retention_kept += result.kept
        self._counters.retention_evicted_age += result.evicted_age
        self._counters.retention_evicted_count += result.evicted_count
        self._counters.retention_evicted_bytes += result.evicted_bytes

    async def _write(self, batch: list[tuple[Exchange, float]]) -> None:
        keep: list[tuple[Exchange, float]] = []
        for ex, at in batch:
            if ex.redacted:
                self._counters.retention_skipped_redacted += 1
            elif not await self._retains(ex.team):
                self._counters.retention_skipped_retention_off += 1
            else:
                keep.append((ex, at))
        if not keep:
            return
        rows = await asyncio.to_thread(self._seal, keep)
        cfg = self.config
        result = await self._store.retain(
            rows, keep_after=self.keep_after(), max_count=cfg.max_count, max_bytes=cfg.max_bytes
        )
        self._evicted_at = time.monotonic()
        self._count(result)
        # A team turned off while this batch was sealed (note_posture): its rows go at once.
        for team in {ex.team for ex, _ in keep}:
            cached = self._cache.get(team)
            if cached is not None and not cached[0]:
                self._counters.retention_forgotten += await self._store.forget_retained(team)

    def _seal(self, keep: list[tuple[Exchange, float]]) -> list[RetainedExchange]:
        return [
            RetainedExchange(
                team=ex.team, exchange_id=ex.exchange_id, model=ex.model, gateway=ex.gateway, route=ex.route,
                served_at=served_epoch(ex, at), kept_at=at,
                sealed=self.sealer.seal(_encode(ex), team=ex.team, exchange_id=ex.exchange_id),
            )
            for ex, at in keep
        ]

    def note_posture(self, team: str, prompt_retention: bool) -> None:
        """A posture written through this sidecar: take it at once (other sidecars of a fleet
        read it within ``POSTURE_TTL_S``, and forget the team's window when they see it off)."""
        self._cache[team] = (prompt_retention, time.monotonic())

    async def _retains(self, team: str) -> bool:
        now = time.monotonic()
        cached = self._cache.get(team)
        if cached is not None and now - cached[1] < POSTURE_TTL_S:
            return cached[0]
        stored = await self._store.get_posture(team)
        retains = self._default(team) if stored is None else stored.prompt_retention
        if not retains and (cached is None or cached[0]):  # first seen off, or just turned off: forget its window
            self._counters.retention_forgotten += await self._store.forget_retained(team)
        self._cache[team] = (retains, now)
        return retains


def open_exchange(sealer: Sealer, row: RetainedExchange) -> Exchange:
    """The exchange a retained row holds (raises :class:`~sidecar.seal.UnsealError`)."""
    return msgspec.json.decode(sealer.open(row.sealed, team=row.team, exchange_id=row.exchange_id), type=Exchange)
