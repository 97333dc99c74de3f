"""The SQLite store's group commit (:class:`sidecar.store.group_commit.GroupCommit`): the writes asked for
while its thread is busy are one transaction, each in a savepoint of its own; one that raises
is rolled back alone; a process that dies mid-group loses the whole group, and crash recovery
then gives every case of it exactly one funnel outcome."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from sidecar.store.sqlite import SQLiteStore
from sidecar.store.records import KeptState
from tests.store.factories import finish, start, trial

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(str(tmp_path / "store.db"))
    await s.open()
    yield s
    await s.close()


async def _as_one_group(store: SQLiteStore, *writes: Any) -> list[Any]:
    """Run the coroutines ``writes`` while the store's thread is held, so they form one group."""
    held = threading.Event()
    assert store._executor is not None
    store._executor.submit(held.wait)
    tasks = [asyncio.ensure_future(w) for w in writes]
    while len(store._writes._queue) < len(tasks):
        await asyncio.sleep(0)  # a yield, not a wait: each task queues its write at its first step
    held.set()
    return list(await asyncio.gather(*tasks, return_exceptions=True))


async def test_writes_asked_for_together_commit_in_one_transaction(store: SQLiteStore) -> None:
    traced: list[str] = []
    await store._run(lambda conn: conn.set_trace_callback(traced.append))
    got = await _as_one_group(store, store.create_trial(trial("t1")), store.create_trial(trial("t2")),
                              store.heartbeat("A", now=0.0, lease_s=5.0))
    await store._run(lambda conn: conn.set_trace_callback(None))
    assert [type(g).__name__ for g in got] == ["TrialRecord", "TrialRecord", "NoneType"]
    assert traced.count("BEGIN IMMEDIATE") == 1 and traced.count("COMMIT") == 1
    assert {t.id for t in await store.list_trials()} == {"t1", "t2"}


async def test_a_write_that_raises_is_rolled_back_alone(store: SQLiteStore) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO owners (owner, lease_until, started_at) VALUES ('half', 1, 0)")
        raise ValueError("boom")

    got = await _as_one_group(store, store.create_trial(trial("t1")), store._write(half_then_fail),
                              store.create_trial(trial("t2")))
    assert isinstance(got[1], ValueError) and not isinstance(got[0], BaseException)
    assert {t.id for t in await store.list_trials()} == {"t1", "t2"}
    owners = await store._run(lambda conn: conn.execute("SELECT owner FROM owners").fetchall())
    assert owners == []  # the failed write's first statement was undone with it


async def test_a_lone_write_that_raises_commits_nothing(store: SQLiteStore) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO owners (owner, lease_until, started_at) VALUES ('half', 1, 0)")
        raise ValueError("boom")

    with pytest.raises(ValueError):
        await store._write(half_then_fail)
    assert await store._run(lambda conn: conn.execute("SELECT owner FROM owners").fetchall()) == []
    await store.create_trial(trial("t1"))  # the connection is out of the failed transaction
    assert [t.id for t in await store.list_trials()] == ["t1"]


async def test_a_group_of_rerun_safe_writes_runs_without_savepoints(store: SQLiteStore) -> None:
    """Issue 29: the case's writes touch only the connection, so a group of them runs without a
    savepoint each (two statements per write, and a copy of every page a write changes)."""
    await store.create_trial(trial("t1", cap_micros=1_000_000))
    traced: list[str] = []
    await store._run(lambda conn: conn.set_trace_callback(traced.append))
    got = await _as_one_group(store, store.claim_and_reserve(start("c1"), 1_000, at=1.0),
                              store.claim_and_reserve(start("c2"), 1_000, at=1.0),
                              store.heartbeat("A", now=0.0, lease_s=5.0))
    await store._run(lambda conn: conn.set_trace_callback(None))
    assert got == [("claimed", True), ("claimed", True), None]
    assert traced.count("BEGIN IMMEDIATE") == 1 and traced.count("COMMIT") == 1
    assert not [s for s in traced if s.startswith(("SAVEPOINT", "RELEASE", "ROLLBACK"))]
    assert {c["id"]: c["state"] for c in await store.cases("t1")} == {"c1": "dispatched", "c2": "dispatched"}


async def test_a_rerun_safe_write_that_raises_is_rolled_back_alone_and_the_others_run_again(
    store: SQLiteStore,
) -> None:
    """A rerun-safe group in which one write raises: nothing of the first run is kept; the group
    runs again with savepoints, so the write that raised is rolled back alone and the others
    commit once, with the results of their second run."""
    runs: list[str] = []

    def half_then_fail(conn: sqlite3.Connection) -> None:
        runs.append("fail")
        conn.execute("INSERT INTO owners (owner, lease_until, started_at) VALUES ('half', 1, 0)")
        raise ValueError("boom")

    def lease(owner: str) -> Any:
        def fn(conn: sqlite3.Connection) -> int:
            runs.append(owner)
            return conn.execute("INSERT INTO owners (owner, lease_until, started_at) VALUES (?, 1, 0)",
                                (owner,)).rowcount
        return fn

    traced: list[str] = []
    await store._run(lambda conn: conn.set_trace_callback(traced.append))
    got = await _as_one_group(store, store._write(lease("A"), rerun_safe=True),
                              store._write(half_then_fail, rerun_safe=True), store._write(lease("B"), rerun_safe=True))
    await store._run(lambda conn: conn.set_trace_callback(None))
    assert got[0] == 1 and isinstance(got[1], ValueError) and got[2] == 1
    assert runs == ["A", "fail", "A", "fail", "B"]  # the first run stopped at the failure; then all again
    assert traced.count("ROLLBACK") == 1 and traced.count("ROLLBACK TO w") == 1 and traced.count("COMMIT") == 1
    owners = await store._run(lambda conn: [r[0] for r in conn.execute("SELECT owner FROM owners ORDER BY owner")])
    assert owners == ["A", "B"]


