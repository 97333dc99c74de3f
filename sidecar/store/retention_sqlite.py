"""The retention window in the SQLite store (:class:`sidecar.store.base.RetentionStore`), mixed
into :class:`sidecar.store.sqlite.SQLiteStore`; its statements are :mod:`.retention_sql`'s."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Callable, Sequence, TypeVar

from sidecar.store import retention_sql as q
from sidecar.store.dialect import sq
from sidecar.store.records import RetainedExchange, RetainedSelection, RetainResult

T = TypeVar("T")


class SQLiteRetention:
    if TYPE_CHECKING:
        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, fn: Callable[[sqlite3.Connection], T], *, rerun_safe: bool = False) -> T: ...

    async def retain(
        self, rows: Sequence[RetainedExchange], *, keep_after: float, max_count: int, max_bytes: int
    ) -> RetainResult:
        def fn(conn: sqlite3.Connection) -> RetainResult:
            aged = conn.execute(*sq(q.AGE, keep_after)).rowcount
            kept = 0
            for r in rows:
                kept += conn.execute(*sq(q.INSERT, r.team, r.exchange_id, r.model, r.gateway, r.route, r.served_at,
                                         r.kept_at, len(r.sealed), r.sealed)).rowcount
            totals = conn.execute(q.TOTALS).fetchone()
            cut = q.Cut(totals["n"] - max_count, totals["b"] - max_bytes)
            if cut.over_n > 0 or cut.over_b > 0:
                for seq, n in conn.execute(q.OLDEST_FIRST):
                    if not cut.take(seq, n):
                        break
                conn.execute(*sq(q.CUT, cut.seq))
            return RetainResult(kept, aged, cut.by_count, cut.by_bytes)

        return await self._write(fn)

    async def retained(self, selection: RetainedSelection, *, after_seq: int, limit: int) -> list[RetainedExchange]:
        sql, args = q.select(selection, after_seq=after_seq, limit=limit)
        return await self._run(lambda conn: [q.exchange(r) for r in conn.execute(*sq(sql, *args)).fetchall()])

    async def count_retained(self, selection: RetainedSelection) -> int:
        sql, args = q.count(selection)
        return await self._run(lambda conn: int(conn.execute(*sq(sql, *args)).fetchone()[0]))

    async def forget_retained(self, team: str) -> int:
        return await self._write(lambda conn: conn.execute(*sq(q.FORGET, team)).rowcount)

    async def retention_totals(self) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            row = conn.execute(q.TOTALS).fetchone()
            return {"count": int(row["n"]), "bytes": int(row["b"])}

        return await self._run(fn)

    async def save_replay_progress(self, trial_id: str, *, cursor: int, fed: int) -> None:
        await self._write(lambda conn: conn.execute(*sq(q.REPLAY_PROGRESS, cursor, fed, trial_id)))
