"""What a collector holds of the uplink, in the SQLite store (:class:`sidecar.collector.store.base.CollectedStore`),
mixed into :class:`sidecar.collector.store.sqlite.CollectorSQLiteStore`."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from sidecar.collector.store.posture_prune import PRUNE_POSTURES, PRUNE_POSTURES_SQLITE, posture_keys
from uplink.collector_store import Held

T = TypeVar("T")


class SQLiteCollected:
    if TYPE_CHECKING:
        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, fn: Callable[[sqlite3.Connection], T], *, rerun_safe: bool = False) -> T: ...

    async def put_collected(self, records: Sequence[Held]) -> list[str]:
        def fn(conn: sqlite3.Connection) -> list[str]:
            stored: list[str] = []
            for r in records:
                cur = conn.execute(
                    "INSERT INTO collected_records (id, kind, sidecar_id, team, trial_id, exchange_id, revision, body, "
                    "received_at) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (id) DO NOTHING",
                    (r.id, r.kind, r.sidecar_id, r.team, r.trial_id, r.exchange_id, r.revision, r.body, r.received_at),
                )
                if cur.rowcount == 1:
                    stored.append(r.id)
            for sidecar_id, team in posture_keys(records):
                conn.execute(PRUNE_POSTURES_SQLITE, (sidecar_id, team, sidecar_id, team))
            return stored

        return await self._write(fn)

    async def collected_trials(self) -> list[dict[str, object]]:
        def fn(conn: sqlite3.Connection) -> list[dict[str, object]]:
            out: dict[str, dict[str, Any]] = {}
            for r in conn.execute(
                "SELECT trial_id, team, COUNT(*) AS n FROM collected_records WHERE kind = 'case_result' "
                "GROUP BY trial_id, team ORDER BY trial_id, team"
            ):
                out.setdefault(r["trial_id"], {"trial_id": r["trial_id"], "state": None, "case_results": {}})
                out[r["trial_id"]]["case_results"][r["team"]] = r["n"]
            for r in conn.execute(
                "SELECT r.trial_id, r.body FROM collected_records r WHERE r.kind = 'trial_state' AND r.revision = "
                "(SELECT MAX(revision) FROM collected_records s WHERE s.kind = 'trial_state' AND s.trial_id = r.trial_id)"
            ):
                out.setdefault(r["trial_id"], {"trial_id": r["trial_id"], "state": None, "case_results": {}})
                out[r["trial_id"]]["state"] = bytes(r["body"])
            return [out[k] for k in sorted(out)]

        return await self._run(fn)

    async def latest_spec(self, trial_id: str) -> bytes | None:
        def fn(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT body FROM collected_records WHERE kind = 'trial_spec' AND trial_id = ? "
                "ORDER BY revision DESC, seq DESC LIMIT 1", (trial_id,),
            ).fetchone()
            return None if row is None else bytes(row["body"])

        return await self._run(fn)

    async def latest_posture(self, team: str) -> bytes | None:
        def fn(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(
                "SELECT body FROM collected_records WHERE kind = 'posture' AND team = ? "
                "ORDER BY revision DESC, seq DESC LIMIT 1", (team,),
            ).fetchone()
            return None if row is None else bytes(row["body"])

        return await self._run(fn)

    async def pending_exchanges(self, *, limit: int) -> list[bytes]:
        def fn(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(
                "SELECT r.body FROM collected_records r JOIN trials t ON t.id = r.trial_id "
                "WHERE r.kind = 'exchange' AND t.execution_site = 'control_plane' "
                "AND t.status NOT IN ('posture_changed', 'starter_unauthorized') "
                "AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.trial_id = r.trial_id AND c.exchange_id = r.exchange_id) "
                "ORDER BY r.seq LIMIT ?", (limit,),
            ).fetchall()
            return [bytes(r["body"]) for r in rows]

        return await self._run(fn)

    async def lease_exchanges(self, *, owner: str, now: float, lease_until: float, limit: int) -> list[bytes]:
        def fn(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(
                "SELECT seq, body FROM (SELECT r.seq, r.body, ROW_NUMBER() OVER (PARTITION BY r.team ORDER BY r.seq) "
                "AS turn FROM collected_records r JOIN trials t ON t.id = r.trial_id "
                "WHERE r.kind = 'exchange' AND t.execution_site = 'control_plane' "
                "AND t.status NOT IN ('posture_changed', 'starter_unauthorized') "
                "AND (r.lease_until IS NULL OR r.lease_until < ? OR r.lease_owner = ?) "
                "AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.trial_id = r.trial_id AND c.exchange_id = r.exchange_id)) "
                "ORDER BY turn, seq LIMIT ?", (now, owner, limit),
            ).fetchall()
            conn.executemany("UPDATE collected_records SET lease_owner = ?, lease_until = ? WHERE seq = ?",
                             [(owner, lease_until, r["seq"]) for r in rows])
            return [bytes(r["body"]) for r in rows]

        return await self._write(fn)

    async def unrunnable_exchanges(self, *, limit: int) -> list[bytes]:
        def fn(conn: sqlite3.Connection) -> list[bytes]:
            rows = conn.execute(
                "SELECT r.body FROM collected_records r JOIN trials t ON t.id = r.trial_id "
                "WHERE r.kind = 'exchange' AND (t.execution_site != 'control_plane' "
                "OR t.status IN ('posture_changed', 'starter_unauthorized')) "
                "AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.trial_id = r.trial_id AND c.exchange_id = r.exchange_id) "
                "ORDER BY r.seq LIMIT ?", (limit,),
            ).fetchall()
            return [bytes(r["body"]) for r in rows]

        return await self._run(fn)

    async def collected_exchanges(self, team: str, *, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        def fn(conn: sqlite3.Connection) -> list[tuple[int, bytes]]:
            rows = conn.execute(
                "SELECT r.seq, r.body FROM collected_records r JOIN trials t ON t.id = r.trial_id "
                "WHERE r.kind = 'exchange' AND r.team = ? AND r.seq > ? AND t.execution_site = 'control_plane' "
                "AND t.status NOT IN ('posture_changed', 'starter_unauthorized') "
                "ORDER BY r.seq LIMIT ?", (team, after_seq, limit),
            ).fetchall()
            return [(int(r["seq"]), bytes(r["body"])) for r in rows]

        return await self._run(fn)
