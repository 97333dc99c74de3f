"""Which sampled claims are done, for the intake journal to forget them.

A claim is *done* when its outcome is durable in the store: its case was claimed
there (claimed cases are the case ledger's from then on: finished, or recovered
``indeterminate`` after a crash), or its outcome was counted and that count has
been flushed. Claims reach the engine in journal order; ``done_through`` is the
largest number N such that every claim numbered N or less is done:

- while claims are in hand or queued, one less than the smallest of them;
- otherwise, the largest number seen.

A candidate computed now becomes true only once the funnel counts added before it
are in the store, so :meth:`mark` notes the funnel's epoch and :meth:`publish`
releases a candidate once a flush that began after it has committed.

Claims still in hand when the engine stopped (their drain deadline passed) are
*uncertain*: the store may or may not hold their case. :meth:`uncertain` hands
them back, and the journal keeps them for the next start, where a claimed one is
recognised as a re-delivery and an unclaimed one runs.
"""

from __future__ import annotations

import threading

from sidecar.ingest.claims import Claim


class Watermark:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_hand: dict[int, Claim] = {}
        self._seen = 0
        self._candidates: list[tuple[int, int]] = []  # (epoch that must commit, candidate)
        self.done_through = 0

    def taken(self, claim: Claim) -> None:
        if claim.seq:
            with self._lock:
                self._in_hand[claim.seq] = claim
                self._seen = max(self._seen, claim.seq)

    def finished(self, claim: Claim) -> None:
        """Its case is claimed in the store, or its outcome counted (flushed later)."""
        if claim.seq:
            with self._lock:
                self._in_hand.pop(claim.seq, None)
                self._seen = max(self._seen, claim.seq)

    def mark(self, oldest_queued: int | None, epoch: int) -> None:
        """Note a candidate: true once the funnel flush after ``epoch`` has committed."""
        with self._lock:
            lows = [min(self._in_hand)] if self._in_hand else []
            if oldest_queued:
                lows.append(oldest_queued)
            candidate = min(lows) - 1 if lows else self._seen
            self._candidates.append((epoch + 1, candidate))

    def publish(self, committed_epoch: int) -> bool:
        """Release candidates whose counts are durable; True when ``done_through`` moved."""
        with self._lock:
            ready = [c for e, c in self._candidates if e <= committed_epoch]
            self._candidates = [(e, c) for e, c in self._candidates if e > committed_epoch]
            before = self.done_through
            if ready:
                self.done_through = max(self.done_through, *ready)
            return self.done_through != before

    def uncertain(self) -> list[Claim]:
        with self._lock:
            return sorted(self._in_hand.values(), key=lambda c: c.seq)
