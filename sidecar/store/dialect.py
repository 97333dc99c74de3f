"""The two dialects the store speaks, so a statement is written once.

A query module (:mod:`.outbox_sql`, :mod:`.retention_sql`, :mod:`.trials_sql`) writes each
statement in one neutral form; :meth:`Dialect.bind` turns it and its arguments into what the
driver takes, cached per statement (and per list length, in SQLite):

* ``?`` a parameter: ``?`` in SQLite (the stdlib ``sqlite3``), ``$n`` in PostgreSQL (asyncpg);
* ``?:type`` a parameter PostgreSQL must be told the type of (``$n::type``; SQLite drops it);
* ``IN ?[]`` (or ``IN ?[type]``) a list parameter: ``IN (?, ?, …)`` expanded to the list's
  length in SQLite, ``= ANY($n::text[])`` with the list as one array in PostgreSQL;
* ``{GREATEST}`` the scalar maximum (``MAX`` in SQLite); ``{FOR_UPDATE}`` and ``{SKIP_LOCKED}``
  the row locks PostgreSQL takes and SQLite (one writer at a time, under its write lock) has
  no use for; ``{COLLATE_C}`` byte order, SQLite's own.

``IS NOT DISTINCT FROM``, ``RETURNING``, ``ON CONFLICT … DO NOTHING / DO UPDATE`` and
``UPDATE … FROM`` are spelled alike by both (SQLite 3.39 and later). What cannot be one
statement stays with its dialect: the reservation (the cap's conditional update), crash
recovery (PostgreSQL locks with ``SKIP LOCKED`` in a fixed order; SQLite holds the write
lock), and the migrations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

_TOKEN = re.compile(r"IN \?\[(\w*)\]|\?(?::(\w+))?")


@dataclass(frozen=True)
class Dialect:
    name: str  # "sqlite" | "postgres"
    _plain: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    _cache: dict[tuple[str, tuple[int, ...]], str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def postgres(self) -> bool:
        return self.name == "postgres"

    def bind(self, statement: str, *args: Any) -> tuple[str, tuple[Any, ...]]:
        """The statement in this dialect and its arguments as the driver takes them. A list
        parameter (``IN ?[]``) takes a sequence."""
        sql = self._plain.get(statement)
        if sql is not None:  # the common case: no list parameter, the arguments as they are
            return sql, args
        kinds = _kinds(statement)
        if not any(kinds):
            sql = self._plain[statement] = self._render(statement, ())
            return sql, args
        if self.postgres:
            key: tuple[str, tuple[int, ...]] = (statement, ())
            bound = tuple(list(a) if kind else a for a, kind in zip(args, kinds))
        else:
            key = (statement, tuple(len(a) for a, kind in zip(args, kinds) if kind))
            flat: list[Any] = []
            for a, kind in zip(args, kinds):
                if kind:
                    flat.extend(a)
                else:
                    flat.append(a)
            bound = tuple(flat)
        listed = self._cache.get(key)
        if listed is None:
            listed = self._cache[key] = self._render(statement, key[1])
        return listed, bound

    def _render(self, statement: str, lists: tuple[int, ...]) -> str:
        numbers = iter(range(1, 1 << 16))
        sizes = iter(lists)

        def sub(m: re.Match[str]) -> str:
            if m.group(0).startswith("IN"):
                if self.postgres:
                    return f"= ANY(${next(numbers)}::{m.group(1) or 'text'}[])"
                n = next(sizes)
                return f"IN ({', '.join('?' * n)})" if n else "IN (NULL)"
            if self.postgres:
                return f"${next(numbers)}" + (f"::{m.group(2)}" if m.group(2) else "")
            return "?"

        sql = _TOKEN.sub(sub, statement)
        for token, (lite, post) in _WORDS.items():
            sql = sql.replace(token, post if self.postgres else lite)
        return sql

    def sql(self, statement: str) -> str:
        """The statement alone (for ``executemany``; it takes no list parameter)."""
        return self.bind(statement)[0]


_WORDS = {
    "{GREATEST}": ("MAX", "GREATEST"),
    "{FOR_UPDATE}": ("", "FOR UPDATE"),
    "{SKIP_LOCKED}": ("", "FOR UPDATE SKIP LOCKED"),
    "{COLLATE_C}": ("", 'COLLATE "C"'),
}


_KINDS: dict[str, tuple[bool, ...]] = {}


def _kinds(statement: str) -> tuple[bool, ...]:
    """Per parameter of the statement, in order: whether it is a list."""
    kinds = _KINDS.get(statement)
    if kinds is None:
        kinds = _KINDS[statement] = tuple(m.group(0).startswith("IN") for m in _TOKEN.finditer(statement))
    return kinds


def rowcount(status: str) -> int:
    """The rows an asyncpg ``execute`` touched, from its status (``DELETE 3``, ``INSERT 0 1``)."""
    return int(status.split()[-1])


def chunks(items: Sequence[Any], size: int = 500) -> list[Sequence[Any]]:
    """A long list parameter in pieces SQLite's parameter limit takes."""
    return [items[i:i + size] for i in range(0, len(items), size)]


SQLITE = Dialect("sqlite")
POSTGRES = Dialect("postgres")


def sq(statement: str, *args: Any) -> tuple[str, tuple[Any, ...]]:
    """``conn.execute(*sq(STATEMENT, a, b))`` on a ``sqlite3`` connection."""
    return SQLITE.bind(statement, *args)


def pg(statement: str, *args: Any) -> tuple[Any, ...]:
    """``await conn.fetch(*pg(STATEMENT, a, b))`` on an asyncpg connection or pool."""
    sql, bound = POSTGRES.bind(statement, *args)
    return (sql, *bound)
