"""The outbox as the delivery loop sees it: a small protocol the sidecar's store implements.

:class:`Outbox` is owned by its user (:mod:`uplink.delivery`), so ``uplink``
never imports the sidecar. :class:`MemoryOutbox` is the fake beside it.
"""

from __future__ import annotations

from typing import Protocol, Sequence


class Outbox(Protocol):
    async def claim_outbox(self, owner: str, *, limit: int, lease_s: float, now: float) -> list[tuple[str, bytes]]:
        """Up to ``limit`` records, oldest first, that no other owner's live lease holds, leased
        to ``owner`` until ``now + lease_s``: ``(record_id, body)``. In a fleet two owners never
        hold the same record at once; a record whose lease lapsed (its owner died) is claimable
        again, and ``owner``'s own leased records are claimable by it at once (a retry)."""
        ...

    async def delete_outbox(self, record_ids: Sequence[str]) -> int:
        """Forget these records (the collector holds or refused them); returns how many went."""
        ...


class MemoryOutbox:
    """An in-memory :class:`Outbox` for tests: insertion order, leases by owner."""

    def __init__(self) -> None:
        self.records: dict[str, bytes] = {}
        self._leases: dict[str, tuple[str, float]] = {}

    def add(self, record_id: str, body: bytes) -> None:
        self.records.setdefault(record_id, body)

    async def claim_outbox(self, owner: str, *, limit: int, lease_s: float, now: float) -> list[tuple[str, bytes]]:
        out: list[tuple[str, bytes]] = []
        for rid, body in self.records.items():
            if len(out) >= limit:
                break
            held = self._leases.get(rid)
            if held is not None and held[0] != owner and held[1] >= now:
                continue
            self._leases[rid] = (owner, now + lease_s)
            out.append((rid, body))
        return out

    async def delete_outbox(self, record_ids: Sequence[str]) -> int:
        gone = 0
        for rid in record_ids:
            if self.records.pop(rid, None) is not None:
                gone += 1
            self._leases.pop(rid, None)
        return gone
