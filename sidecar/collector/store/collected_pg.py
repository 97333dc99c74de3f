"""What a collector holds of the uplink, in the PostgreSQL store (:class:`sidecar.collector.store.base.CollectedStore`),
mixed into :class:`sidecar.collector.store.postgres.CollectorPostgresStore`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from sidecar.collector.store.posture_prune import PRUNE_POSTURES, posture_keys
from uplink.collector_store import Held

T = TypeVar("T")
Conn = Any  # asyncpg.Connection; asyncpg ships no type information


class PostgresCollected:
    if TYPE_CHECKING:
        def _open_pool(self) -> Any: ...

        async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def put_collected(self, records: Sequence[Held]) -> list[str]:
        """One statement for the whole batch (rows in the batch's order, so of two copies of an
        id in one batch the first wins): with a row per statement a collector took 0.08 of what
        PostgreSQL writes, with one 0.31 (bench/collector_capacity.py, docs/scale.md)."""
        if not records:
            return []

        async def fn(conn: Conn) -> list[str]:
            rows = await conn.fetch(
                "INSERT INTO collected_records (id, kind, sidecar_id, team, trial_id, exchange_id, revision, body, "
                "received_at) SELECT r.id, r.kind, r.sidecar_id, r.team, r.trial_id, r.exchange_id, r.revision, r.body, "
                "r.received_at FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], "
                "$6::text[], $7::bigint[], $8::bytea[], $9::double precision[]) WITH ORDINALITY "
                "AS r(id, kind, sidecar_id, team, trial_id, exchange_id, revision, body, received_at, n) "
                "ORDER BY r.n ON CONFLICT (id) DO NOTHING RETURNING id",
                [r.id for r in records], [r.kind for r in records], [r.sidecar_id for r in records],
                [r.team for r in records], [r.trial_id for r in records], [r.exchange_id for r in records],
                [r.revision for r in records], [r.body for r in records], [r.received_at for r in records],
            )
            for sidecar_id, team in posture_keys(records):
                await conn.execute(PRUNE_POSTURES, sidecar_id, team)
            stored = {row["id"] for row in rows}
            out: list[str] = []
            for r in records:
                if r.id in stored:
                    stored.discard(r.id)
                    out.append(r.id)
            return out

        return await self._tx(fn)

    async def collected_trials(self) -> list[dict[str, object]]:
        pool = self._open_pool()
        out: dict[str, dict[str, Any]] = {}
        for r in await pool.fetch(
            "SELECT trial_id, team, COUNT(*) AS n FROM collected_records WHERE kind = 'case_result' "
            "GROUP BY trial_id, team ORDER BY trial_id, team"
        ):
            out.setdefault(r["trial_id"], {"trial_id": r["trial_id"], "state": None, "case_results": {}})
            out[r["trial_id"]]["case_results"][r["team"]] = r["n"]
        for r in await pool.fetch(
            "SELECT DISTINCT ON (trial_id) trial_id, body FROM collected_records WHERE kind = 'trial_state' "
            "ORDER BY trial_id, revision DESC"
        ):
            out.setdefault(r["trial_id"], {"trial_id": r["trial_id"], "state": None, "case_results": {}})
            out[r["trial_id"]]["state"] = bytes(r["body"])
        return [out[k] for k in sorted(out)]

    async def latest_spec(self, trial_id: str) -> bytes | None:
        body = await self._open_pool().fetchval(
            "SELECT body FROM collected_records WHERE kind = 'trial_spec' AND trial_id = $1 "
            "ORDER BY revision DESC, seq DESC LIMIT 1", trial_id,
        )
        return None if body is None else bytes(body)

    async def latest_posture(self, team: str) -> bytes | None:
        body = await self._open_pool().fetchval(
            "SELECT body FROM collected_records WHERE kind = 'posture' AND team = $1 "
            "ORDER BY revision DESC, seq DESC LIMIT 1", team,
        )
        return None if body is None else bytes(body)

    async def pending_exchanges(self, *, limit: int) -> list[bytes]:
        rows = await self._open_pool().fetch(
            "SELECT r.body FROM collected_records r JOIN trials t ON t.id = r.trial_id "
            "WHERE r.kind = 'exchange' AND t.execution_site = 'control_plane' "
            "AND t.status NOT IN ('posture_changed', 'starter_unauthorized') "
            "AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.trial_id = r.trial_id AND c.exchange_id = r.exchange_id) "
            "ORDER BY r.seq LIMIT $1", limit,
        )
        return [bytes(r["body"]) for r in rows]

    async def lease_exchanges(self, *, owner: str, now: float, lease_until: float, limit: int) -> list[bytes]:
        async def fn(conn: Conn) -> list[bytes]:
            # The candidates in turn by team (each team's oldest first, then each team's next...),
            # then locked: rows another collector is leasing right now are skipped.
            rows = await conn.fetch(
                "WITH candidates AS (SELECT r.seq, ROW_NUMBER() OVER (PARTITION BY r.team ORDER BY r.seq) AS turn "
                "FROM collected_records r JOIN trials t ON t.id = r.trial_id "
                "WHERE r.kind = 'exchange' AND t.execution_site = 'control_plane' "
                "AND t.status NOT IN ('posture_changed', 'starter_unauthorized') "
                "AND (r.lease_until IS NULL OR r.lease_until < $2 OR r.lease_owner = $1) "
                "AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.trial_id = r.trial_id AND c.exchange_id = r.exchange_id)), "
                "picked AS (SELECT seq, turn FROM candidates ORDER BY turn, seq LIMIT $4), "
                "locked AS (SELECT r.seq FROM collected_records r WHERE r.seq IN (SELECT seq FROM picked) "
                "AND (r.lease_until IS NULL OR r.lease_until < $2 OR r.lease_owner = $1) FOR UPDATE SKIP LOCKED) "
                "UPDATE collected_records r SET lease_owner = $1, lease_until = $3 FROM picked "
                "WHERE r.seq = picked.seq AND r.seq IN (SELECT seq FROM locked) "
                "RETURNING r.body, picked.turn, r.seq", owner, now, lease_until, limit,
            )
            return [bytes(r["body"]) for r in sorted(rows, key=lambda r: (r["turn"], r["seq"]))]

        return await self._tx(fn)

    async def unrunnable_exchanges(self, *, limit: int) -> list[bytes]:
        rows = await self._open_pool().fetch(
            "SELECT r.body FROM collected_records r JOIN trials t ON t.id = r.trial_id "
            "WHERE r.kind = 'exchange' AND (t.execution_site != 'control_plane' "
            "OR t.status IN ('posture_changed', 'starter_unauthorized')) "
            "AND NOT EXISTS (SELECT 1 FROM cases c WHERE c.trial_id = r.trial_id AND c.exchange_id = r.exchange_id) "
            "ORDER BY r.seq LIMIT $1", limit,
        )
        return [bytes(r["body"]) for r in rows]

    async def collected_exchanges(self, team: str, *, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        rows = await self._open_pool().fetch(
            "SELECT r.seq, r.body FROM collected_records r JOIN trials t ON t.id = r.trial_id "
            "WHERE r.kind = 'exchange' AND r.team = $1 AND r.seq > $2 AND t.execution_site = 'control_plane' "
            "AND t.status NOT IN ('posture_changed', 'starter_unauthorized') "
            "ORDER BY r.seq LIMIT $3", team, after_seq, limit,
        )
        return [(int(r["seq"]), bytes(r["body"])) for r in rows]
