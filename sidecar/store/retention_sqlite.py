"""The retention window in the SQLite store (:class:`sidecar.store.base.RetentionStore`), mixed
into :class:`sidecar.store.sqlite.SQLiteStore`; the store holds ciphertext only."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from sidecar.store.records import RetainedExchange, RetainedSelection, RetainResult

T = TypeVar("T")


class SQLiteRetention:
    if TYPE_CHECKING:
        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

    async def retain(
        self, rows: Sequence[RetainedExchange], *, keep_after: float, max_count: int, max_bytes: int
    ) -> RetainResult:
        def fn(conn: sqlite3.Connection) -> RetainResult:
            aged = conn.execute("DELETE FROM retained WHERE kept_at < ?", (keep_after,)).rowcount
            kept = 0
            for r in rows:
                kept += conn.execute(
                    "INSERT INTO retained (team, exchange_id, model, gateway, route, served_at, kept_at, size, sealed) "
                    "VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT (team, exchange_id) DO NOTHING",
                    (r.team, r.exchange_id, r.model, r.gateway, r.route, r.served_at, r.kept_at, len(r.sealed),
                     r.sealed),
                ).rowcount
            count, size = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM retained").fetchone()
            by_count = by_bytes = 0
            if count > max_count or size > max_bytes:
                cut = 0  # the highest seq to forget
                over_n, over_b = count - max_count, size - max_bytes
                for seq, n in conn.execute("SELECT seq, size FROM retained ORDER BY seq"):
                    if over_n <= 0 and over_b <= 0:
                        break
                    if over_n > 0:
                        by_count += 1
                    else:
                        by_bytes += 1
                    over_n, over_b, cut = over_n - 1, over_b - n, seq
                conn.execute("DELETE FROM retained WHERE seq <= ?", (cut,))
            return RetainResult(kept, aged, by_count, by_bytes)

        return await self._write(fn)

    async def retained(self, selection: RetainedSelection, *, after_seq: int, limit: int) -> list[RetainedExchange]:
        def fn(conn: sqlite3.Connection) -> list[RetainedExchange]:
            where, args = _selection(selection)
            rows = conn.execute(
                "SELECT seq, team, exchange_id, model, gateway, route, served_at, kept_at, sealed FROM retained "
                f"WHERE seq > ? AND {where} ORDER BY seq LIMIT ?", (after_seq, *args, limit),
            ).fetchall()
            return [RetainedExchange(r["team"], r["exchange_id"], r["model"], r["gateway"], r["route"],
                                     r["served_at"], r["kept_at"], bytes(r["sealed"]), r["seq"]) for r in rows]

        return await self._run(fn)

    async def count_retained(self, selection: RetainedSelection) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            where, args = _selection(selection)
            return int(conn.execute(f"SELECT COUNT(*) FROM retained WHERE {where}", args).fetchone()[0])

        return await self._run(fn)

    async def forget_retained(self, team: str) -> int:
        return await self._write(lambda conn: conn.execute("DELETE FROM retained WHERE team=?", (team,)).rowcount)

    async def retention_totals(self) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            count, size = conn.execute("SELECT COUNT(*), COALESCE(SUM(size), 0) FROM retained").fetchone()
            return {"count": int(count), "bytes": int(size)}

        return await self._run(fn)

    async def save_replay_progress(self, trial_id: str, *, cursor: int, fed: int) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE trials SET replay_cursor = MAX(replay_cursor, ?), replay_fed = MAX(replay_fed, ?) WHERE id=?",
                (cursor, fed, trial_id),
            )

        await self._write(fn)


def _selection(sel: RetainedSelection) -> tuple[str, tuple[Any, ...]]:
    """The WHERE clause (and its arguments) of a retained selection."""
    where = "team = ? AND served_at >= ? AND served_at < ?"
    args: list[Any] = [sel.team, sel.served_from, sel.served_to]
    for column, value in (("model", sel.model), ("route", sel.route), ("gateway", sel.gateway)):
        if value is not None:
            where += f" AND {column} = ?"
            args.append(value)
    if sel.kept_after is not None:
        where += " AND kept_at >= ?"
        args.append(sel.kept_after)
    return where, tuple(args)