async def test_a_group_with_one_write_not_rerun_safe_keeps_its_savepoints(store: SQLiteStore) -> None:
    traced: list[str] = []
    await store._run(lambda conn: conn.set_trace_callback(traced.append))
    await _as_one_group(store, store.heartbeat("A", now=0.0, lease_s=5.0), store.create_trial(trial("t1")))
    await store._run(lambda conn: conn.set_trace_callback(None))
    assert traced.count("SAVEPOINT w") == 2 and traced.count("RELEASE w") == 2


async def test_a_crash_mid_group_loses_no_case_outcome(tmp_path: Path) -> None:
    """Two cases' finishes and then a process death in one group: neither finish is kept (no
    half of a group is), and recovery finishes both cases indeterminate — each with exactly
    one funnel outcome, their reservations held as unknown spend, none left reserved."""
    path = str(tmp_path / "store.db")
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "tests.store.group_crash_worker", path],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    store = SQLiteStore(path)
    await store.open()
    try:
        before = {c["id"]: (c["state"], c["outcome"]) for c in await store.cases("t1")}
        assert before == {"c1": ("dispatched", None), "c2": ("dispatched", None)}
        recovered = await store.recover_expired(10.0)
        assert sorted(recovered) == ["c1", "c2"]
        snap = await store.snapshot("t1")
        assert snap is not None
        assert snap.funnel == {"indeterminate": 2}
        assert (snap.record.reserved_micros, snap.record.spent_micros) == (0, 2000)
        assert {c["id"]: c["outcome"] for c in await store.cases("t1")} == {"c1": "indeterminate", "c2": "indeterminate"}
    finally:
        await store.close()


async def test_writes_asked_for_while_a_group_runs_are_the_next_group_of_the_same_flush(
    store: SQLiteStore, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: the writes queued while the store's thread runs a group are taken by that
    flush as its next group (one transaction) — not each a new submission, and a wake-up, of
    the store's thread."""
    assert store._executor is not None
    submitted: list[Any] = []
    real_submit = store._executor.submit

    def counting(fn: Any, *args: Any) -> Any:
        submitted.append(fn)
        return real_submit(fn, *args)

    monkeypatch.setattr(store._executor, "submit", counting)
    running, release = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        running.set()
        release.wait(30)

    traced: list[str] = []
    await store._run(lambda conn: conn.set_trace_callback(traced.append))
    submitted.clear()
    first = asyncio.ensure_future(store._write(hold))
    while not running.is_set():  # the first group is running on the store's thread
        await asyncio.sleep(0)
    later = [asyncio.ensure_future(w) for w in (store.create_trial(trial("t1")), store.create_trial(trial("t2")),
                                                store.heartbeat("A", now=0.0, lease_s=5.0))]
    while len(store._writes._queue) < len(later):
        await asyncio.sleep(0)
    for _ in range(3):
        await asyncio.sleep(0)  # a turn of the loop: a submission asked for at its end would be made
    release.set()
    await asyncio.gather(first, *later)
    await store._run(lambda conn: conn.set_trace_callback(None))
    flushes = [f for f in submitted if getattr(f, "__name__", "") == "_flush"]
    assert len(flushes) == 1
    assert traced.count("BEGIN IMMEDIATE") == 2 and traced.count("COMMIT") == 2  # two groups, two transactions
    assert {t.id for t in await store.list_trials()} == {"t1", "t2"}


def _sqlite_temp_files() -> list[str]:
    """The temporary files SQLite holds open in this process now (named ``etilqs_…``, deleted at once)."""
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if "etilqs_" in target:
            out.append(target)
    return out


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="reads the process's open files from /proc")
async def test_a_write_journaling_past_64_kib_opens_no_temporary_file(store: SQLiteStore) -> None:
    """A write in a group runs in a savepoint, and an UPDATE of ``trials`` in a statement journal:
    the pages a rewrite of a large trial row touches are journaled for a rollback that never needs
    a file; past 64 KiB SQLite would spill them to one, created and deleted per write."""
    await store.create_trial(trial("t1"))
    await store.save_states("t1", sequence=KeptState("x" * 100_000, 1, None))

    def rewrite(conn: sqlite3.Connection) -> list[str]:
        # A changed record size: the whole row, its overflow pages too, is written again.
        conn.execute("UPDATE trials SET reserved_micros = reserved_micros + 100000, "
                     "state_revision = state_revision + 1 WHERE id = 't1'")
        return _sqlite_temp_files()

    got = await _as_one_group(store, store._write(rewrite), store.heartbeat("A", now=0.0, lease_s=5.0))
    assert got == [[], None]
    assert (await store.get_trial("t1")).reserved_micros == 100_000  # type: ignore[union-attr]
