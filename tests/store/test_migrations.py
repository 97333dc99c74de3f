"""A database written by the previous release opens and migrates, on every backend; a sidecar's
database never gets the collector's tables, and one from before the wings' split keeps them.

The database is built with the migrations before the one that added the kept
states (SQLite's 3, PostgreSQL's 2) and holds a trial; opening the store
applies what is missing, and the trial reads back whole, with no kept state yet.
"""

from __future__ import annotations

import dataclasses
import sqlite3

import asyncpg

from sidecar.collector.store import make_collector_store
from sidecar.collector.store import schema as collector_schema
from sidecar.collector.store.schema import Migration
from sidecar.store import make_store, schema, schema_pg
from sidecar.store.records import KeptState, TrialRecord
from tests.store.conftest import Backend
from tests.store.factories import trial
from uplink.collector_store import Held

#: Columns added by the kept-states migration and every one after it.
NEW_FIELDS = ("sequence_state", "judge_health_state", "disputed_calls", "started_by", "source", "source_from",
              "source_to", "source_size", "replay_cursor", "replay_fed", "state_revision", "kind", "watch_id",
              "on_decision", "segments", "segment_cap", "segment_min_cases")


def _before_kept_states(migrations: tuple[str, ...]) -> int:
    """The schema version just before the migration that added the kept states."""
    return next(i for i, script in enumerate(migrations) if "sequence_state" in script)


def _old_row(record: TrialRecord) -> dict[str, object]:
    values = dataclasses.asdict(record)
    for name in NEW_FIELDS:
        del values[name]
    return values


def _build_sqlite(path: str, record: TrialRecord) -> int:
    version = _before_kept_states(schema.MIGRATIONS)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for script in schema.MIGRATIONS[:version]:
            for statement in schema.statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={version}")
        values = _old_row(record)
        values["prompt_retention"] = int(record.prompt_retention)
        conn.execute(
            f"INSERT INTO trials ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})",
            tuple(values.values()),
        )
    finally:
        conn.close()
    return version


async def _build_postgres(dsn: str, record: TrialRecord) -> int:
    version = _before_kept_states(schema_pg.MIGRATIONS)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "CREATE TABLE shadowtrial_schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        for number, script in enumerate(schema_pg.MIGRATIONS[:version], start=1):
            await conn.execute(script)
            await conn.execute("INSERT INTO shadowtrial_schema_version VALUES ($1, 0)", number)
        values = _old_row(record)
        marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
        await conn.execute(f"INSERT INTO trials ({', '.join(values)}) VALUES ({marks})", *values.values())
    finally:
        await conn.close()
    return version


async def _version(backend: Backend) -> int:
    if backend.kind == "sqlite":
        conn = sqlite3.connect(backend.url)
        try:
            version: int = conn.execute("PRAGMA user_version").fetchone()[0]
            return version
        finally:
            conn.close()
    pg = await asyncpg.connect(backend.url)
    try:
        return int(await pg.fetchval("SELECT MAX(version) FROM shadowtrial_schema_version"))
    finally:
        await pg.close()


async def test_a_database_from_before_the_kept_states_opens_and_migrates(backend: Backend) -> None:
    # A trial from before ``on_decision`` keeps running after a decision, as it did (issue 26).
    record = dataclasses.replace(trial("t1", route="/chat", prompt_retention=False), on_decision="continue")
    if backend.kind == "sqlite":
        before, latest = _build_sqlite(backend.url, record), len(schema.MIGRATIONS)
    else:
        before, latest = await _build_postgres(backend.url, record), len(schema_pg.MIGRATIONS)
    assert await _version(backend) == before < latest

    store = make_store(backend.url)
    await store.open()
    try:
        assert await _version(backend) == latest
        got = await store.get_trial("t1")
        assert got == record and got is not None and (got.sequence_state, got.judge_health_state) == (None, None)
        assert got.disputed_calls == 0
        assert got.started_by is None  # trials from before it was recorded have no starter
        kept = await store.save_states("t1", sequence=KeptState('{"n":1}', 1, None))
        assert kept is not None and kept.sequence_state == '{"n":1}'
        # The figures the case ledger writes are untouched by the migration.
        snap = await store.snapshot("t1")
        assert snap is not None and snap.record == kept and snap.funnel == {}
    finally:
        await store.close()
    # Opening again applies nothing more.
    again = make_store(backend.url)
    await again.open()
    try:
        assert await _version(backend) == latest
        assert await again.get_trial("t1") == kept
    finally:
        await again.close()


