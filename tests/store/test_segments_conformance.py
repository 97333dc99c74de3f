"""Per-segment storage (issue 27), on every backend: a trial tracks at most ``segment_cap``
segment values whatever its traffic carries, the first ones seen, and every case with a value
beyond the cap is kept pooled as ``other``; claims racing from two processes never pass the cap."""

from __future__ import annotations

import asyncio
import sqlite3
import tracemalloc
from pathlib import Path

from sidecar.store import cases_sql as c
from sidecar.store.dialect import sq
from sidecar.store.sqlite import SQLiteStore, track_segments
from tests.store.conftest import OpenStore
from tests.store.factories import finish, start, trial


async def test_claims_from_two_processes_track_at_most_the_cap(stores: OpenStore) -> None:
    store, peer = await stores(), await stores()
    await store.create_trial(trial("t1", segments='["tag:user", "route"]', segment_cap=5))

    async def claim(s: object, i: int) -> str:
        case = start(f"c{i}", segment_values=(("tag:user", f"u{i}"), ("route", "/chat")), segment_cap=5)
        return await s.claim_case(case)  # type: ignore[attr-defined, no-any-return]

    outcomes = await asyncio.gather(*(claim(store if i % 2 else peer, i) for i in range(60)))
    assert outcomes.count("claimed") == 60
    tracked = await store.tracked_segments("t1")
    assert len(tracked) == 5
    assert len({k for k, _, _ in tracked}) == 5
    for i in range(60):
        assert await store.finish_case(finish(f"c{i}", score=1.0), "A")
    judged = await store.judged_keys("t1")
    assert sum(n for k, n in judged.items() if k != "other") == 60 + 4  # route=/chat on all, 4 users tracked
    assert judged["other"] == 60 - 4
    cases = await store.segment_cases("t1")
    assert [c.seq for c in cases] == list(range(1, 61))
    assert all(c.keys for c in cases)


async def test_ten_thousand_distinct_tag_values_keep_rows_and_memory_at_the_cap(tmp_path: Path) -> None:
    """An adversarial tag (a new value per exchange) offered to one trial: tracked values and
    their rows stay at the cap, every other case is pooled as ``other``, and the memory kept
    does not grow with the distinct values. The claims run the store's own statements and
    tracking, in one transaction (10,000 transactions would only measure the disk)."""
    path = tmp_path / "cap.db"
    store = SQLiteStore(str(path))
    await store.open()
    await store.create_trial(trial("t1", segments='["tag:user"]', segment_cap=16))
    await store.close()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.row_factory = sqlite3.Row

    def claim(i: int) -> None:
        case = start(f"c{i}", segment_values=(("tag:user", f"user-{i:05d}"),), segment_cap=16)
        assert conn.execute(*sq(c.CLAIM, *c.claim_args(case, None, "running"))).rowcount == 1
        track_segments(conn, case)

    try:
        conn.execute("BEGIN IMMEDIATE")
        for i in range(8000):  # untraced (tracing costs ~1 ms a claim)
            claim(i)
        tracemalloc.start()
        before, _ = tracemalloc.get_traced_memory()
        for i in range(8000, 10_000):
            claim(i)
        after, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        conn.execute("COMMIT")
        tracked = [r["key"] for r in conn.execute("SELECT key FROM trial_segments ORDER BY ordinal")]
        (rows,) = conn.execute("SELECT COUNT(*) FROM trial_segments").fetchone()
        (pooled,) = conn.execute("SELECT COUNT(*) FROM cases WHERE segment_keys = '[\"other\"]'").fetchone()
        (longest,) = conn.execute("SELECT MAX(LENGTH(segment_keys)) FROM cases").fetchone()
    finally:
        conn.close()
    assert tracked == [f"tag:user=user-{i:05d}" for i in range(16)]
    assert rows == 16
    assert pooled == 10_000 - 16
    assert longest <= len('["tag:user=user-00000"]')
    # The last 2,000 distinct values: what stays allocated is not per value (keeping each
    # would hold 2,000 x ~100 bytes at least).
    assert after - before < 16 * 1024, (before, after)
