"""The retention window in the PostgreSQL store (:class:`sidecar.store.base.RetentionStore`), mixed
into :class:`sidecar.store.postgres.PostgresStore`; its statements are :mod:`.retention_sql`'s."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from sidecar.store import retention_sql as q
from sidecar.store.dialect import pg, rowcount
from sidecar.store.records import RetainedExchange, RetainedSelection, RetainResult

T = TypeVar("T")
Conn = Any  # asyncpg.Connection; asyncpg ships no type information

#: Sidecars of a fleet retain into one window: its bounds are applied one at a time.
_RETENTION_LOCK = 0x5F3C_2A91_7D0E_4B6D
_LOCK = "SELECT pg_advisory_xact_lock($1)"


class PostgresRetention:
    if TYPE_CHECKING:
        def _open_pool(self) -> Any: ...

        async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def retain(
        self, rows: Sequence[RetainedExchange], *, keep_after: float, max_count: int, max_bytes: int
    ) -> RetainResult:
        async def fn(conn: Conn) -> RetainResult:
            # Sidecars of a fleet retain into one window: its bounds are applied one at a time.
            await conn.execute(_LOCK, _RETENTION_LOCK)
            aged = rowcount(await conn.execute(*pg(q.AGE, keep_after)))
            kept = 0
            for r in rows:
                kept += rowcount(await conn.execute(*pg(q.INSERT, r.team, r.exchange_id, r.model, r.gateway, r.route,
                                                        r.served_at, r.kept_at, len(r.sealed), r.sealed)))
            totals = await conn.fetchrow(q.TOTALS)
            cut = q.Cut(int(totals["n"]) - max_count, int(totals["b"]) - max_bytes)
            if cut.over_n > 0 or cut.over_b > 0:
                async for rec in conn.cursor(q.OLDEST_FIRST):
                    if not cut.take(int(rec["seq"]), int(rec["size"])):
                        break
                await conn.execute(*pg(q.CUT, cut.seq))
            return RetainResult(kept, aged, cut.by_count, cut.by_bytes)

        return await self._tx(fn)

    async def retained(self, selection: RetainedSelection, *, after_seq: int, limit: int) -> list[RetainedExchange]:
        sql, args = q.select(selection, after_seq=after_seq, limit=limit)
        return [q.exchange(r) for r in await self._open_pool().fetch(*pg(sql, *args))]

    async def count_retained(self, selection: RetainedSelection) -> int:
        sql, args = q.count(selection)
        return int(await self._open_pool().fetchval(*pg(sql, *args)))

    async def forget_retained(self, team: str) -> int:
        async def fn(conn: Conn) -> int:
            await conn.execute(_LOCK, _RETENTION_LOCK)
            return rowcount(await conn.execute(*pg(q.FORGET, team)))

        return await self._tx(fn)

    async def retention_totals(self) -> dict[str, int]:
        row = await self._open_pool().fetchrow(q.TOTALS)
        return {"count": int(row["n"]), "bytes": int(row["b"])}

    async def save_replay_progress(self, trial_id: str, *, cursor: int, fed: int) -> None:
        await self._open_pool().execute(*pg(q.REPLAY_PROGRESS, cursor, fed, trial_id))
