"""A fired watch written before watch periods existed migrates into period 1 and re-arms on resolve.

The database is built with every migration before the one that added the periods (issue 23,
item 5), holding a watch whose detector fired and its alert, as the previous release wrote
them; opening the store applies the missing migration on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import asyncpg

from sidecar.store import make_store, schema, schema_pg
from sidecar.store.watch_records import AlertRow, WatchRecord
from tests.store.conftest import Backend
from tests.store.factories import trial
from tests.store.test_watch_conformance import DESIGN, watch_rows

NEW_WATCH_FIELDS = ("period", "period_started_at", "judged_before")


def _before_periods(migrations: tuple[str, ...]) -> int:
    return next(i for i, script in enumerate(migrations) if "judged_before" in script)


def _rows() -> list[tuple[str, dict[str, object]]]:
    _, w, day = watch_rows()
    fired = dataclasses.replace(w, statistic=DESIGN.threshold + 3, judged=40, decisive=38, fired_at=31, old_wins=30,
                                new_wins=8, ties=2)
    watch = {k: v for k, v in dataclasses.asdict(fired).items() if k not in NEW_WATCH_FIELDS}
    alert = dataclasses.asdict(AlertRow("wa1.alert", "wa1", "team-a", "firing", 2500.0, json.dumps({"judged": 31})))
    del alert["period"]
    source = dataclasses.asdict(trial("t1", status="adopted"))
    day_row = dataclasses.asdict(day)
    for row in (source, day_row):
        row["prompt_retention"] = int(bool(row["prompt_retention"]))
        for later in ("on_decision", "segments", "segment_cap", "segment_min_cases"):  # later migrations (issues 26, 27)
            row.pop(later, None)
    return [("trials", source), ("trials", day_row), ("watches", watch), ("alerts", alert)]


def _build_sqlite(path: str) -> None:
    version = _before_periods(schema.MIGRATIONS)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for script in schema.MIGRATIONS[:version]:
            for statement in schema.statements(script):
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version={version}")
        for table, values in _rows():
            conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})",
                         tuple(values.values()))
    finally:
        conn.close()


async def _build_postgres(dsn: str) -> None:
    version = _before_periods(schema_pg.MIGRATIONS)
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(
            "CREATE TABLE shadowtrial_schema_version (version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        for number, script in enumerate(schema_pg.MIGRATIONS[:version], start=1):
            if script.strip():  # a step moved to the collector's store is empty, as schema_pg.migrate skips it
                await conn.execute(script)
            await conn.execute("INSERT INTO shadowtrial_schema_version VALUES ($1, 0)", number)
        for table, values in _rows():
            if table == "trials":
                values = {**values, "prompt_retention": bool(values["prompt_retention"])}
            marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
            await conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})", *values.values())
    finally:
        await conn.close()


async def test_a_fired_watch_from_before_periods_is_period_1_and_re_arms_on_resolve(backend: Backend) -> None:
    if backend.kind == "sqlite":
        _build_sqlite(backend.url)
    else:
        await _build_postgres(backend.url)
    store = make_store(backend.url)
    await store.open()
    try:
        w = await store.get_watch("wa1")
        assert isinstance(w, WatchRecord) and w.fired_at == 31
        assert (w.period, w.period_started_at, w.period_start, w.judged_before) == (1, None, w.created_at, 0)
        alert = await store.get_alert("wa1.alert")
        assert alert is not None and alert.period == 1 and alert.status == "firing"
        _, changed = await store.transition_alert("wa1.alert", "resolved", allowed_from=("firing",), actor="carol",
                                                  now=4000.0)
        assert changed
        armed = await store.get_watch("wa1")
        assert armed is not None
        assert (armed.period, armed.period_start, armed.judged_before, armed.statistic, armed.fired_at) == (
            2, 4000.0, 40, 0, None)
    finally:
        await store.close()
