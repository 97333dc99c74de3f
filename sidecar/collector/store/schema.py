"""The collector's own migrations: the control-plane wing's tables, as an ordered sequence per
dialect, applied after the sidecar's (:mod:`sidecar.store.schema`, :mod:`sidecar.store.schema_pg`)
when the collector opens its store. A sidecar never applies them, so its database never holds
these tables.

The sequence is recorded in ``collector_schema_version`` (one row per step applied), apart
from the sidecar's version, so the two sequences grow independently. Before the wings had
sequences of their own, the sidecar's migrations created these tables (SQLite's 9, 11 and 13,
PostgreSQL's 8, 10 and 12; those steps are empty now): a step whose table already exists is
recorded as applied and not run, so such a database opens as it is. Nothing is ever dropped: a
sidecar's database from before keeps its (unused) collector tables.

Each step runs in one transaction with the version read under the write lock (SQLite's
``BEGIN IMMEDIATE``, PostgreSQL's advisory lock), so collectors starting at once on one database
apply each step once.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from sidecar.collector.store import corpus_runs_schema, corpus_schema, templates_schema
from sidecar.store.schema import statements

#: The pg_advisory_xact_lock key that serialises the collector's migrations (the sidecar's is
#: :data:`sidecar.store.schema_pg.MIGRATION_LOCK`).
MIGRATION_LOCK = 0x5F3C_2A91_7D0E_4B6D

VERSION_TABLE = "collector_schema_version"


@dataclass(frozen=True)
class Migration:
    #: A table the step creates: when it exists already, the sidecar's migrations of an earlier
    #: release created it, and the step is recorded without running.
    creates: str
    script: str


# 1: what a collector holds of the uplink (sidecar/collector/collected.py): each record once by
# id, as it came; exchanges of control-plane trials are run from here by the collector's engine
_COLLECTED = """
CREATE TABLE collected_records (
    seq {SERIAL} PRIMARY KEY{AUTOINCREMENT},
    id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    sidecar_id TEXT NOT NULL,
    team TEXT,
    trial_id TEXT,
    exchange_id TEXT,
    revision {INT},
    body {BLOB} NOT NULL,
    received_at {REAL} NOT NULL
);
CREATE INDEX collected_records_trial ON collected_records (trial_id, kind);
"""

#: An index, not a table: ``creates`` names it (PostgreSQL's ``to_regclass`` finds an index too).
_POSTURE_INDEX = "CREATE INDEX collected_records_posture ON collected_records (kind, team, sidecar_id, revision);"

SQLITE: tuple[Migration, ...] = (
    Migration("collected_records",
              _COLLECTED.format(SERIAL="INTEGER", AUTOINCREMENT=" AUTOINCREMENT", INT="INTEGER", BLOB="BLOB",
                                REAL="REAL")),
    # 2: corpus evidence (issue 13): datasets, versions, item revisions, slices, suites,
    # comparison groups and their request keys
    Migration("datasets", corpus_schema.SQLITE),
    # 3: running comparison groups (issue 13, items 3-4): the group's spend ledger, its
    # invocation attempts and their scores
    Migration("comparison_runs", corpus_runs_schema.SQLITE),
    # 4: comparison templates with versions and request keys, archived groups (issue 24)
    Migration("comparison_templates", templates_schema.SQLITE),
    # 5: a fleet of collectors shares a group's items by lease; a run's named error (issue 25)
    Migration("comparison_item_leases", corpus_runs_schema.LEASES_SQLITE),
    # 6: a team's latest posture read, and older ones pruned, per batch without a scan (issue 25)
    Migration("collected_records_posture", _POSTURE_INDEX),
)

POSTGRES: tuple[Migration, ...] = (
    Migration("collected_records",
              _COLLECTED.format(SERIAL="BIGSERIAL", AUTOINCREMENT="", INT="BIGINT", BLOB="BYTEA",
                                REAL="DOUBLE PRECISION")),
    Migration("datasets", corpus_schema.POSTGRES),
    Migration("comparison_runs", corpus_runs_schema.POSTGRES),
    Migration("comparison_templates", templates_schema.POSTGRES),
    Migration("comparison_item_leases", corpus_runs_schema.LEASES_POSTGRES),
    Migration("collected_records_posture", _POSTURE_INDEX),
)


def migrate_sqlite(conn: sqlite3.Connection) -> int:
    """Bring the SQLite database on ``conn`` (autocommit) up to ``len(SQLITE)``; returns the
    version it was at before."""
    before: int | None = None
    for number, migration in enumerate(SQLITE, start=1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
                         "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
            current: int = conn.execute(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}").fetchone()[0]
            before = current if before is None else before
            if number > current:
                exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                      (migration.creates,)).fetchone()
                if exists is None:
                    for statement in statements(migration.script):
                        conn.execute(statement)
                conn.execute(f"INSERT INTO {VERSION_TABLE} (version, applied_at) VALUES (?, ?)", (number, time.time()))
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
    return before or 0


async def migrate_postgres(conn: Any) -> int:
    """Bring the PostgreSQL database on ``conn`` (an asyncpg connection) up to
    ``len(POSTGRES)`` in one transaction; returns the version it was at before."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} "
                           "(version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)")
        current: int = await conn.fetchval(f"SELECT COALESCE(MAX(version), 0) FROM {VERSION_TABLE}")
        for number, migration in enumerate(POSTGRES, start=1):
            if number <= current:
                continue
            if await conn.fetchval("SELECT to_regclass($1)", migration.creates) is None:
                await conn.execute(migration.script)  # no arguments: asyncpg runs a multi-statement script
            await conn.execute(f"INSERT INTO {VERSION_TABLE} (version, applied_at) VALUES ($1, $2)",
                               number, time.time())
        return current
