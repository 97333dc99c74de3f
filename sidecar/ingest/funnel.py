"""Funnel counts for outcomes decided before a case is claimed.

The tap decides ``not_sampled``, ``skipped_redacted`` and ``shed_queue_full``
for every (exchange, trial) pair on the request path, where it must not wait
for the store; the engine adds the few it decides before a claim
(``shed_stopped`` and the like). Those counts accumulate here — from any
thread, under a lock never held across I/O — and the runtime's flush loop
writes them to the store. Outcomes of claimed cases are counted by the store
in the transaction that finishes the case.

A read that adds :meth:`pending` to the store's counts does so under
:meth:`consistent`, the same gate a flush holds from taking its batch to the
commit, so a count is always in exactly one of the two. The gate belongs to
the loop that flushes (the runtime's main loop); other sidecars' pending
counts reach the store within one flush interval.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Mapping

from sidecar.store.base import FunnelStore


class FunnelCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Counter[tuple[str, str]] = Counter()
        self._gate: asyncio.Lock | None = None
        #: Flushes begun, and the latest one whose batch is in the store (for the journal's
        #: watermark: a count added before flush N began is durable once ``committed_epoch >= N``).
        self.epoch = 0
        self.committed_epoch = 0

    def add(self, trial_id: str, outcome: str, n: int = 1) -> None:
        with self._lock:
            self._pending[(trial_id, outcome)] += n

    def add_many(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Add a batch of (trial id, outcome) counts under one lock acquisition (a plain loop:
        ``Counter.update`` checks its argument against an abstract class first, issue 29)."""
        with self._lock:
            pending = self._pending
            for key, n in counts.items():
                pending[key] += n

    def pending(self, trial_id: str) -> dict[str, int]:
        """Counts not yet written to the store, for one trial."""
        with self._lock:
            return {o: n for (t, o), n in self._pending.items() if t == trial_id}

    def consistent(self) -> asyncio.Lock:
        """Hold while reading store counts together with :meth:`pending` (flush loop's loop only)."""
        if self._gate is None:
            self._gate = asyncio.Lock()
        return self._gate

    async def flush(self, store: FunnelStore) -> None:
        async with self.consistent():
            with self._lock:
                self.epoch += 1
                epoch = self.epoch
                batch, self._pending = self._pending, Counter()
            if batch:
                try:
                    await store.count_outcomes(dict(batch))
                except BaseException:
                    with self._lock:  # put them back: a count is never lost to a failed flush
                        self._pending.update(batch)
                    raise
            self.committed_epoch = max(self.committed_epoch, epoch)
