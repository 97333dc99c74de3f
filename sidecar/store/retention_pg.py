"""The retention window in the PostgreSQL store (:class:`sidecar.store.base.RetentionStore`), mixed
into :class:`sidecar.store.postgres.PostgresStore`; the store holds ciphertext only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from sidecar.store.records import RetainedExchange, RetainedSelection, RetainResult

T = TypeVar("T")
Conn = Any  # asyncpg.Connection; asyncpg ships no type information

#: Sidecars of a fleet retain into one window: its bounds are applied one at a time.
_RETENTION_LOCK = 0x5F3C_2A91_7D0E_4B6D


class PostgresRetention:
    if TYPE_CHECKING:
        def _open_pool(self) -> Any: ...

        async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def retain(
        self, rows: Sequence[RetainedExchange], *, keep_after: float, max_count: int, max_bytes: int
    ) -> RetainResult:
        async def fn(conn: Conn) -> RetainResult:
            # Sidecars of a fleet retain into one window: its bounds are applied one at a time.
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _RETENTION_LOCK)
            aged = int((await conn.execute("DELETE FROM retained WHERE kept_at < $1", keep_after)).split()[-1])
            kept = 0
            for r in rows:
                status = await conn.execute(
                    "INSERT INTO retained (team, exchange_id, model, gateway, route, served_at, kept_at, size, sealed) "
                    "VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9) ON CONFLICT (team, exchange_id) DO NOTHING",
                    r.team, r.exchange_id, r.model, r.gateway, r.route, r.served_at, r.kept_at, len(r.sealed), r.sealed,
                )
                kept += int(status.split()[-1])
            row = await conn.fetchrow("SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS b FROM retained")
            count, size = int(row["n"]), int(row["b"])
            by_count = by_bytes = 0
            if count > max_count or size > max_bytes:
                cut = 0
                over_n, over_b = count - max_count, size - max_bytes
                async for rec in conn.cursor("SELECT seq, size FROM retained ORDER BY seq"):
                    if over_n <= 0 and over_b <= 0:
                        break
                    if over_n > 0:
                        by_count += 1
                    else:
                        by_bytes += 1
                    over_n, over_b, cut = over_n - 1, over_b - int(rec["size"]), int(rec["seq"])
                await conn.execute("DELETE FROM retained WHERE seq <= $1", cut)
            return RetainResult(kept, aged, by_count, by_bytes)

        return await self._tx(fn)

    async def retained(self, selection: RetainedSelection, *, after_seq: int, limit: int) -> list[RetainedExchange]:
        where, args = _selection(selection, first=3)
        rows = await self._open_pool().fetch(
            "SELECT seq, team, exchange_id, model, gateway, route, served_at, kept_at, sealed FROM retained "
            f"WHERE seq > $1 AND {where} ORDER BY seq LIMIT $2", after_seq, limit, *args,
        )
        return [RetainedExchange(r["team"], r["exchange_id"], r["model"], r["gateway"], r["route"], r["served_at"],
                                 r["kept_at"], bytes(r["sealed"]), int(r["seq"])) for r in rows]

    async def count_retained(self, selection: RetainedSelection) -> int:
        where, args = _selection(selection, first=1)
        return int(await self._open_pool().fetchval(f"SELECT COUNT(*) FROM retained WHERE {where}", *args))

    async def forget_retained(self, team: str) -> int:
        async def fn(conn: Conn) -> int:
            await conn.execute("SELECT pg_advisory_xact_lock($1)", _RETENTION_LOCK)
            return int((await conn.execute("DELETE FROM retained WHERE team = $1", team)).split()[-1])

        return await self._tx(fn)

    async def retention_totals(self) -> dict[str, int]:
        row = await self._open_pool().fetchrow("SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS b FROM retained")
        return {"count": int(row["n"]), "bytes": int(row["b"])}

    async def save_replay_progress(self, trial_id: str, *, cursor: int, fed: int) -> None:
        await self._open_pool().execute(
            "UPDATE trials SET replay_cursor = GREATEST(replay_cursor, $1), replay_fed = GREATEST(replay_fed, $2) "
            "WHERE id = $3", cursor, fed, trial_id,
        )


def _selection(sel: RetainedSelection, *, first: int) -> tuple[str, list[Any]]:
    """The WHERE clause of a retained selection, its parameters numbered from ``$first``."""
    where = f"team = ${first} AND served_at >= ${first + 1} AND served_at < ${first + 2}"
    args: list[Any] = [sel.team, sel.served_from, sel.served_to]
    for column, value in (("model", sel.model), ("route", sel.route), ("gateway", sel.gateway)):
        if value is not None:
            args.append(value)
            where += f" AND {column} = ${first + len(args) - 1}"
    if sel.kept_after is not None:
        args.append(sel.kept_after)
        where += f" AND kept_at >= ${first + len(args) - 1}"
    return where, args
