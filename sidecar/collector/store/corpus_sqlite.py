"""The corpus part of the SQLite store (:class:`sidecar.collector.store.base.CorpusStore`), mixed
into :class:`sidecar.collector.store.sqlite.CollectorSQLiteStore`: every statement on its store thread, each
write one ``BEGIN IMMEDIATE`` transaction, so the next version of a slice or a suite is
numbered under SQLite's write lock."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from sidecar.collector.store.corpus_records import (
    ComparisonRecord,
    DatasetRecord,
    DatasetVersion,
    ItemRow,
    SliceRecord,
    SuiteRecord,
)
from sidecar.store.errors import IdempotencyConflict

T = TypeVar("T")


def _build(cls: type[T], row: sqlite3.Row) -> T:
    return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def _insert(conn: sqlite3.Connection, table: str, record: Any) -> None:
    values = dataclasses.asdict(record)
    conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})",
                 tuple(values.values()))


def _teams_clause(teams: Sequence[str] | None, args: list[Any]) -> str:
    if teams is None:
        return ""
    args.extend(teams)
    return f" WHERE team IN ({', '.join('?' for _ in teams)})" if teams else " WHERE 0"


def _put_items(conn: sqlite3.Connection, version: DatasetVersion, items: Sequence[ItemRow]) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO dataset_revisions (dataset_id, revision_id, item_id, content) VALUES (?,?,?,?)",
        [(version.dataset_id, i.revision_id, i.item_id, i.content) for i in items],
    )
    conn.executemany(
        "INSERT INTO dataset_items (dataset_id, version, position, item_id, revision_id) VALUES (?,?,?,?,?)",
        [(version.dataset_id, version.version, n, i.item_id, i.revision_id) for n, i in enumerate(items)],
    )
    _insert(conn, "dataset_versions", version)


class SQLiteCorpus:
    if TYPE_CHECKING:
        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, fn: Callable[[sqlite3.Connection], T], *, rerun_safe: bool = False) -> T: ...

    async def create_dataset(self, dataset: DatasetRecord, version: DatasetVersion, items: Sequence[ItemRow]) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT OR IGNORE INTO datasets (id, team, name, latest_version, created_at, created_by) "
                "VALUES (?,?,?,?,?,?)",
                (dataset.id, dataset.team, dataset.name, version.version, dataset.created_at, dataset.created_by),
            )
            if cur.rowcount != 1:
                return False
            _put_items(conn, version, items)
            return True

        return await self._write(fn)

    async def add_dataset_version(self, version: DatasetVersion, items: Sequence[ItemRow]) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("UPDATE datasets SET latest_version=? WHERE id=? AND latest_version=?",
                               (version.version, version.dataset_id, version.parent))
            if cur.rowcount != 1:
                return False
            _put_items(conn, version, items)
            return True

        return await self._write(fn)

    async def get_dataset(self, dataset_id: str) -> DatasetRecord | None:
        def fn(conn: sqlite3.Connection) -> DatasetRecord | None:
            row = conn.execute("SELECT * FROM datasets WHERE id=?", (dataset_id,)).fetchone()
            return None if row is None else _build(DatasetRecord, row)

        return await self._run(fn)

    async def list_datasets(self, *, teams: Sequence[str] | None = None) -> list[DatasetRecord]:
        def fn(conn: sqlite3.Connection) -> list[DatasetRecord]:
            args: list[Any] = []
            sql = "SELECT * FROM datasets" + _teams_clause(teams, args) + " ORDER BY created_at DESC, id"
            return [_build(DatasetRecord, r) for r in conn.execute(sql, args)]

        return await self._run(fn)

    async def dataset_versions(self, dataset_id: str) -> list[DatasetVersion]:
        def fn(conn: sqlite3.Connection) -> list[DatasetVersion]:
            rows = conn.execute("SELECT * FROM dataset_versions WHERE dataset_id=? ORDER BY version", (dataset_id,))
            return [_build(DatasetVersion, r) for r in rows]

        return await self._run(fn)

    async def version_items(self, dataset_id: str, version: int) -> list[ItemRow]:
        def fn(conn: sqlite3.Connection) -> list[ItemRow]:
            rows = conn.execute(
                "SELECT i.item_id, i.revision_id, r.content FROM dataset_items i JOIN dataset_revisions r "
                "ON r.dataset_id = i.dataset_id AND r.revision_id = i.revision_id "
                "WHERE i.dataset_id=? AND i.version=? ORDER BY i.position",
                (dataset_id, version),
            )
            return [ItemRow(r["item_id"], r["revision_id"], r["content"]) for r in rows]

        return await self._run(fn)

    async def save_slice(self, slice_: SliceRecord) -> SliceRecord:
        def fn(conn: sqlite3.Connection) -> SliceRecord:
            (latest,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM dataset_slices WHERE dataset_id=? AND name=?",
                                     (slice_.dataset_id, slice_.name)).fetchone()
            stored = dataclasses.replace(slice_, version=latest + 1)
            _insert(conn, "dataset_slices", stored)
            return stored

        return await self._write(fn)

    async def list_slices(self, dataset_id: str) -> list[SliceRecord]:
        def fn(conn: sqlite3.Connection) -> list[SliceRecord]:
            rows = conn.execute("SELECT * FROM dataset_slices WHERE dataset_id=? ORDER BY name, version", (dataset_id,))
            return [_build(SliceRecord, r) for r in rows]

        return await self._run(fn)

    async def save_suite(self, suite: SuiteRecord) -> SuiteRecord:
        def fn(conn: sqlite3.Connection) -> SuiteRecord:
            (latest,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM suites WHERE team=? AND name=?",
                                     (suite.team, suite.name)).fetchone()
            stored = dataclasses.replace(suite, version=latest + 1)
            _insert(conn, "suites", stored)
            return stored

        return await self._write(fn)

    async def get_suite(self, suite_id: str) -> SuiteRecord | None:
        def fn(conn: sqlite3.Connection) -> SuiteRecord | None:
            row = conn.execute("SELECT * FROM suites WHERE id=?", (suite_id,)).fetchone()
            return None if row is None else _build(SuiteRecord, row)

        return await self._run(fn)

    async def list_suites(self, *, teams: Sequence[str] | None = None) -> list[SuiteRecord]:
        def fn(conn: sqlite3.Connection) -> list[SuiteRecord]:
            args: list[Any] = []
            sql = "SELECT * FROM suites" + _teams_clause(teams, args) + " ORDER BY created_at DESC, id"
            return [_build(SuiteRecord, r) for r in conn.execute(sql, args)]

        return await self._run(fn)

    async def create_comparison(
        self, comparison: ComparisonRecord, *, request_key: str, body_hash: str
    ) -> tuple[ComparisonRecord, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[ComparisonRecord, bool]:
            row = conn.execute("SELECT body_hash, comparison_id FROM comparison_keys WHERE key=?",
                               (request_key,)).fetchone()
            if row is not None:
                if row["body_hash"] != body_hash:
                    raise IdempotencyConflict(request_key)
                first = conn.execute("SELECT * FROM comparisons WHERE id=?", (row["comparison_id"],)).fetchone()
                return _build(ComparisonRecord, first), False
            _insert(conn, "comparisons", comparison)
            conn.execute("INSERT INTO comparison_keys (key, body_hash, comparison_id, created_at) VALUES (?,?,?,?)",
                         (request_key, body_hash, comparison.id, comparison.created_at))
            return comparison, True

        return await self._write(fn)

    async def find_request_key(self, request_key: str) -> tuple[str, ComparisonRecord] | None:
        def fn(conn: sqlite3.Connection) -> tuple[str, ComparisonRecord] | None:
            row = conn.execute(
                "SELECT k.body_hash AS key_body_hash, c.* FROM comparison_keys k JOIN comparisons c "
                "ON c.id = k.comparison_id WHERE k.key=?", (request_key,)).fetchone()
            return None if row is None else (row["key_body_hash"], _build(ComparisonRecord, row))

        return await self._run(fn)

    async def get_comparison(self, comparison_id: str) -> ComparisonRecord | None:
        def fn(conn: sqlite3.Connection) -> ComparisonRecord | None:
            row = conn.execute("SELECT * FROM comparisons WHERE id=?", (comparison_id,)).fetchone()
            return None if row is None else _build(ComparisonRecord, row)

        return await self._run(fn)

    async def list_comparisons(
        self, *, teams: Sequence[str] | None = None, suite_id: str | None = None, limit: int = 200
    ) -> list[ComparisonRecord]:
        def fn(conn: sqlite3.Connection) -> list[ComparisonRecord]:
            args: list[Any] = []
            where = _teams_clause(teams, args)
            if suite_id is not None:
                where += (" AND" if where else " WHERE") + " suite_id=?"
                args.append(suite_id)
            sql = "SELECT * FROM comparisons" + where + " ORDER BY created_at DESC, id LIMIT ?"
            args.append(limit)
            return [_build(ComparisonRecord, r) for r in conn.execute(sql, args)]

        return await self._run(fn)
