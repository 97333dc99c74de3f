"""The scoring sequence (issue 31): each scored case of a trial is numbered 1, 2, 3, ... in the
transaction that scores it, on every backend; the migration numbers cases scored before it by
(finished_at, id). The betting sequence folds cases in this order (policies/stream.py)."""

from __future__ import annotations

import sqlite3

import asyncpg

from sidecar.store import schema, schema_pg
from sidecar.store.base import Store
from tests.store.conftest import Backend, OpenStore
from tests.store.factories import finish, start, trial

#: (case, outcome, score, finished_at), in the order the cases finish.
FINISHES = [("c3", "judged", 1.0, 10.0), ("c1", "candidate_failed", None, 11.0), ("c5", "judged", -1.0, 12.0),
            ("c2", "judged", 0.5, 12.0), ("c4", "judged", 0.0, 13.0), ("c6", "judge_failed", None, 14.0)]


async def _finish_all(store: Store) -> None:
    await store.create_trial(trial("t1"))
    for case_id, *_ in sorted(FINISHES):
        await store.claim_case(start(case_id))
    for case_id, outcome, score, at in FINISHES:
        assert await store.finish_case(finish(case_id, outcome=outcome, score=score, finished_at=at), "A")


async def test_scored_cases_are_numbered_in_the_order_they_are_scored_without_gaps(stores: OpenStore) -> None:
    store = await stores()
    await _finish_all(store)
    assert await store.scores_after("t1", 0) == [(1, 1.0), (2, -1.0), (3, 0.5), (4, 0.0)]
    assert await store.scores_after("t1", 2) == [(3, 0.5), (4, 0.0)]
    assert await store.scores_after("t1", 1, limit=2) == [(2, -1.0), (3, 0.5)]
    assert await store.scores_after("t1", 4) == [] and await store.scores_after("nope", 0) == []


async def test_the_migration_numbers_cases_scored_before_it_by_finish_time_then_id(
    stores: OpenStore, backend: Backend
) -> None:
    store = await stores()
    await _finish_all(store)
    # As a database from before the migration: no numbers. Then the migration's backfill.
    backfill = [s for s in schema.statements(schema.MIGRATIONS[14]) if s.startswith("UPDATE")]
    pg_script = schema_pg.MIGRATIONS[13]
    assert "score_seq" in schema.MIGRATIONS[14] and "score_seq" in pg_script
    if backend.kind == "sqlite":
        conn = sqlite3.connect(backend.url, isolation_level=None)
        try:
            conn.execute("UPDATE cases SET score_seq = NULL")
            conn.execute("UPDATE trials SET scored_seq = 0")
            for statement in backfill:
                conn.execute(statement)
            counter = conn.execute("SELECT scored_seq FROM trials WHERE id = 't1'").fetchone()[0]
        finally:
            conn.close()
    else:
        pg = await asyncpg.connect(backend.url)
        try:
            await pg.execute("UPDATE cases SET score_seq = NULL; UPDATE trials SET scored_seq = 0")
            for statement in (s for s in pg_script.split(";") if s.strip().startswith("UPDATE")):
                await pg.execute(statement)
            counter = await pg.fetchval("SELECT scored_seq FROM trials WHERE id = 't1'")
        finally:
            await pg.close()
    # c5 and c2 finished at the same time: the id breaks the tie.
    assert await store.scores_after("t1", 0) == [(1, 1.0), (2, 0.5), (3, -1.0), (4, 0.0)]
    assert counter == 4
    # The next scored case continues the sequence.
    await store.claim_case(start("c7"))
    assert await store.finish_case(finish("c7", score=1.0, finished_at=20.0), "A")
    assert (await store.scores_after("t1", 4)) == [(5, 1.0)]
