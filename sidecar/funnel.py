"""Funnel counts for outcomes decided before a case exists.

The tap decides ``not_sampled``, ``skipped_redacted`` and ``shed_queue_full``
for every (exchange, trial) pair on the request path, where it must not wait
for the store. Those counts accumulate here and are flushed to the store by
the app's flush loop and once more at shutdown. Outcomes of reserved cases are
counted by the store in the same transaction that finishes the case.
"""

from __future__ import annotations

from collections import Counter

from sidecar.store.base import Store


class FunnelCounter:
    def __init__(self) -> None:
        self._pending: Counter[tuple[str, str]] = Counter()

    def add(self, trial_id: str, outcome: str, n: int = 1) -> None:
        self._pending[(trial_id, outcome)] += n

    def pending(self, trial_id: str) -> dict[str, int]:
        return {o: n for (t, o), n in self._pending.items() if t == trial_id}

    async def flush(self, store: Store) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, Counter()
        try:
            await store.count_outcomes(dict(batch))
        except BaseException:
            # Put them back: a count is never lost to a failed flush.
            for key, n in batch.items():
                self._pending[key] += n
            raise
