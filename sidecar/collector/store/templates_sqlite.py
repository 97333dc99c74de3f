"""Comparison templates and archived groups in SQLite (:class:`sidecar.collector.store.base.TemplateStore`),
mixed into :class:`sidecar.collector.store.sqlite.CollectorSQLiteStore`. Each write is one
``BEGIN IMMEDIATE`` transaction: the request key, the version and the header's move land together."""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from sidecar.collector.store.template_records import RevisionConflict, TemplateExists, TemplateRecord, TemplateVersion
from sidecar.store.errors import IdempotencyConflict

T = TypeVar("T")


def _build(cls: type[T], row: sqlite3.Row) -> T:
    return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def _version(conn: sqlite3.Connection, template_id: str, version: int) -> TemplateVersion:
    row = conn.execute("SELECT * FROM comparison_template_versions WHERE template_id=? AND version=?",
                       (template_id, version)).fetchone()
    return _build(TemplateVersion, row)


class SQLiteTemplates:
    if TYPE_CHECKING:
        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, fn: Callable[[sqlite3.Connection], T], *, rerun_safe: bool = False) -> T: ...

    async def save_template(self, header: TemplateRecord, config: str, *, expected_revision: int | None,
                            request_key: str, body_hash: str) -> tuple[TemplateRecord, TemplateVersion, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[TemplateRecord, TemplateVersion, bool]:
            key = conn.execute("SELECT * FROM comparison_template_keys WHERE key=?", (request_key,)).fetchone()
            if key is not None:
                if key["body_hash"] != body_hash:
                    raise IdempotencyConflict(request_key)
                got = conn.execute("SELECT * FROM comparison_templates WHERE id=?", (key["template_id"],)).fetchone()
                return _build(TemplateRecord, got), _version(conn, key["template_id"], key["version"]), False
            if expected_revision is None:
                if conn.execute("SELECT 1 FROM comparison_templates WHERE team=? AND name=?",
                                (header.team, header.name)).fetchone() is not None:
                    raise TemplateExists(header.team, header.name)
                saved = dataclasses.replace(header, revision=1)
                values = dataclasses.asdict(saved)
                conn.execute(f"INSERT INTO comparison_templates ({', '.join(values)}) "
                             f"VALUES ({', '.join('?' for _ in values)})", tuple(values.values()))
            else:
                cur = conn.execute("UPDATE comparison_templates SET revision = revision + 1, updated_at=? "
                                   "WHERE id=? AND revision=?", (header.updated_at, header.id, expected_revision))
                row = conn.execute("SELECT * FROM comparison_templates WHERE id=?", (header.id,)).fetchone()
                if cur.rowcount != 1:
                    raise RevisionConflict(header.id, expected_revision, row["revision"])
                saved = _build(TemplateRecord, row)
            version = TemplateVersion(saved.id, saved.revision, config, header.updated_at, header.created_by)
            conn.execute("INSERT INTO comparison_template_versions (template_id, version, config, created_at, "
                         "created_by) VALUES (?,?,?,?,?)", dataclasses.astuple(version))
            conn.execute("INSERT INTO comparison_template_keys (key, body_hash, template_id, version, created_at) "
                         "VALUES (?,?,?,?,?)", (request_key, body_hash, saved.id, saved.revision, header.updated_at))
            return saved, version, True

        return await self._write(fn)

    async def get_template(self, template_id: str) -> TemplateRecord | None:
        def fn(conn: sqlite3.Connection) -> TemplateRecord | None:
            row = conn.execute("SELECT * FROM comparison_templates WHERE id=?", (template_id,)).fetchone()
            return None if row is None else _build(TemplateRecord, row)

        return await self._run(fn)

    async def template_versions(self, template_id: str) -> list[TemplateVersion]:
        def fn(conn: sqlite3.Connection) -> list[TemplateVersion]:
            rows = conn.execute("SELECT * FROM comparison_template_versions WHERE template_id=? ORDER BY version DESC",
                                (template_id,))
            return [_build(TemplateVersion, r) for r in rows]

        return await self._run(fn)

    async def list_templates(self, *, teams: Sequence[str] | None = None) -> list[TemplateRecord]:
        def fn(conn: sqlite3.Connection) -> list[TemplateRecord]:
            args: list[Any] = []
            where = ""
            if teams is not None:
                args.extend(teams)
                where = f" WHERE team IN ({', '.join('?' for _ in teams)})" if teams else " WHERE 0"
            rows = conn.execute(f"SELECT * FROM comparison_templates{where} ORDER BY updated_at DESC, id", args)
            return [_build(TemplateRecord, r) for r in rows]

        return await self._run(fn)

    async def archive_comparison(self, comparison_id: str, *, now: float, by: str | None) -> float | None:
        def fn(conn: sqlite3.Connection) -> float | None:
            if conn.execute("SELECT 1 FROM comparisons WHERE id=?", (comparison_id,)).fetchone() is None:
                return None
            conn.execute("INSERT OR IGNORE INTO comparison_archive (comparison_id, archived_at, archived_by) "
                         "VALUES (?,?,?)", (comparison_id, now, by))
            at: float = conn.execute("SELECT archived_at FROM comparison_archive WHERE comparison_id=?",
                                     (comparison_id,)).fetchone()[0]
            return at

        return await self._write(fn)

    async def comparison_archived(self, comparison_id: str) -> float | None:
        def fn(conn: sqlite3.Connection) -> float | None:
            row = conn.execute("SELECT archived_at FROM comparison_archive WHERE comparison_id=?",
                               (comparison_id,)).fetchone()
            return None if row is None else float(row[0])

        return await self._run(fn)
