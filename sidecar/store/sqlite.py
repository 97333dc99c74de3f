"""SQLite in WAL mode: the embedded default store.

Every statement runs on one dedicated thread that owns the connection, so the
event loop never blocks on disk and transactions never interleave inside this
process. Writes are committed in groups (:class:`~sidecar.store.group_commit.GroupCommit`): the writes asked for
while the store's thread is busy are run together in one ``BEGIN IMMEDIATE``
transaction, each inside a savepoint of its own — one that raises is rolled back
alone and raises to its caller; the others commit (a group of only the case's writes, which
touch nothing but the connection, first runs without savepoints, and again with them if one
raises). A write's caller resumes only
after its group committed, so nothing is reported done that a crash could undo;
a process that dies mid-group loses the whole group (as if none of its writes had
been asked for), never a part of one. A second process on the same file (a
second replica, a restarted one) serialises on SQLite's write lock: the cap
check and the reservation are one statement. Under load this is one
transaction and one wake-up of the event loop for several cases' writes, where
it was one of each per write.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Mapping, Sequence, TypeVar

from policies.paired import paired_figures
from sidecar.store.errors import IdempotencyConflict
from sidecar.store.group_commit import GroupCommit
from sidecar.store import cases_sql as c, outbox_sql, reports, segments_sql as g, trials_sql as t
from sidecar.store.dialect import SQLITE, chunks, sq
from sidecar.store.records import (
    CaseFinish,
    ended_outcome,
    CaseStart,
    ClaimOutcome,
    FoldInputs,
    GatewayReport,
    KeptState,
    LedgerEntry,
    LedgerKind,
    OutboxRecord,
    PostureWrite,
    ReserveResult,
    TeamPosture,
    TrialProgress,
    TrialRecord,
    TrialSnapshot,
)
from sidecar.store.schema import MIGRATIONS, statements
from sidecar.store.watch_sqlite import SQLiteWatches, apply_effects
from sidecar.store.retention_sqlite import SQLiteRetention

T = TypeVar("T")


class SQLiteStore(SQLiteWatches, SQLiteRetention):
    """The :class:`sidecar.store.base.Store` over one SQLite file (WAL mode)."""

    def __init__(self, path: str, *, lock_timeout_s: float = 10.0) -> None:
        self.path = path
        self.lock_timeout_s = lock_timeout_s
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None
        self._writes = GroupCommit()

    # -- plumbing -------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None or self._conn is None:
            raise RuntimeError("store is not open")
        conn = self._conn
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, conn)

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, rerun_safe: bool = False) -> T:
        """Run ``fn`` in a write transaction, committed with the writes asked for beside it
        (see the module's docs); its result once its group committed. ``rerun_safe``: ``fn``
        touches nothing but the connection, so it may run again after a rollback
        (:class:`~sidecar.store.group_commit.GroupCommit`); the case's writes are."""
        if self._executor is None or self._conn is None:
            raise RuntimeError("store is not open")
        return await self._writes.ask(fn, self._executor, self._conn, rerun_safe=rerun_safe)

    async def open(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shadowtrial-store")

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=self.lock_timeout_s)
            conn.row_factory = sqlite3.Row
            _enable_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
            # Statement and savepoint journals in memory: a group's writes each run in a savepoint, and
            # every UPDATE of ``trials`` (it has triggers) in a statement journal; past 64 KiB (the trial
            # row with its kept statistics is tens of KB) SQLite would spill them to a temporary file,
            # created, written and deleted per write. They only ever serve a rollback, never recovery.
            conn.execute("PRAGMA temp_store=MEMORY")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute(f"PRAGMA busy_timeout={max(1, int(self.lock_timeout_s * 1000))}")
            for number, script in enumerate(MIGRATIONS, start=1):
                # The version is read under the write lock: a second process
                # opening the same fresh file waits here, then skips what the
                # first one applied.
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if number > conn.execute("PRAGMA user_version").fetchone()[0]:
                        for statement in statements(script):
                            conn.execute(statement)
                        conn.execute(f"PRAGMA user_version={number}")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
            return conn

        loop = asyncio.get_running_loop()
        self._conn = await loop.run_in_executor(self._executor, connect)

    async def close(self) -> None:
        if self._executor is None:
            return
        conn, self._conn = self._conn, None
        if conn is not None:
            await asyncio.get_running_loop().run_in_executor(self._executor, conn.close)
        self._executor.shutdown(wait=True)
        self._executor = None

    # -- trials ----------------------------------------------------------------

    async def create_trial(
        self, trial: TrialRecord, *, idempotency_key: str | None = None, body_hash: str | None = None,
        effects: Sequence[OutboxRecord] = (),
    ) -> TrialRecord:
        def fn(conn: sqlite3.Connection) -> TrialRecord:
            if idempotency_key is not None:
                if conn.execute(*sq(t.TAKE_KEY, idempotency_key, body_hash, trial.id, trial.created_at)).fetchone() is None:
                    row = conn.execute(*sq(t.KEY, idempotency_key)).fetchone()
                    if row["body_hash"] != body_hash:
                        raise IdempotencyConflict(idempotency_key)
                    return t.trial(conn.execute(*sq(t.BY_ID, row["trial_id"])).fetchone())
            conn.execute(*sq(t.INSERT, *dataclasses.astuple(trial)))
            _enqueue(conn, effects, trial.created_at)
            return trial

        return await self._write(fn)

    async def get_trial(self, trial_id: str) -> TrialRecord | None:
        return await self._run(lambda conn: _trial(conn, trial_id))

    async def list_trials(
        self, *, teams: Sequence[str] | None = None, status: str | None = None, kind: str | None = None
    ) -> list[TrialRecord]:
        sql, args = t.listing(teams=teams, status=status, kind=kind)
        return await self._run(lambda conn: [t.trial(r) for r in conn.execute(*sq(sql, *args)).fetchall()])

    async def set_trial_status(
        self, trial_id: str, status: str, reason: str | None, *, ended: bool, now: float,
        effects: Sequence[OutboxRecord] = (),
    ) -> tuple[TrialRecord | None, bool]:
        """Set the status unless it already is ``status``; returns (record, changed)."""

        def fn(conn: sqlite3.Connection) -> tuple[TrialRecord | None, bool]:
            row = conn.execute(*sq(t.SET_STATUS, status, reason, ended, now, trial_id, status)).fetchone()
            if row is None:
                return _trial(conn, trial_id), False
            _enqueue(conn, effects, now)
            return t.trial(row), True

        return await self._write(fn)

    async def decide_trial(
        self, trial_id: str, reason: str, *, now: float, effects: Sequence[OutboxRecord] = ()
    ) -> TrialRecord | None:
        def fn(conn: sqlite3.Connection) -> TrialRecord | None:
            row = conn.execute(*sq(t.DECIDE, reason, now, trial_id)).fetchone()
            if row is None:
                return None
            _enqueue(conn, effects, now)
            return t.trial(row)

        return await self._write(fn)

    async def resume_trial(
        self, trial_id: str, *, paused: Sequence[str], started_by: str | None,
        execution_site: str | None = None, prompt_retention: bool | None = None,
        effects: Sequence[OutboxRecord] = (), now: float = 0.0,
    ) -> tuple[TrialRecord | None, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[TrialRecord | None, bool]:
            row = conn.execute(
                *sq(t.RESUME, started_by, execution_site, prompt_retention, trial_id, list(paused))
            ).fetchone()
            if row is None:
                return _trial(conn, trial_id), False
            _enqueue(conn, effects, now)
            return t.trial(row), True

        return await self._write(fn)

    async def save_states(
        self, trial_id: str, *, sequence: KeptState | None = None, judge_health: KeptState | None = None
    ) -> TrialRecord | None:
        """Each state a compare-and-set on its text that never lowers its count, under the write lock."""

        def fn(conn: sqlite3.Connection) -> TrialRecord | None:
            for column, state in (("sequence", sequence), ("judge_health", judge_health)):
                if state is not None:
                    conn.execute(*sq(t.SAVE_STATE[column], state.text, state.n, trial_id, state.folded_from, state.n))
            return _trial(conn, trial_id)

        return await self._write(fn)

    # -- posture ---------------------------------------------------------------

    async def get_posture(self, team: str) -> TeamPosture | None:
        return await self._run(lambda conn: _posture(conn, team))

    async def seed_posture(self, team: str, *, prompt_retention: bool, cut_over: bool, now: float) -> bool:
        return await self._write(
            lambda conn: conn.execute(*sq(t.SEED_POSTURE, team, prompt_retention, cut_over, now)).rowcount == 1
        )

    async def put_posture(
        self, team: str, *, prompt_retention: bool, cut_over: bool, expected_revision: int | None,
        site: str, now: float, by: str | None, reason: str, effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> PostureWrite:
        def fn(conn: sqlite3.Connection) -> PostureWrite:
            created = conn.execute(*sq(t.CREATE_POSTURE, team, prompt_retention, cut_over, now, by, expected_revision,
                                       expected_revision)).fetchone()
            current = _posture(conn, team)
            if created is None and expected_revision is not None and expected_revision != (
                0 if current is None else current.revision
            ):
                return PostureWrite(False, current)
            if current is not None and (current.prompt_retention, current.cut_over) != (prompt_retention, cut_over):
                current = t.posture(
                    conn.execute(*sq(t.UPDATE_POSTURE, prompt_retention, cut_over, now, by, team)).fetchone()
                )
            paused = _pause(conn, team, site, prompt_retention, reason, effects, now)
            return PostureWrite(True, current, tuple(paused))

        return await self._write(fn)

    async def report_uplink(self, team: str, gateway: str, *, content_uplink: bool, now: float) -> None:
        await self._write(lambda conn: conn.execute(*sq(t.REPORT_UPLINK, team, gateway, content_uplink, now)))

    async def gateway_reports(self, team: str) -> list[GatewayReport]:
        return await self._run(lambda conn: [t.gateway_report(r) for r in conn.execute(*sq(t.GATEWAY_REPORTS, team))])

    async def pause_mismatched(
        self, team: str, *, site: str, prompt_retention: bool, reason: str, now: float,
        effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> list[str]:
        return await self._write(lambda conn: _pause(conn, team, site, prompt_retention, reason, effects, now))

    # -- cases -----------------------------------------------------------------

    async def claim_case(self, case: CaseStart) -> ClaimOutcome:
        return await self._write(lambda conn: _claim(conn, case), rerun_safe=True)

    async def reserve(self, trial_id: str, case_id: str, micros: int, *, kind: LedgerKind, at: float) -> ReserveResult:
        return await self._write(lambda conn: _reserve(conn, trial_id, case_id, micros, kind, at), rerun_safe=True)

    async def claim_and_reserve(self, case: CaseStart, micros: int, *, at: float) -> tuple[ClaimOutcome, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[ClaimOutcome, bool]:
            claimed = _claim(conn, case)
            if claimed != "claimed" or not _reserved(conn, case.trial_id, case.case_id, micros, "reserve", at,
                                                     dispatch_owner=case.owner):
                return claimed, False
            return claimed, True  # reserved and marked dispatched by one update of the case just claimed

        return await self._write(fn, rerun_safe=True)

    async def mark_dispatched(self, case_id: str, owner: str) -> bool:
        return await self._write(lambda conn: conn.execute(*sq(c.DISPATCHED, case_id, owner)).rowcount == 1,
                                 rerun_safe=True)

    async def finish_case(self, finish: CaseFinish, owner: str) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute(*sq(c.UNFINISHED, finish.case_id, owner)).fetchone()
            if row is None:
                return False
            reserved = row["reserved_micros"]
            conn.execute(*sq(c.SETTLE_TRIAL, *c.settle_args(finish, reserved)))
            if finish.trial_status is not None:
                conn.execute(*sq(t.END_RUNNING, finish.trial_status, finish.trial_status_reason, finish.finished_at,
                                 finish.trial_id))
            if c.scored(finish):  # with its number in the scoring sequence, which SETTLE_TRIAL took
                conn.execute(*sq(c.FINISH_SCORED, *c.finish_scored_args(finish)))
            else:
                conn.execute(*sq(c.FINISH, *c.finish_args(finish)))
            conn.executemany(SQLITE.sql(c.INSERT_LEDGER), c.finish_ledger(finish, reserved))
            conn.executemany(SQLITE.sql(c.INSERT_JUDGMENT), c.judgment_args(finish))
            apply_effects(conn, finish)  # outbox records and watch steps
            _bump(conn, finish.trial_id, finish.outcome, 1)
            return True

        return await self._write(fn, rerun_safe=True)

    async def count_outcomes(self, counts: Mapping[tuple[str, str], int]) -> None:
        if not counts:
            return

        def fn(conn: sqlite3.Connection) -> None:
            for (trial_id, outcome), n in counts.items():
                _bump(conn, trial_id, outcome, n)

        await self._write(fn, rerun_safe=True)

    async def heartbeat(self, owner: str, *, now: float, lease_s: float) -> None:
        await self._write(lambda conn: conn.execute(*sq(c.HEARTBEAT, owner, now + lease_s, now)), rerun_safe=True)

    async def recover_expired(self, now: float, *, report: bool = False, alive: str = "") -> list[str]:
        def fn(conn: sqlite3.Connection) -> list[str]:
            gone = [r["owner"] for r in conn.execute("SELECT owner FROM owners WHERE lease_until < ? AND owner != ?",
                                                     (now, alive))]
            recovered: list[str] = []
            for owner in gone:
                recovered += _mark_indeterminate(conn, owner, now, "its owner's lease expired")
                conn.execute(*sq(c.FORGET_OWNER, owner))
            # Cases of an owner with no lease row at all (written before leases existed).
            orphans = conn.execute(
                "SELECT DISTINCT COALESCE(owner, '') AS owner FROM cases WHERE state != 'finished' "
                "AND (owner IS NULL OR owner NOT IN (SELECT owner FROM owners)) AND (owner IS NULL OR owner != ?)",
                (alive,),
            ).fetchall()
            for r in orphans:
                recovered += _mark_indeterminate(conn, r["owner"] or None, now, "its owner is gone")
            if report:
                _report(conn, recovered, now)
            return recovered

        return await self._write(fn)

    async def retire(self, owner: str, now: float, *, report: bool = False) -> list[str]:
        def fn(conn: sqlite3.Connection) -> list[str]:
            ids = _mark_indeterminate(conn, owner, now, "in flight when the process stopped")
            conn.execute(*sq(c.FORGET_OWNER, owner))
            if report:
                _report(conn, ids, now)
            return ids

        return await self._write(fn)

    # -- reads -----------------------------------------------------------------

    async def score_counts(self, trial_id: str) -> dict[float, int]:
        return await self._run(lambda conn: _score_counts(conn, trial_id))

    async def scores_after(self, trial_id: str, after: int, limit: int = 100_000) -> list[tuple[int, float]]:
        return await self._run(lambda conn: [(int(r["score_seq"]), float(r["score"]))
                                             for r in conn.execute(*sq(c.SCORES_AFTER, trial_id, after, limit))])

    async def segment_cases(self, trial_id: str) -> list[g.SegmentCase]:
        return await self._run(lambda conn: [g.segment_case(r) for r in conn.execute(*sq(g.SCORED, trial_id))])

    async def tracked_segments(self, trial_id: str) -> list[tuple[str, str, str]]:
        return await self._run(lambda conn: [(r["key"], r["segment"], r["value"])
                                             for r in conn.execute(*sq(g.TRACKED, trial_id))])

    async def judged_keys(self, trial_id: str) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            out: dict[str, int] = {}
            for r in conn.execute(*sq(g.KEYS_OF_JUDGED, trial_id)):
                for key in g.parse_keys(r["segment_keys"]):
                    out[key] = out.get(key, 0) + 1
            return out

        return await self._run(fn)

    async def fold_inputs(self, trial_id: str) -> FoldInputs | None:
        def fn(conn: sqlite3.Connection) -> FoldInputs | None:
            conn.execute("BEGIN")  # one read transaction, as for a snapshot
            try:
                record = _trial(conn, trial_id)
                if record is None:
                    return None
                first = conn.execute(*sq(c.FIRST_SLOT, trial_id, False)).fetchone()
                return FoldInputs(record, _score_counts(conn, trial_id), int(first["n"]), int(first["first"]))
            finally:
                conn.execute("COMMIT")

        return await self._run(fn)

    async def snapshot(self, trial_id: str) -> TrialSnapshot | None:
        """A trial and its figures read together, so they agree with each other."""

        def fn(conn: sqlite3.Connection) -> TrialSnapshot | None:
            conn.execute("BEGIN")  # one read transaction: consistent across processes too
            try:
                record = _trial(conn, trial_id)
                if record is None:
                    return None
                return TrialSnapshot(
                    record=record,
                    funnel={r["outcome"]: r["n"] for r in conn.execute(*sq(c.FUNNEL, trial_id))},
                    score_counts=_score_counts(conn, trial_id),
                    case_states={r["state"]: r["n"] for r in conn.execute(*sq(c.STATES, trial_id))},
                    judgments=[c.judgment(r) for r in conn.execute(*sq(c.JUDGMENTS, trial_id))],
                    paired=paired_figures([c.paired_row(r) for r in conn.execute(*sq(c.PAIRED, trial_id))]),
                )
            finally:
                conn.execute("COMMIT")

        return await self._run(fn)

    async def progress(self, trial_id: str) -> TrialProgress | None:
        """The trial, its funnel and its case states in one read transaction (no judgments)."""

        def fn(conn: sqlite3.Connection) -> TrialProgress | None:
            conn.execute("BEGIN")
            try:
                record = _trial(conn, trial_id)
                if record is None:
                    return None
                return TrialProgress(
                    record=record,
                    funnel={r["outcome"]: r["n"] for r in conn.execute(*sq(c.FUNNEL, trial_id))},
                    case_states={r["state"]: r["n"] for r in conn.execute(*sq(c.STATES, trial_id))},
                )
            finally:
                conn.execute("COMMIT")

        return await self._run(fn)

    async def total_spend(self, *, teams: Sequence[str] | None = None) -> dict[str, int]:
        sql, args = c.spend(teams)

        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            r = conn.execute(*sq(sql, *args)).fetchone()
            return {k: int(r[k]) for k in c.SPEND_KEYS}

        return await self._run(fn)

    async def cases(self, trial_id: str) -> list[dict[str, object]]:
        """Every case of a trial, content-free columns only (for tests and audits)."""
        return await self._run(lambda conn: [dict(r) for r in conn.execute(*sq(c.CASES, trial_id))])

    async def ledger(self, trial_id: str) -> list[LedgerEntry]:
        return await self._run(lambda conn: [c.ledger_entry(r) for r in conn.execute(*sq(c.LEDGER, trial_id))])

    async def outbox(self, *, limit: int = 1000) -> list[OutboxRecord]:
        def fn(conn: sqlite3.Connection) -> list[OutboxRecord]:
            return [OutboxRecord(r["record_id"], r["topic"], r["body"]) for r in conn.execute(*sq(outbox_sql.LIST, limit))]

        return await self._run(fn)

    # -- the uplink's delivery (sidecar.store.base.OutboxDelivery) -------------

    async def claim_outbox(self, owner: str, *, limit: int, lease_s: float, now: float) -> list[tuple[str, bytes]]:
        def fn(conn: sqlite3.Connection) -> list[tuple[str, bytes]]:
            rows = conn.execute(*sq(outbox_sql.CLAIM, owner, now + lease_s, owner, now, limit)).fetchall()
            return [(r["record_id"], r["body"].encode()) for r in sorted(rows, key=lambda r: r["seq"])]

        return await self._write(fn)

    async def delete_outbox(self, record_ids: Sequence[str]) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            return sum(conn.execute(*sq(outbox_sql.DELETE, ids)).rowcount for ids in chunks(record_ids))

        return await self._write(fn)

    async def outbox_depth(self) -> int:
        return await self._run(lambda conn: int(conn.execute(outbox_sql.DEPTH).fetchone()[0]))

    async def enqueue_outbox(self, records: Sequence[OutboxRecord], *, now: float) -> int:
        return await self._write(lambda conn: _enqueue(conn, records, now))


def _enable_wal(conn: sqlite3.Connection, deadline_s: float = 30.0) -> None:
    """Switch to WAL. Several processes opening one fresh file at once can get an
    immediate "database is locked" here (the switch does not wait on the busy
    handler), so retry, on the store's own thread, until the deadline."""
    deadline = time.monotonic() + deadline_s
    pause = 0.005
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(pause)  # off the event loop: this runs on the store's thread
            pause = min(pause * 2, 0.1)


def _mark_indeterminate(conn: sqlite3.Connection, owner: str | None, now: float, why: str) -> list[str]:
    """Finish ``owner``'s unfinished cases as ``indeterminate``; none is re-run.

    A case that dispatched may have been billed: its reservation is held as
    unknown spend. One that never dispatched has its reservation released."""
    rows = conn.execute(
        "SELECT id, trial_id, state, reserved_micros FROM cases WHERE owner IS ? AND state != 'finished'", (owner,)
    ).fetchall()
    for r in rows:
        dispatched = r["state"] == "dispatched"
        charged = r["reserved_micros"] if dispatched else 0
        conn.execute(*sq(c.RECOVER_TRIAL, r["reserved_micros"], charged, 1 if dispatched else 0, r["trial_id"]))
        coverage = "unknown" if dispatched else "complete"
        conn.execute(*sq(c.RECOVER_CASE, charged, coverage, coverage,
                         why + ("" if dispatched else " (never dispatched)"), now, r["id"]))
        ledger = []
        if r["reserved_micros"]:
            ledger.append((r["trial_id"], r["id"], "release", r["reserved_micros"], now))
        if charged:
            ledger.append((r["trial_id"], r["id"], "hold_unknown", charged, now))
        conn.executemany(SQLITE.sql(c.INSERT_LEDGER), ledger)
        _bump(conn, r["trial_id"], "indeterminate", 1)
    return [r["id"] for r in rows]


def _report(conn: sqlite3.Connection, case_ids: Sequence[str], now: float) -> None:
    """Write the ``case_result`` of each case recovery just finished (:mod:`sidecar.store.reports`)."""
    for ids in chunks(case_ids):
        rows = conn.execute(*sq(reports.FINISHED, ids)).fetchall()
        _enqueue(conn, [reports.indeterminate_record(r) for r in rows], now)


def _claim(conn: sqlite3.Connection, case: CaseStart) -> ClaimOutcome:
    row = conn.execute(*sq(t.STATUS, case.trial_id)).fetchone()
    if row is None:
        return "not_running"
    ended = ended_outcome(row["status"])
    # A re-delivery is a duplicate whatever the trial's status now: it was counted once. The
    # insert is the check (the case's id and its exchange in the trial are unique; a case id is
    # the hash of the two), so a claim reads no index more than the insert does.
    if conn.execute(*sq(c.CLAIM, *c.claim_args(case, ended, row["status"]))).rowcount != 1:
        return "duplicate"
    if ended is not None:
        _bump(conn, case.trial_id, ended, 1)
        return "not_running"
    if case.segment_values:
        track_segments(conn, case)
    return "claimed"


def _reserve(conn: sqlite3.Connection, trial_id: str, case_id: str, micros: int, kind: LedgerKind,
             at: float) -> ReserveResult:
    """:func:`_reserved`, with the trial's figures after it."""
    applied = _reserved(conn, trial_id, case_id, micros, kind, at)
    row = conn.execute(*sq(c.FIGURES, trial_id)).fetchone()
    if row is None:
        return ReserveResult(False, 0, 0, 0, "missing")
    return ReserveResult(applied, row["cap_micros"], row["spent_micros"], row["reserved_micros"], row["status"])


def _reserved(conn: sqlite3.Connection, trial_id: str, case_id: str, micros: int, kind: LedgerKind,
              at: float, *, dispatch_owner: str | None = None) -> bool:
    """Reserve ``micros`` for the case if the cap has room; whether it did. ``dispatch_owner``: the
    case was claimed by that owner in this transaction, and is marked dispatched by the same update
    of its row that records the reservation (what RESERVE_CASE then DISPATCHED do, one row write
    fewer)."""
    # The cap's check and the reservation are one statement, under the write lock (it raises the
    # trial's revision itself: the revision trigger would write the whole row again). Only
    # an unfinished case of this trial may reserve: a finished (or recovered) case is
    # never released again, so its reservation would stay on the trial for good.
    cur = conn.execute(
        "UPDATE trials SET reserved_micros = reserved_micros + ?, state_revision = state_revision + 1 "
        "WHERE id=? AND status='running' AND spent_micros + reserved_micros + ? <= cap_micros "
        "AND EXISTS (SELECT 1 FROM cases WHERE id=? AND trial_id=? AND state != 'finished')",
        (micros, trial_id, micros, case_id, trial_id),
    )
    applied = cur.rowcount == 1
    if applied and dispatch_owner is not None:
        if conn.execute(*sq(c.RESERVE_DISPATCH_CLAIMED, micros, case_id, dispatch_owner)).rowcount != 1:
            raise RuntimeError(f"case {case_id} was not claimed by {dispatch_owner} in this transaction")
        conn.execute(*sq(c.INSERT_LEDGER, trial_id, case_id, kind, micros, at))
    elif applied:
        conn.execute(*sq(c.RESERVE_CASE, micros, case_id))
        conn.execute(*sq(c.INSERT_LEDGER, trial_id, case_id, kind, micros, at))
    return applied


def _trial(conn: sqlite3.Connection, trial_id: str) -> TrialRecord | None:
    row = conn.execute(*sq(t.BY_ID, trial_id)).fetchone()
    return None if row is None else t.trial(row)


def _posture(conn: sqlite3.Connection, team: str) -> TeamPosture | None:
    r = conn.execute(*sq(t.POSTURE, team)).fetchone()
    return None if r is None else t.posture(r)


def _pause(
    conn: sqlite3.Connection, team: str, site: str, retention: bool, reason: str,
    effects: Mapping[str, Sequence[OutboxRecord]] | None, now: float,
) -> list[str]:
    """Pause the team's running trials pinned to another site or retention, writing the
    effects given for each one paused; their ids."""
    paused = [r["id"] for r in conn.execute(*sq(t.MISMATCHED, team, site, retention)).fetchall()]
    for ids in chunks(paused):
        conn.execute(*sq(t.PAUSE, reason, ids))
    if effects:
        for trial_id in paused:
            _enqueue(conn, effects.get(trial_id, ()), now)
    return paused


def _enqueue(conn: sqlite3.Connection, effects: Sequence[OutboxRecord], at: float) -> int:
    """Write outbox records, each unless its id is there already; how many went in."""
    return sum(conn.execute(*sq(outbox_sql.ENQUEUE, e.record_id, e.topic, e.body, at)).rowcount for e in effects)


def _score_counts(conn: sqlite3.Connection, trial_id: str) -> dict[float, int]:
    return {float(r["score"]): r["n"] for r in conn.execute(*sq(c.SCORES, trial_id))}


def _bump(conn: sqlite3.Connection, trial_id: str, outcome: str, n: int) -> None:
    conn.execute(
        "INSERT INTO funnel (trial_id, outcome, n) VALUES (?,?,?) "
        "ON CONFLICT (trial_id, outcome) DO UPDATE SET n = n + excluded.n",
        (trial_id, outcome, n),
    )


def track_segments(conn: sqlite3.Connection, case: CaseStart) -> None:
    """Map a claimed case's segment values to tracked keys or ``other`` (issue 27), under the
    write lock: the cap's count and the insert agree."""
    keys, new = g.plan(case, {r["key"] for r in conn.execute(*sq(g.TRACKED_KEYS, case.trial_id))})
    for key, segment, value in new:
        conn.execute(*sq(g.TRACK, case.trial_id, key, segment, value, case.trial_id))
    conn.execute(*sq(g.SET_KEYS, g.keys_text(keys), case.case_id))
