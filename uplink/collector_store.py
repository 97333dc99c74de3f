"""What the reference collector keeps: a protocol it owns, and a SQLite implementation.

Records are kept once by id (the first copy wins; a re-delivery changes
nothing). The SQLite store uses the standard library's ``sqlite3`` on a
worker thread, one connection, WAL mode.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
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


class CollectorStore(Protocol):
    async def put(self, records: Sequence[Held]) -> list[str]:
        """Keep each record unless its id is held already; returns the ids stored now."""
        ...

    async def trials(self) -> list[dict[str, Any]]:
        """Per trial: its latest ``trial_state`` (or None) and case-result counts per team."""
        ...

    async def close(self) -> None: ...


_SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    sidecar_id TEXT NOT NULL,
    team TEXT,
    trial_id TEXT,
    revision INTEGER,
    body BLOB NOT NULL,
    received_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_trial ON records (trial_id, kind);
"""


class SqliteCollectorStore:
    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    async def put(self, records: Sequence[Held]) -> list[str]:
        return await asyncio.to_thread(self._put, list(records))

    def _put(self, records: list[Held]) -> list[str]:
        stored: list[str] = []
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for r in records:
                    cur = self._conn.execute(
                        "INSERT INTO records (id, kind, sidecar_id, team, trial_id, revision, body, received_at) "
                        "VALUES (?,?,?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING",
                        (r.id, r.kind, r.sidecar_id, r.team, r.trial_id, r.revision, r.body, r.received_at),
                    )
                    if cur.rowcount == 1:
                        stored.append(r.id)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
        return stored

    async def trials(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self._trials)

    def _trials(self) -> list[dict[str, Any]]:
        with self._lock:
            out: dict[str, dict[str, Any]] = {}
            for trial_id, team, n in self._conn.execute(
                "SELECT trial_id, team, COUNT(*) FROM records WHERE kind = 'case_result' "
                "GROUP BY trial_id, team ORDER BY trial_id, team"
            ):
                out.setdefault(trial_id, {"trial_id": trial_id, "state": None, "case_results": {}})
                out[trial_id]["case_results"][team] = n
            for trial_id, body in self._conn.execute(
                "SELECT r.trial_id, r.body FROM records r WHERE r.kind = 'trial_state' AND r.revision = "
                "(SELECT MAX(revision) FROM records s WHERE s.kind = 'trial_state' AND s.trial_id = r.trial_id)"
            ):
                out.setdefault(trial_id, {"trial_id": trial_id, "state": None, "case_results": {}})
                out[trial_id]["state"] = bytes(body)
        return [out[k] for k in sorted(out)]

    async def close(self) -> None:
        with self._lock:
            self._conn.close()
