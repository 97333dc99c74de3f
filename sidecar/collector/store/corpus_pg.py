"""The corpus part of the PostgreSQL store (:class:`sidecar.collector.store.base.CorpusStore`), mixed
into :class:`sidecar.collector.store.postgres.CollectorPostgresStore`.

Concurrency: a new dataset version moves ``latest_version`` with one conditional update
(the row lock makes a concurrent edit of the same parent wait, then find it moved, and
write nothing); the next version number of a slice or a suite is taken under a
transaction-scoped advisory lock on its name, so two sidecars saving the same name at
once get consecutive versions; a request key's row is inserted first, so a concurrent
start with the same key waits on it and then returns the same group."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

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
Conn = Any  # asyncpg.Connection; asyncpg ships no type information


def _build(cls: type[T], row: Any) -> T:
    return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


async def _insert(conn: Conn, table: str, record: Any) -> None:
    values = dataclasses.asdict(record)
    marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
    await conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})", *values.values())


async def _put_items(conn: Conn, version: DatasetVersion, items: Sequence[ItemRow]) -> None:
    await conn.executemany(
        "INSERT INTO dataset_revisions (dataset_id, revision_id, item_id, content) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT DO NOTHING",
        [(version.dataset_id, i.revision_id, i.item_id, i.content) for i in items],
    )
    await conn.executemany(
        "INSERT INTO dataset_items (dataset_id, version, position, item_id, revision_id) VALUES ($1, $2, $3, $4, $5)",
        [(version.dataset_id, version.version, n, i.item_id, i.revision_id) for n, i in enumerate(items)],
    )
    await _insert(conn, "dataset_versions", version)


_TEAMS = "($1::text[] IS NULL OR team = ANY($1::text[]))"


class PostgresCorpus:
    if TYPE_CHECKING:
        def _open_pool(self) -> Any: ...

        async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def create_dataset(self, dataset: DatasetRecord, version: DatasetVersion, items: Sequence[ItemRow]) -> bool:
        async def fn(conn: Conn) -> bool:
            made = await conn.fetchval(
                "INSERT INTO datasets (id, team, name, latest_version, created_at, created_by) "
                "VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (team, name) DO NOTHING RETURNING 1",
                dataset.id, dataset.team, dataset.name, version.version, dataset.created_at, dataset.created_by,
            )
            if made is None:
                return False
            await _put_items(conn, version, items)
            return True

        return await self._tx(fn)

    async def add_dataset_version(self, version: DatasetVersion, items: Sequence[ItemRow]) -> bool:
        async def fn(conn: Conn) -> bool:
            moved = await conn.fetchval(
                "UPDATE datasets SET latest_version=$2 WHERE id=$1 AND latest_version=$3 RETURNING 1",
                version.dataset_id, version.version, version.parent,
            )
            if moved is None:
                return False
            await _put_items(conn, version, items)
            return True

        return await self._tx(fn)

    async def get_dataset(self, dataset_id: str) -> DatasetRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM datasets WHERE id=$1", dataset_id)
        return None if row is None else _build(DatasetRecord, row)

    async def list_datasets(self, *, teams: Sequence[str] | None = None) -> list[DatasetRecord]:
        rows = await self._open_pool().fetch(
            f"SELECT * FROM datasets WHERE {_TEAMS} ORDER BY created_at DESC, id", None if teams is None else list(teams)
        )
        return [_build(DatasetRecord, r) for r in rows]

    async def dataset_versions(self, dataset_id: str) -> list[DatasetVersion]:
        rows = await self._open_pool().fetch(
            "SELECT * FROM dataset_versions WHERE dataset_id=$1 ORDER BY version", dataset_id)
        return [_build(DatasetVersion, r) for r in rows]

    async def version_items(self, dataset_id: str, version: int) -> list[ItemRow]:
        rows = await self._open_pool().fetch(
            "SELECT i.item_id, i.revision_id, r.content FROM dataset_items i JOIN dataset_revisions r "
            "ON r.dataset_id = i.dataset_id AND r.revision_id = i.revision_id "
            "WHERE i.dataset_id=$1 AND i.version=$2 ORDER BY i.position",
            dataset_id, version,
        )
        return [ItemRow(r["item_id"], r["revision_id"], r["content"]) for r in rows]

    async def save_slice(self, slice_: SliceRecord) -> SliceRecord:
        async def fn(conn: Conn) -> SliceRecord:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"slice\x1f{slice_.dataset_id}\x1f{slice_.name}")
            latest = await conn.fetchval(
                "SELECT COALESCE(MAX(version), 0) FROM dataset_slices WHERE dataset_id=$1 AND name=$2",
                slice_.dataset_id, slice_.name)
            stored = dataclasses.replace(slice_, version=int(latest) + 1)
            await _insert(conn, "dataset_slices", stored)
            return stored

        return await self._tx(fn)

    async def list_slices(self, dataset_id: str) -> list[SliceRecord]:
        rows = await self._open_pool().fetch(
            "SELECT * FROM dataset_slices WHERE dataset_id=$1 ORDER BY name, version", dataset_id)
        return [_build(SliceRecord, r) for r in rows]

    async def save_suite(self, suite: SuiteRecord) -> SuiteRecord:
        async def fn(conn: Conn) -> SuiteRecord:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext($1))", f"suite\x1f{suite.team}\x1f{suite.name}")
            latest = await conn.fetchval(
                "SELECT COALESCE(MAX(version), 0) FROM suites WHERE team=$1 AND name=$2", suite.team, suite.name)
            stored = dataclasses.replace(suite, version=int(latest) + 1)
            await _insert(conn, "suites", stored)
            return stored

        return await self._tx(fn)

    async def get_suite(self, suite_id: str) -> SuiteRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM suites WHERE id=$1", suite_id)
        return None if row is None else _build(SuiteRecord, row)

    async def list_suites(self, *, teams: Sequence[str] | None = None) -> list[SuiteRecord]:
        rows = await self._open_pool().fetch(
            f"SELECT * FROM suites WHERE {_TEAMS} ORDER BY created_at DESC, id", None if teams is None else list(teams))
        return [_build(SuiteRecord, r) for r in rows]

    async def create_comparison(
        self, comparison: ComparisonRecord, *, request_key: str, body_hash: str
    ) -> tuple[ComparisonRecord, bool]:
        async def fn(conn: Conn) -> tuple[ComparisonRecord, bool]:
            taken = await conn.fetchval(
                "INSERT INTO comparison_keys (key, body_hash, comparison_id, created_at) VALUES ($1, $2, $3, $4) "
                "ON CONFLICT (key) DO NOTHING RETURNING 1",
                request_key, body_hash, comparison.id, comparison.created_at,
            )
            if taken is None:
                row = await conn.fetchrow("SELECT body_hash, comparison_id FROM comparison_keys WHERE key=$1", request_key)
                if row["body_hash"] != body_hash:
                    raise IdempotencyConflict(request_key)
                first = await conn.fetchrow("SELECT * FROM comparisons WHERE id=$1", row["comparison_id"])
                return _build(ComparisonRecord, first), False
            await _insert(conn, "comparisons", comparison)
            return comparison, True

        return await self._tx(fn)

    async def find_request_key(self, request_key: str) -> tuple[str, ComparisonRecord] | None:
        row = await self._open_pool().fetchrow(
            "SELECT k.body_hash AS key_body_hash, c.* FROM comparison_keys k JOIN comparisons c "
            "ON c.id = k.comparison_id WHERE k.key=$1", request_key)
        return None if row is None else (row["key_body_hash"], _build(ComparisonRecord, row))

    async def get_comparison(self, comparison_id: str) -> ComparisonRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM comparisons WHERE id=$1", comparison_id)
        return None if row is None else _build(ComparisonRecord, row)

    async def list_comparisons(
        self, *, teams: Sequence[str] | None = None, suite_id: str | None = None, limit: int = 200
    ) -> list[ComparisonRecord]:
        rows = await self._open_pool().fetch(
            f"SELECT * FROM comparisons WHERE {_TEAMS} AND ($3::text IS NULL OR suite_id = $3::text) "
            "ORDER BY created_at DESC, id LIMIT $2",
            None if teams is None else list(teams), limit, suite_id,
        )
        return [_build(ComparisonRecord, r) for r in rows]