#: The control-plane wing's tables (sidecar/collector/store/schema.py): only a collector's database
#: has them.
COLLECTOR_TABLES = frozenset({
    "collected_records", "datasets", "dataset_versions", "dataset_revisions", "dataset_items", "dataset_slices",
    "suites", "comparisons", "comparison_keys", "comparison_runs", "comparison_attempts", "comparison_scores",
    "comparison_item_leases", "collector_schema_version",
    *("comparison_templates", "comparison_template_versions", "comparison_template_keys", "comparison_archive"),
})
#: The collector's tables of steps added after the wings' split (its migration 4 on): a database
#: from before the split has none of them, and a collector opening it creates them.
SINCE_SPLIT = frozenset({"comparison_templates", "comparison_template_versions", "comparison_template_keys",
                         "comparison_archive", "comparison_item_leases"})


async def _tables(backend: Backend) -> set[str]:
    if backend.kind == "sqlite":
        conn = sqlite3.connect(backend.url)
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
            return {name for (name,) in rows}
        finally:
            conn.close()
    pg = await asyncpg.connect(backend.url)
    try:
        rows = await pg.fetch("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        return {r["tablename"] for r in rows}
    finally:
        await pg.close()


async def test_a_sidecar_database_has_no_collector_table_and_a_collectors_has_them(backend: Backend) -> None:
    store = make_store(backend.url)
    await store.open()
    await store.close()
    sidecar_tables = await _tables(backend)
    assert sidecar_tables and not sidecar_tables & COLLECTOR_TABLES
    assert not hasattr(store, "put_collected") and not hasattr(store, "create_dataset")

    collector = make_collector_store(backend.url)  # a collector's database: the sidecar's tables and its own
    await collector.open()
    try:
        assert await collector.put_collected([Held("r1", "case_result", "s1", b"{}", 1.0, "a", "t1")]) == ["r1"]
    finally:
        await collector.close()
    assert await _tables(backend) == sidecar_tables | COLLECTOR_TABLES


def _before_the_split(migrations: tuple[str, ...], collector: tuple[Migration, ...]) -> list[str]:
    """The sidecar's migrations as a release before the wings' split applied them: each empty
    (moved) step was the collector's next one."""
    moved = iter(collector)
    return [script or next(moved).script for script in migrations]


async def test_a_sidecar_database_from_before_the_split_keeps_its_collector_tables(backend: Backend) -> None:
    if backend.kind == "sqlite":
        scripts = _before_the_split(schema.MIGRATIONS, collector_schema.SQLITE)
        conn = sqlite3.connect(backend.url, isolation_level=None)
        try:
            for script in scripts:
                for statement in schema.statements(script):
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version={len(scripts)}")
            conn.execute("INSERT INTO collected_records (id, kind, sidecar_id, body, received_at) "
                         "VALUES ('old', 'case_result', 's1', x'7b7d', 1.0)")
        finally:
            conn.close()
    else:
        scripts = _before_the_split(schema_pg.MIGRATIONS, collector_schema.POSTGRES)
        pg = await asyncpg.connect(backend.url)
        try:
            await pg.execute("CREATE TABLE shadowtrial_schema_version "
                             "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
            for number, script in enumerate(scripts, start=1):
                await pg.execute(script)
                await pg.execute("INSERT INTO shadowtrial_schema_version VALUES ($1, 0)", number)
            await pg.execute("INSERT INTO collected_records (id, kind, sidecar_id, body, received_at) "
                             "VALUES ('old', 'case_result', 's1', '\\x7b7d', 1.0)")
        finally:
            await pg.close()
    tables = await _tables(backend)
    assert COLLECTOR_TABLES - tables == {"collector_schema_version"} | SINCE_SPLIT

    store = make_store(backend.url)  # a sidecar: applies nothing, drops nothing
    await store.open()
    await store.close()
    assert await _tables(backend) == tables

    collector = make_collector_store(backend.url)  # a collector: adopts the tables it finds, rows and all
    await collector.open()
    try:
        assert await collector.put_collected([Held("old", "case_result", "s1", b"{}", 2.0, "a", "t1"),
                                              Held("new", "case_result", "s1", b"{}", 2.0, "a", "t1")]) == ["new"]
    finally:
        await collector.close()
    assert await _tables(backend) == tables | {"collector_schema_version"} | SINCE_SPLIT
