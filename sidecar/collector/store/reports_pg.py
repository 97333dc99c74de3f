"""The PostgreSQL side of :class:`sidecar.collector.store.reports.ReportsStore`, mixed into
:class:`sidecar.collector.store.postgres.CollectorPostgresStore`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sidecar.collector.store.reports import SidecarReport

#: As the SQLite query (reports_sqlite): per (trial, sidecar), the latest state's body beside the counts.
_REPORTS = (
    "SELECT r.trial_id, r.sidecar_id, MAX(r.team) AS team, "
    "COUNT(*) FILTER (WHERE r.kind = 'case_result') AS n, MAX(r.received_at) AS last, "
    "(SELECT s.body FROM collected_records s WHERE s.kind = 'trial_state' AND s.trial_id = r.trial_id "
    " AND s.sidecar_id = r.sidecar_id ORDER BY s.revision DESC, s.seq DESC LIMIT 1) AS state "
    "FROM collected_records r WHERE r.kind IN ('case_result', 'trial_state') AND r.trial_id IS NOT NULL "
    "GROUP BY r.trial_id, r.sidecar_id ORDER BY r.trial_id, r.sidecar_id"
)


class PostgresReports:
    if TYPE_CHECKING:
        def _open_pool(self) -> Any: ...

    async def sidecar_reports(self) -> list[SidecarReport]:
        rows = await self._open_pool().fetch(_REPORTS)
        return [SidecarReport(r["trial_id"], r["sidecar_id"], r["team"], int(r["n"]),
                              None if r["state"] is None else bytes(r["state"]), float(r["last"])) for r in rows]

    async def alert_records(self) -> list[tuple[str, bytes]]:
        rows = await self._open_pool().fetch(
            "SELECT sidecar_id, body FROM collected_records WHERE kind = 'alert' ORDER BY seq")
        return [(r["sidecar_id"], bytes(r["body"])) for r in rows]
