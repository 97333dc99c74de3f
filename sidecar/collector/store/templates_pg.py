"""Comparison templates and archived groups in PostgreSQL (:class:`sidecar.collector.store.base.TemplateStore`),
mixed into :class:`sidecar.collector.store.postgres.CollectorPostgresStore`. A save's request key
row is inserted first, so a concurrent save with the same key waits on it and then returns the
version it committed; the header moves with one conditional update (the row lock makes a
concurrent save of the same revision wait, then find it moved, and write nothing)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from sidecar.collector.store.template_records import RevisionConflict, TemplateExists, TemplateRecord, TemplateVersion
from sidecar.store.errors import IdempotencyConflict

T = TypeVar("T")
Conn = Any  # asyncpg.Connection; asyncpg ships no type information


def _build(cls: type[T], row: Any) -> T:
    return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


async def _version(conn: Conn, template_id: str, version: int) -> TemplateVersion:
    row = await conn.fetchrow("SELECT * FROM comparison_template_versions WHERE template_id=$1 AND version=$2",
                              template_id, version)
    return _build(TemplateVersion, row)


class PostgresTemplates:
    if TYPE_CHECKING:
        def _open_pool(self) -> Any: ...

        async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def save_template(self, header: TemplateRecord, config: str, *, expected_revision: int | None,
                            request_key: str, body_hash: str) -> tuple[TemplateRecord, TemplateVersion, bool]:
        async def fn(conn: Conn) -> tuple[TemplateRecord, TemplateVersion, bool]:
            taken = await conn.fetchval(
                "INSERT INTO comparison_template_keys (key, body_hash, template_id, version, created_at) "
                "VALUES ($1, $2, $3, 0, $4) ON CONFLICT (key) DO NOTHING RETURNING 1",
                request_key, body_hash, header.id, header.updated_at)
            if taken is None:
                key = await conn.fetchrow("SELECT * FROM comparison_template_keys WHERE key=$1", request_key)
                if key["body_hash"] != body_hash:
                    raise IdempotencyConflict(request_key)
                got = await conn.fetchrow("SELECT * FROM comparison_templates WHERE id=$1", key["template_id"])
                return (_build(TemplateRecord, got), await _version(conn, key["template_id"], key["version"]), False)
            if expected_revision is None:
                saved = dataclasses.replace(header, revision=1)
                values = dataclasses.asdict(saved)
                marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
                inserted = await conn.fetchval(
                    f"INSERT INTO comparison_templates ({', '.join(values)}) VALUES ({marks}) "
                    "ON CONFLICT (team, name) DO NOTHING RETURNING 1", *values.values())
                if inserted is None:
                    raise TemplateExists(header.team, header.name)
            else:
                row = await conn.fetchrow(
                    "UPDATE comparison_templates SET revision = revision + 1, updated_at=$2 "
                    "WHERE id=$1 AND revision=$3 RETURNING *", header.id, header.updated_at, expected_revision)
                if row is None:
                    current = await conn.fetchval("SELECT revision FROM comparison_templates WHERE id=$1", header.id)
                    raise RevisionConflict(header.id, expected_revision, int(current or 0))
                saved = _build(TemplateRecord, row)
            version = TemplateVersion(saved.id, saved.revision, config, header.updated_at, header.created_by)
            await conn.execute("INSERT INTO comparison_template_versions (template_id, version, config, created_at, "
                               "created_by) VALUES ($1, $2, $3, $4, $5)", *dataclasses.astuple(version))
            await conn.execute("UPDATE comparison_template_keys SET template_id=$2, version=$3 WHERE key=$1",
                               request_key, saved.id, saved.revision)
            return saved, version, True

        return await self._tx(fn)

    async def get_template(self, template_id: str) -> TemplateRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM comparison_templates WHERE id=$1", template_id)
        return None if row is None else _build(TemplateRecord, row)

    async def template_versions(self, template_id: str) -> list[TemplateVersion]:
        rows = await self._open_pool().fetch(
            "SELECT * FROM comparison_template_versions WHERE template_id=$1 ORDER BY version DESC", template_id)
        return [_build(TemplateVersion, r) for r in rows]

    async def list_templates(self, *, teams: Sequence[str] | None = None) -> list[TemplateRecord]:
        rows = await self._open_pool().fetch(
            "SELECT * FROM comparison_templates WHERE ($1::text[] IS NULL OR team = ANY($1::text[])) "
            "ORDER BY updated_at DESC, id", None if teams is None else list(teams))
        return [_build(TemplateRecord, r) for r in rows]

    async def archive_comparison(self, comparison_id: str, *, now: float, by: str | None) -> float | None:
        async def fn(conn: Conn) -> float | None:
            if await conn.fetchval("SELECT 1 FROM comparisons WHERE id=$1", comparison_id) is None:
                return None
            await conn.execute("INSERT INTO comparison_archive (comparison_id, archived_at, archived_by) "
                               "VALUES ($1, $2, $3) ON CONFLICT (comparison_id) DO NOTHING", comparison_id, now, by)
            at = await conn.fetchval("SELECT archived_at FROM comparison_archive WHERE comparison_id=$1",
                                     comparison_id)
            return float(at)

        return await self._tx(fn)

    async def comparison_archived(self, comparison_id: str) -> float | None:
        at = await self._open_pool().fetchval("SELECT archived_at FROM comparison_archive WHERE comparison_id=$1",
                                              comparison_id)
        return None if at is None else float(at)
