"""The SQLite store's group commit: the writes asked for while the store's thread is busy run
together in one ``BEGIN IMMEDIATE`` transaction, each in a savepoint of its own, and are handed
back with one wake-up of each waiting event loop (see :mod:`sidecar.store.sqlite`)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence, TypeVar

T = TypeVar("T")


class GroupCommit:
    """Group commit: writes asked for on any event loop, run on the store's thread in groups.

    :meth:`ask` queues a write and, unless a flush is already submitted or running on the
    store's thread, submits one. A flush takes every write queued by the time it starts, so the
    writes asked for while the thread was busy (the previous group, a read) go in one
    transaction; once that group is handed back it takes what was queued meanwhile as the next
    group (up to :data:`ROUNDS` groups), so the writes asked for while a group ran cost no
    submission and no wake-up of the store's thread each. Results are handed back with one
    ``call_soon_threadsafe`` per loop per group. A write whose caller was cancelled before its
    group started is not run (as a job never started by an executor).

    A write asked for ``rerun_safe`` touches nothing but the connection (no state outside it, no
    side effect beside its result): a group of only such writes first runs without savepoints
    (see :func:`run_group`), and if one of them raises it is rolled back and run again as any group."""

    #: Groups one flush runs back to back before it gives the thread to the reads queued behind it.
    ROUNDS = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any], bool]] = []
        self._due = False  # a flush is submitted or running: it will take what is queued

    async def ask(self, fn: Callable[[sqlite3.Connection], T], executor: ThreadPoolExecutor,
                  conn: sqlite3.Connection, *, rerun_safe: bool = False) -> T:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queue.append((fn, fut, rerun_safe))
            submit = not self._due
            self._due = True
        if submit:
            # At the end of this turn of the loop, so the writes the other tasks ask for in the
            # same turn join the group: each hand-off wakes the store's thread, which on a busy
            # core is a switch there and back (and a GIL handover).
            loop.call_soon(self._submit, executor, conn)
        return await fut

    def _submit(self, executor: ThreadPoolExecutor, conn: sqlite3.Connection) -> None:
        try:
            executor.submit(self._flush, conn, executor)
        except BaseException as exc:  # the store closed meanwhile: nothing will run what is queued
            with self._lock:
                group, self._queue = self._queue, []
                self._due = False
            _settle([(fut, False, exc) for _, fut, _ in group])

    def _flush(self, conn: sqlite3.Connection, executor: ThreadPoolExecutor) -> None:
        """On the store's thread: run what is queued as one transaction and hand it back, then
        the writes queued meanwhile as the next group, until none is left (see the class)."""
        for _ in range(self.ROUNDS):
            with self._lock:
                group, self._queue = self._queue, []
                if not group:
                    self._due = False
                    return
            self._run(conn, group)
        with self._lock:  # the reads queued behind this flush go first; a new flush takes the rest
            if not self._queue:
                self._due = False
                return
        try:
            executor.submit(self._flush, conn, executor)
        except BaseException as exc:  # the store is closing: hand the queued writes back failed
            with self._lock:
                group, self._queue = self._queue, []
                self._due = False
            _hand_back([(fut, (False, exc)) for _, fut, _ in group])

    def _run(self, conn: sqlite3.Connection,
             group: list[tuple[Callable[[sqlite3.Connection], Any], asyncio.Future[Any], bool]]) -> None:
        group = [entry for entry in group if not entry[1].cancelled()]
        if not group:
            return
        outcomes = run_group(conn, [fn for fn, _, _ in group], rerun_safe=all(safe for _, _, safe in group))
        _hand_back([(fut, outcome) for (_, fut, _), outcome in zip(group, outcomes)])


def _hand_back(results: Sequence[tuple[asyncio.Future[Any], tuple[bool, Any]]]) -> None:
    """From the store's thread: settle each future on its own loop, one wake-up per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for fut, (ok, value) in results:
        by_loop.setdefault(fut.get_loop(), []).append((fut, ok, value))
    for loop, settled in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, settled)
        except RuntimeError:  # that loop is closed: nobody waits for these any more
            pass


def run_group(conn: sqlite3.Connection, fns: Sequence[Callable[[sqlite3.Connection], Any]], *,
              rerun_safe: bool = False) -> list[tuple[bool, Any]]:
    """Run ``fns`` in one ``BEGIN IMMEDIATE`` transaction, each in a savepoint of its own; per
    write, (True, its result) or (False, what it raised). A write that raises is rolled back to
    its savepoint alone. If the transaction itself fails (the write lock not had, the commit
    refused, or SQLite rolled it back under a write), every write fails with that error: none
    of them is committed.

    ``rerun_safe`` (every write touches nothing but the connection): the group runs first with no
    savepoint, and is committed when none of its writes raised — the same rows and results as
    with savepoints, without them: a savepoint costs two statements per write, and every page a
    write changes is copied into its journal first (the trial row's overflow pages, tens of KB).
    When one raises, the transaction is rolled back and the whole group runs again as above."""
    single = len(fns) == 1  # the transaction is the write: no savepoint needed
    if rerun_safe and not single:
        plain = _run_plain(conn, fns)
        if plain is not None:
            return plain
    out: list[tuple[bool, Any]] = []
    try:
        conn.execute("BEGIN IMMEDIATE")
    except BaseException as exc:
        return [(False, exc)] * len(fns)
    try:
        for fn in fns:
            if not single:
                conn.execute("SAVEPOINT w")
            try:
                result = fn(conn)
            except Exception as exc:
                if not conn.in_transaction:  # SQLite ended the transaction: the group is lost
                    raise
                if single:
                    conn.execute("ROLLBACK")
                    return [(False, exc)]
                conn.execute("ROLLBACK TO w")
                conn.execute("RELEASE w")
                out.append((False, exc))
                continue
            if not single:
                conn.execute("RELEASE w")
            out.append((True, result))
        conn.execute("COMMIT")
    except BaseException as exc:
        return _abandoned(conn, exc, len(fns))
    return out


def _run_plain(conn: sqlite3.Connection,
               fns: Sequence[Callable[[sqlite3.Connection], Any]]) -> list[tuple[bool, Any]] | None:
    """:func:`run_group` without savepoints; None when a write raised and its transaction was rolled
    back (nothing of the group is committed: it runs again with savepoints)."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except BaseException as exc:
        return [(False, exc)] * len(fns)
    try:
        out: list[tuple[bool, Any]] = []
        for fn in fns:
            try:
                out.append((True, fn(conn)))
            except Exception:
                if not conn.in_transaction:  # SQLite ended the transaction: the group is lost
                    raise
                conn.execute("ROLLBACK")
                return None
        conn.execute("COMMIT")
    except BaseException as exc:
        return _abandoned(conn, exc, len(fns))
    return out


def _abandoned(conn: sqlite3.Connection, exc: BaseException, n: int) -> list[tuple[bool, Any]]:
    """The outcome of a group of ``n`` writes that all failed with ``exc``: its transaction, if
    still open, rolled back quietly (the error reported is the one the writes met)."""
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass
    return [(False, exc)] * n


def _settle(settled: Sequence[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for fut, ok, value in settled:
        if fut.cancelled():
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)
