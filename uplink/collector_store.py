"""What the reference collector keeps: a protocol it owns (the sidecar's store implements it).

Records are kept once by id (the first copy wins; a re-delivery changes
nothing). The implementation over the sidecar's store contract — SQLite by
default, PostgreSQL for scale — is :class:`sidecar.collector.collected.CollectedRecords`;
it also runs control-plane trials from what it keeps (issue 11 item 5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence


@dataclass(frozen=True)
class Held:
    """A record as the collector keeps it (``body`` is the record's JSON as it came)."""

    id: str
    kind: str
    sidecar_id: str
    body: bytes
    received_at: float
    team: str | None = None
    trial_id: str | None = None
    revision: int | None = None
    #: For ``exchange`` records: the case the collector may run from it.
    exchange_id: str | None = None


class CollectorStore(Protocol):
    async def put(self, records: Sequence[Held]) -> list[str]:
        """Keep each record unless its id is held already; returns the ids stored now. Returns
        only once they are durable (the collector acknowledges them after)."""
        ...

    async def trials(self) -> list[dict[str, Any]]:
        """Per trial: ``trial_id``, its latest ``trial_state`` body (``state``, or None), the
        case-result counts per team (``case_results``) and, for a trial this collector runs at
        the control plane, ``control_plane``: its own figures and verdict (a JSON-able dict)."""
        ...
