"""The SQLite side of :class:`sidecar.collector.store.reports.ReportsStore`, mixed into
:class:`sidecar.collector.store.sqlite.CollectorSQLiteStore`."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Callable, TypeVar

from sidecar.collector.store.reports import SidecarReport

T = TypeVar("T")

#: Per (trial, sidecar): case results, the latest arrival, and the highest-revision state's body.
_REPORTS = (
    "SELECT r.trial_id, r.sidecar_id, MAX(r.team) AS team, "
    "SUM(CASE WHEN r.kind = 'case_result' THEN 1 ELSE 0 END) AS n, MAX(r.received_at) AS last, "
    "(SELECT s.body FROM collected_records s WHERE s.kind = 'trial_state' AND s.trial_id = r.trial_id "
    " AND s.sidecar_id = r.sidecar_id ORDER BY s.revision DESC, s.seq DESC LIMIT 1) AS state "
    "FROM collected_records r WHERE r.kind IN ('case_result', 'trial_state') AND r.trial_id IS NOT NULL "
    "GROUP BY r.trial_id, r.sidecar_id ORDER BY r.trial_id, r.sidecar_id"
)


class SQLiteReports:
    if TYPE_CHECKING:
        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def sidecar_reports(self) -> list[SidecarReport]:
        def fn(conn: sqlite3.Connection) -> list[SidecarReport]:
            return [SidecarReport(r["trial_id"], r["sidecar_id"], r["team"], int(r["n"]),
                                  None if r["state"] is None else bytes(r["state"]), float(r["last"]))
                    for r in conn.execute(_REPORTS)]

        return await self._run(fn)

    async def alert_records(self) -> list[tuple[str, bytes]]:
        def fn(conn: sqlite3.Connection) -> list[tuple[str, bytes]]:
            rows = conn.execute("SELECT sidecar_id, body FROM collected_records WHERE kind = 'alert' ORDER BY seq")
            return [(r["sidecar_id"], bytes(r["body"])) for r in rows]

        return await self._run(fn)
