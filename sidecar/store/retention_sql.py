"""The retention window's statements, once for both dialects (:mod:`sidecar.store.dialect`),
and the arithmetic of its bounds. The store holds ciphertext only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sidecar.store.records import RetainedExchange, RetainedSelection

AGE = "DELETE FROM retained WHERE kept_at < ?"
INSERT = (
    "INSERT INTO retained (team, exchange_id, model, gateway, route, served_at, kept_at, size, sealed) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (team, exchange_id) DO NOTHING"
)
TOTALS = "SELECT COUNT(*) AS n, COALESCE(SUM(size), 0) AS b FROM retained"
OLDEST_FIRST = "SELECT seq, size FROM retained ORDER BY seq"
CUT = "DELETE FROM retained WHERE seq <= ?"
FORGET = "DELETE FROM retained WHERE team = ?"
REPLAY_PROGRESS = (
    "UPDATE trials SET replay_cursor = {GREATEST}(replay_cursor, ?), replay_fed = {GREATEST}(replay_fed, ?) "
    "WHERE id = ?"
)
_COLUMNS = "seq, team, exchange_id, model, gateway, route, served_at, kept_at, sealed"


def select(selection: RetainedSelection, *, after_seq: int, limit: int) -> tuple[str, tuple[Any, ...]]:
    """The page of a selection after ``after_seq``, and its arguments."""
    where, args = _where(selection)
    return (f"SELECT {_COLUMNS} FROM retained WHERE seq > ? AND {where} ORDER BY seq LIMIT ?",
            (after_seq, *args, limit))


def count(selection: RetainedSelection) -> tuple[str, tuple[Any, ...]]:
    where, args = _where(selection)
    return f"SELECT COUNT(*) FROM retained WHERE {where}", args


def exchange(r: Mapping[str, Any]) -> RetainedExchange:
    return RetainedExchange(r["team"], r["exchange_id"], r["model"], r["gateway"], r["route"], r["served_at"],
                            r["kept_at"], bytes(r["sealed"]), int(r["seq"]))


@dataclass
class Cut:
    """The oldest rows to forget so the window fits ``max_count`` and ``max_bytes``: fed the
    rows oldest first until :meth:`take` says enough; ``seq`` is then the highest to forget."""

    over_n: int
    over_b: int
    seq: int = 0
    by_count: int = 0
    by_bytes: int = 0

    def take(self, seq: int, size: int) -> bool:
        if self.over_n <= 0 and self.over_b <= 0:
            return False
        if self.over_n > 0:
            self.by_count += 1
        else:
            self.by_bytes += 1
        self.over_n, self.over_b, self.seq = self.over_n - 1, self.over_b - size, seq
        return True


def _where(sel: RetainedSelection) -> tuple[str, tuple[Any, ...]]:
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
