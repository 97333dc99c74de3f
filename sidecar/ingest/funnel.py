"""Funnel counts for outcomes decided before a case exists.

The tap decides ``not_sampled``, ``skipped_redacted`` and ``shed_queue_full``
for every (exchange, trial) pair on the request path, where it must not wait
for the store. Those counts accumulate here and are flushed to the store by
the app's flush loop and once more at shutdown. Outcomes of reserved cases are
counted by the store in the same transaction that finishes the case.

A batch being flushed stays visible (``pending``) until the store has
committed it; the store calls :meth:`committed` from its own thread right
after the commit, and reads :meth:`pending` from that same thread inside a
snapshot, so a trial view never counts a batch twice or misses it. The lock
makes that cross-thread hand-off safe; it is never held across I/O.
"""

from __future__ import annotations

import threading
from collections import Counter

from sidecar.store.base import Store


class FunnelCounter:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: Counter[tuple[str, str]] = Counter()
        self._flushing: Counter[tuple[str, str]] = Counter()

    def add(self, trial_id: str, outcome: str, n: int = 1) -> None:
        with self._lock:
            self._pending[(trial_id, outcome)] += n

    def add_many(self, counts: Counter[tuple[str, str]]) -> None:
        """Add a batch of (trial id, outcome) counts under one lock acquisition."""
        with self._lock:
            self._pending.update(counts)

    def pending(self, trial_id: str) -> dict[str, int]:
        """Counts not yet committed to the store, for one trial (safe from any thread)."""
        out: Counter[str] = Counter()
        with self._lock:
            for source in (self._pending, self._flushing):
                for (t, o), n in source.items():
                    if t == trial_id:
                        out[o] += n
        return dict(out)

    def committed(self) -> None:
        """Called by the store, on its thread, right after the flushed batch committed."""
        with self._lock:
            self._flushing = Counter()

    async def flush(self, store: Store) -> None:
        with self._lock:
            if not self._pending or self._flushing:
                return
            batch, self._pending = self._pending, Counter()
            self._flushing = batch
        try:
            await store.count_outcomes(dict(batch), on_commit=self.committed)
        except BaseException:
            # Put them back: a count is never lost to a failed flush.
            with self._lock:
                if self._flushing:
                    self._pending.update(self._flushing)
                    self._flushing = Counter()
            raise
