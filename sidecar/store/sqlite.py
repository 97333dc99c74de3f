"""SQLite in WAL mode: the embedded default store.

Every statement runs on one dedicated thread that owns the connection, so the
event loop never blocks on disk and transactions never interleave inside this
process. Each write is one ``BEGIN IMMEDIATE`` transaction, so a second
process on the same file (a second replica, a restarted one) serialises on
SQLite's write lock: the cap check and the reservation are one statement.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence, TypeVar

from policies.paired import paired_figures
from sidecar.store.corpus_runs_sqlite import SQLiteCorpusRuns
from sidecar.store.corpus_sqlite import SQLiteCorpus
from sidecar.store.errors import IdempotencyConflict
from sidecar.store import outbox_sql, reports
from sidecar.store.dialect import chunks, sq
from sidecar.store.records import (
    CaseFinish,
    ended_outcome,
    CaseStart,
    ClaimOutcome,
    GatewayReport,
    JudgmentRow,
    KeptState,
    LedgerEntry,
    LedgerKind,
    OutboxRecord,
    PostureWrite,
    ReserveResult,
    TeamPosture,
    TrialRecord,
    TrialSnapshot,
)
from sidecar.store.schema import MIGRATIONS, statements
from sidecar.store.watch_sqlite import SQLiteWatches, apply_effects
from sidecar.store.collected_sqlite import SQLiteCollected
from sidecar.store.retention_sqlite import SQLiteRetention

T = TypeVar("T")

_TRIAL_FIELDS = [f.name for f in dataclasses.fields(TrialRecord)]


def _trial(row: sqlite3.Row) -> TrialRecord:
    values = {k: row[k] for k in _TRIAL_FIELDS}
    values["prompt_retention"] = bool(values["prompt_retention"])
    return TrialRecord(**values)


class SQLiteStore(SQLiteCorpus, SQLiteCorpusRuns, SQLiteWatches, SQLiteCollected, SQLiteRetention):
    """The :class:`sidecar.store.base.Store` over one SQLite file (WAL mode)."""

    def __init__(self, path: str, *, lock_timeout_s: float = 10.0) -> None:
        self.path = path
        self.lock_timeout_s = lock_timeout_s
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    # -- plumbing -------------------------------------------------------------

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._executor is None or self._conn is None:
            raise RuntimeError("store is not open")
        conn = self._conn
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, conn)

    async def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def tx(conn: sqlite3.Connection) -> T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = fn(conn)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return result

        return await self._run(tx)

    async def open(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shadowtrial-store")

        def connect() -> sqlite3.Connection:
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=self.lock_timeout_s)
            conn.row_factory = sqlite3.Row
            _enable_wal(conn)
            conn.execute("PRAGMA synchronous=NORMAL")
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
                row = conn.execute("SELECT body_hash, trial_id FROM idempotency WHERE key=?", (idempotency_key,)).fetchone()
                if row is not None:
                    if row["body_hash"] != body_hash:
                        raise IdempotencyConflict(idempotency_key)
                    existing = conn.execute("SELECT * FROM trials WHERE id=?", (row["trial_id"],)).fetchone()
                    return _trial(existing)
            values = dataclasses.asdict(trial)
            values["prompt_retention"] = int(trial.prompt_retention)
            cols = ", ".join(values)
            marks = ", ".join("?" for _ in values)
            conn.execute(f"INSERT INTO trials ({cols}) VALUES ({marks})", tuple(values.values()))
            if idempotency_key is not None:
                conn.execute(
                    "INSERT INTO idempotency (key, body_hash, trial_id, created_at) VALUES (?,?,?,?)",
                    (idempotency_key, body_hash, trial.id, trial.created_at),
                )
            _enqueue(conn, effects, trial.created_at)
            return trial

        return await self._write(fn)

    async def get_trial(self, trial_id: str) -> TrialRecord | None:
        def fn(conn: sqlite3.Connection) -> TrialRecord | None:
            row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
            return None if row is None else _trial(row)

        return await self._run(fn)

    async def list_trials(
        self, *, teams: Sequence[str] | None = None, status: str | None = None, kind: str | None = None
    ) -> list[TrialRecord]:
        def fn(conn: sqlite3.Connection) -> list[TrialRecord]:
            sql = "SELECT * FROM trials WHERE 1=1"
            args: list[Any] = []
            if kind is not None:
                sql += " AND kind=?"
                args.append(kind)
            if teams is not None:
                sql += f" AND team IN ({', '.join('?' for _ in teams)})"
                args.extend(teams)
            if status is not None:
                sql += " AND status=?"
                args.append(status)
            sql += " ORDER BY created_at DESC, id"
            return [_trial(r) for r in conn.execute(sql, args).fetchall()]

        return await self._run(fn)

    async def set_trial_status(
        self, trial_id: str, status: str, reason: str | None, *, ended: bool, now: float,
        effects: Sequence[OutboxRecord] = (),
    ) -> tuple[TrialRecord | None, bool]:
        """Set the status unless it already is ``status``; returns (record, changed)."""

        def fn(conn: sqlite3.Connection) -> tuple[TrialRecord | None, bool]:
            cur = conn.execute(
                "UPDATE trials SET status=?, status_reason=?, "
                "ended_at=CASE WHEN ? THEN COALESCE(ended_at, ?) ELSE ended_at END WHERE id=? AND status != ? "
                "AND status != 'adopted'",  # adoption is final (a promotion made it)
                (status, reason, int(ended), now, trial_id, status),
            )
            if cur.rowcount == 1:
                _enqueue(conn, effects, now)
            row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
            return (None if row is None else _trial(row)), cur.rowcount == 1

        return await self._write(fn)

    async def resume_trial(
        self, trial_id: str, *, paused: Sequence[str], started_by: str | None,
        execution_site: str | None = None, prompt_retention: bool | None = None,
        effects: Sequence[OutboxRecord] = (), now: float = 0.0,
    ) -> tuple[TrialRecord | None, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[TrialRecord | None, bool]:
            marks = ", ".join("?" for _ in paused) or "NULL"
            cur = conn.execute(
                "UPDATE trials SET status='running', status_reason=NULL, started_by=?, "
                "execution_site=COALESCE(?, execution_site), prompt_retention=COALESCE(?, prompt_retention) "
                f"WHERE id=? AND status IN ({marks})",
                (started_by, execution_site, None if prompt_retention is None else int(prompt_retention),
                 trial_id, *paused),
            )
            if cur.rowcount == 1:
                _enqueue(conn, effects, now)
            row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
            return (None if row is None else _trial(row)), cur.rowcount == 1

        return await self._write(fn)

    async def save_states(
        self, trial_id: str, *, sequence: KeptState | None = None, judge_health: KeptState | None = None
    ) -> TrialRecord | None:
        """Each state a compare-and-set on its text that never lowers its count, under the write lock."""

        def fn(conn: sqlite3.Connection) -> TrialRecord | None:
            for column, state in (("sequence", sequence), ("judge_health", judge_health)):
                if state is not None:
                    conn.execute(
                        f"UPDATE trials SET {column}_state=?, {column}_n=? WHERE id=? AND {column}_state IS ? "
                        f"AND ({column}_n IS NULL OR {column}_n <= ?)",
                        (state.text, state.n, trial_id, state.folded_from, state.n),
                    )
            row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
            return None if row is None else _trial(row)

        return await self._write(fn)

    # -- posture ---------------------------------------------------------------

    async def get_posture(self, team: str) -> TeamPosture | None:
        return await self._run(lambda conn: _posture(conn, team))

    async def seed_posture(self, team: str, *, prompt_retention: bool, cut_over: bool, now: float) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "INSERT INTO team_posture (team, prompt_retention, cut_over, revision, updated_at, updated_by) "
                "VALUES (?,?,?,1,?,NULL) ON CONFLICT (team) DO NOTHING",
                (team, int(prompt_retention), int(cut_over), now),
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def put_posture(
        self, team: str, *, prompt_retention: bool, cut_over: bool, expected_revision: int | None,
        site: str, now: float, by: str | None, reason: str, effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> PostureWrite:
        def fn(conn: sqlite3.Connection) -> PostureWrite:
            current = _posture(conn, team)
            if expected_revision is not None and expected_revision != (0 if current is None else current.revision):
                return PostureWrite(False, current)
            if current is None:
                conn.execute(
                    "INSERT INTO team_posture (team, prompt_retention, cut_over, revision, updated_at, updated_by) "
                    "VALUES (?,?,?,1,?,?)",
                    (team, int(prompt_retention), int(cut_over), now, by),
                )
            elif (current.prompt_retention, current.cut_over) != (prompt_retention, cut_over):
                conn.execute(
                    "UPDATE team_posture SET prompt_retention=?, cut_over=?, revision=revision+1, updated_at=?, "
                    "updated_by=? WHERE team=?",
                    (int(prompt_retention), int(cut_over), now, by, team),
                )
            paused = _pause(conn, team, site, prompt_retention, reason, effects, now)
            return PostureWrite(True, _posture(conn, team), tuple(paused))

        return await self._write(fn)

    async def report_uplink(self, team: str, gateway: str, *, content_uplink: bool, now: float) -> None:
        await self._write(
            lambda conn: conn.execute(
                "INSERT INTO gateway_uplink (team, gateway, content_uplink, last_seen) VALUES (?,?,?,?) "
                "ON CONFLICT (team, gateway) DO UPDATE SET content_uplink=excluded.content_uplink, "
                "last_seen=MAX(last_seen, excluded.last_seen)",
                (team, gateway, int(content_uplink), now),
            )
        )

    async def gateway_reports(self, team: str) -> list[GatewayReport]:
        def fn(conn: sqlite3.Connection) -> list[GatewayReport]:
            rows = conn.execute(
                "SELECT gateway, content_uplink, last_seen FROM gateway_uplink WHERE team=? ORDER BY gateway", (team,)
            )
            return [GatewayReport(r["gateway"], bool(r["content_uplink"]), r["last_seen"]) for r in rows]

        return await self._run(fn)

    async def pause_mismatched(
        self, team: str, *, site: str, prompt_retention: bool, reason: str, now: float,
        effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> list[str]:
        return await self._write(lambda conn: _pause(conn, team, site, prompt_retention, reason, effects, now))

    # -- cases -----------------------------------------------------------------

    async def claim_case(self, case: CaseStart) -> ClaimOutcome:
        def fn(conn: sqlite3.Connection) -> ClaimOutcome:
            # A re-delivery is a duplicate whatever the trial's status now: it was counted once.
            if conn.execute(
                "SELECT 1 FROM cases WHERE trial_id=? AND exchange_id=?", (case.trial_id, case.exchange_id)
            ).fetchone():
                return "duplicate"
            row = conn.execute("SELECT status FROM trials WHERE id=?", (case.trial_id,)).fetchone()
            if row is None:
                return "not_running"
            ended = ended_outcome(row["status"])
            cur = conn.execute(
                "INSERT INTO cases (id, trial_id, exchange_id, owner, state, outcome, reserved_micros, charged_micros, "
                "incumbent_latency_ms, incumbent_output_tokens, incumbent_cost_micros, incumbent_cost_coverage, "
                "bodies_json, error, created_at, finished_at) "
                "VALUES (?,?,?,?,?,?,0,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                (
                    case.case_id, case.trial_id, case.exchange_id, case.owner,
                    "claimed" if ended is None else "finished", ended, None if ended is None else 0,
                    case.incumbent_latency_ms, case.incumbent_output_tokens, case.incumbent_cost_micros,
                    case.incumbent_cost_coverage, None if ended else case.bodies_json,
                    None if ended is None else f"trial is {row['status']}", case.created_at,
                    None if ended is None else case.created_at,
                ),
            )
            if cur.rowcount != 1:
                return "duplicate"
            if ended is not None:
                _bump(conn, case.trial_id, ended, 1)
                return "not_running"
            return "claimed"

        return await self._write(fn)

    async def reserve(self, trial_id: str, case_id: str, micros: int, *, kind: LedgerKind, at: float) -> ReserveResult:
        def fn(conn: sqlite3.Connection) -> ReserveResult:
            # Only an unfinished case of this trial may reserve: a finished (or
            # recovered) case is never released again, so its reservation would
            # stay on the trial for good.
            cur = conn.execute(
                "UPDATE trials SET reserved_micros = reserved_micros + ? "
                "WHERE id=? AND status='running' AND spent_micros + reserved_micros + ? <= cap_micros "
                "AND EXISTS (SELECT 1 FROM cases WHERE id=? AND trial_id=? AND state != 'finished')",
                (micros, trial_id, micros, case_id, trial_id),
            )
            applied = cur.rowcount == 1
            if applied:
                conn.execute(
                    "UPDATE cases SET reserved_micros = reserved_micros + ?, "
                    "state = CASE WHEN state='claimed' THEN 'reserved' ELSE state END WHERE id=?",
                    (micros, case_id),
                )
                conn.execute(
                    "INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?,?,?,?,?)",
                    (trial_id, case_id, kind, micros, at),
                )
            row = conn.execute(
                "SELECT cap_micros, spent_micros, reserved_micros, status FROM trials WHERE id=?", (trial_id,)
            ).fetchone()
            if row is None:
                return ReserveResult(False, 0, 0, 0, "missing")
            return ReserveResult(applied, row["cap_micros"], row["spent_micros"], row["reserved_micros"], row["status"])

        return await self._write(fn)

    async def mark_dispatched(self, case_id: str, owner: str) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE cases SET state='dispatched' WHERE id=? AND owner=? AND state='reserved'", (case_id, owner)
            )
            return cur.rowcount == 1

        return await self._write(fn)

    async def finish_case(self, finish: CaseFinish, owner: str) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute(
                "SELECT reserved_micros FROM cases WHERE id=? AND owner=? AND state != 'finished'", (finish.case_id, owner)
            ).fetchone()
            if row is None:
                return False
            reserved = row["reserved_micros"]
            conn.execute(
                "UPDATE trials SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ?, "
                "known_micros = known_micros + ?, unknown_calls = unknown_calls + ?, priced_calls = priced_calls + ?, "
                "disputed_calls = disputed_calls + ? WHERE id=?",
                (reserved, finish.charged_micros, finish.known_micros, finish.unknown_calls, finish.priced_calls,
                 finish.disputed_calls, finish.trial_id),
            )
            if finish.trial_status is not None:
                conn.execute(
                    "UPDATE trials SET status=?, status_reason=?, ended_at=COALESCE(ended_at, ?) "
                    "WHERE id=? AND status='running'",
                    (finish.trial_status, finish.trial_status_reason, finish.finished_at, finish.trial_id),
                )
            conn.execute(
                "UPDATE cases SET state='finished', outcome=?, charged_micros=?, candidate_cost_micros=?, "
                "candidate_cost_coverage=?, judge_cost_micros=?, judge_cost_coverage=?, candidate_latency_ms=?, "
                "candidate_output_tokens=?, score=?, error=?, finished_at=?, bodies_json=? WHERE id=?",
                (
                    finish.outcome, finish.charged_micros, finish.candidate_cost_micros, finish.candidate_cost_coverage,
                    finish.judge_cost_micros, finish.judge_cost_coverage, finish.candidate_latency_ms,
                    finish.candidate_output_tokens, finish.score, finish.error, finish.finished_at,
                    finish.bodies_json, finish.case_id,
                ),
            )
            ledger = [(finish.trial_id, finish.case_id, "charge", finish.charged_micros, finish.finished_at)]
            if reserved:
                ledger.insert(0, (finish.trial_id, finish.case_id, "release", reserved, finish.finished_at))
            conn.executemany("INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?,?,?,?,?)", ledger)
            conn.executemany(
                "INSERT INTO judgments (id, case_id, trial_id, judge_version_id, presentation_order, is_audit, outcome, "
                "score, strong, winner_slot, error, longer_won, created_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        j.judgment_id, j.case_id, j.trial_id, j.judge_version_id, j.order, int(j.is_audit), j.outcome,
                        j.score, int(j.strong), j.winner_slot, j.error,
                        None if j.longer_won is None else int(j.longer_won), j.created_at,
                    )
                    for j in finish.judgments
                ],
            )
            apply_effects(conn, finish)  # outbox records and watch steps
            _bump(conn, finish.trial_id, finish.outcome, 1)
            return True

        return await self._write(fn)

    async def count_outcomes(self, counts: Mapping[tuple[str, str], int]) -> None:
        if not counts:
            return

        def fn(conn: sqlite3.Connection) -> None:
            for (trial_id, outcome), n in counts.items():
                _bump(conn, trial_id, outcome, n)

        await self._write(fn)

    async def heartbeat(self, owner: str, *, now: float, lease_s: float) -> None:
        await self._write(
            lambda conn: conn.execute(
                "INSERT INTO owners (owner, lease_until, started_at) VALUES (?,?,?) "
                "ON CONFLICT (owner) DO UPDATE SET lease_until = excluded.lease_until",
                (owner, now + lease_s, now),
            )
        )

    async def recover_expired(self, now: float, *, report: bool = False) -> list[str]:
        def fn(conn: sqlite3.Connection) -> list[str]:
            gone = [r["owner"] for r in conn.execute("SELECT owner FROM owners WHERE lease_until < ?", (now,))]
            recovered: list[str] = []
            for owner in gone:
                recovered += _mark_indeterminate(conn, owner, now, "its owner's lease expired")
                conn.execute("DELETE FROM owners WHERE owner=?", (owner,))
            # Cases of an owner with no lease row at all (written before leases existed).
            orphans = conn.execute(
                "SELECT DISTINCT COALESCE(owner, '') AS owner FROM cases WHERE state != 'finished' "
                "AND (owner IS NULL OR owner NOT IN (SELECT owner FROM owners))"
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
            conn.execute("DELETE FROM owners WHERE owner=?", (owner,))
            if report:
                _report(conn, ids, now)
            return ids

        return await self._write(fn)

    # -- reads -----------------------------------------------------------------

    async def score_counts(self, trial_id: str) -> dict[float, int]:
        return await self._run(lambda conn: _score_counts(conn, trial_id))

    async def snapshot(self, trial_id: str) -> TrialSnapshot | None:
        """A trial and its figures read together, so they agree with each other."""

        def fn(conn: sqlite3.Connection) -> TrialSnapshot | None:
            conn.execute("BEGIN")  # one read transaction: consistent across processes too
            try:
                row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
                if row is None:
                    return None
                return TrialSnapshot(
                    record=_trial(row),
                    funnel=_funnel(conn, trial_id),
                    score_counts=_score_counts(conn, trial_id),
                    case_states=_case_states(conn, trial_id),
                    judgments=_judgments(conn, trial_id),
                    paired=_paired_figures(conn, trial_id),
                )
            finally:
                conn.execute("COMMIT")

        return await self._run(fn)

    async def total_spend(self, *, teams: Sequence[str] | None = None) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            sql = (
                "SELECT COALESCE(SUM(spent_micros),0) AS spent, COALESCE(SUM(known_micros),0) AS known, "
                "COALESCE(SUM(reserved_micros),0) AS reserved, COALESCE(SUM(unknown_calls),0) AS unknown_calls "
                "FROM trials"
            )
            args: list[Any] = []
            if teams is not None:
                sql += f" WHERE team IN ({', '.join('?' for _ in teams)})"
                args.extend(teams)
            r = conn.execute(sql, args).fetchone()
            return {k: r[k] for k in ("spent", "known", "reserved", "unknown_calls")}

        return await self._run(fn)

    async def cases(self, trial_id: str) -> list[dict[str, object]]:
        """Every case of a trial, content-free columns only (for tests and audits)."""

        def fn(conn: sqlite3.Connection) -> list[dict[str, object]]:
            rows = conn.execute(
                "SELECT id, exchange_id, owner, state, outcome, reserved_micros, charged_micros, score, error FROM cases "
                "WHERE trial_id=? ORDER BY created_at, id",
                (trial_id,),
            )
            return [dict(r) for r in rows]

        return await self._run(fn)

    async def ledger(self, trial_id: str) -> list[LedgerEntry]:
        def fn(conn: sqlite3.Connection) -> list[LedgerEntry]:
            rows = conn.execute(
                "SELECT seq, trial_id, case_id, kind, micros, at FROM spend_ledger WHERE trial_id=? ORDER BY seq",
                (trial_id,),
            )
            return [LedgerEntry(r["seq"], r["trial_id"], r["case_id"], r["kind"], r["micros"], r["at"]) for r in rows]

        return await self._run(fn)

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
        conn.execute(
            "UPDATE trials SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ?, "
            "unknown_calls = unknown_calls + ? WHERE id=?",
            (r["reserved_micros"], charged, 1 if dispatched else 0, r["trial_id"]),
        )
        coverage = "unknown" if dispatched else "complete"
        conn.execute(
            "UPDATE cases SET state='finished', outcome='indeterminate', charged_micros=?, candidate_cost_coverage=?, "
            "judge_cost_coverage=?, error=?, finished_at=? WHERE id=?",
            (charged, coverage, coverage, why + ("" if dispatched else " (never dispatched)"), now, r["id"]),
        )
        ledger = []
        if r["reserved_micros"]:
            ledger.append((r["trial_id"], r["id"], "release", r["reserved_micros"], now))
        if charged:
            ledger.append((r["trial_id"], r["id"], "hold_unknown", charged, now))
        conn.executemany("INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?,?,?,?,?)", ledger)
        _bump(conn, r["trial_id"], "indeterminate", 1)
    return [r["id"] for r in rows]


def _report(conn: sqlite3.Connection, case_ids: Sequence[str], now: float) -> None:
    """Write the ``case_result`` of each case recovery just finished (:mod:`sidecar.store.reports`)."""
    for ids in chunks(case_ids):
        rows = conn.execute(*sq(reports.FINISHED, ids)).fetchall()
        _enqueue(conn, [reports.indeterminate_record(r) for r in rows], now)


def _posture(conn: sqlite3.Connection, team: str) -> TeamPosture | None:
    r = conn.execute("SELECT * FROM team_posture WHERE team=?", (team,)).fetchone()
    if r is None:
        return None
    return TeamPosture(r["team"], bool(r["prompt_retention"]), bool(r["cut_over"]), r["revision"], r["updated_at"],
                       r["updated_by"])


def _pause(
    conn: sqlite3.Connection, team: str, site: str, retention: bool, reason: str,
    effects: Mapping[str, Sequence[OutboxRecord]] | None, now: float,
) -> list[str]:
    """Pause the team's running trials pinned to another site or retention, writing the
    effects given for each one paused; their ids."""
    rows = conn.execute(
        "UPDATE trials SET status='posture_changed', status_reason=? WHERE team=? AND status='running' "
        "AND (execution_site != ? OR prompt_retention != ?) RETURNING id",
        (reason, team, site, int(retention)),
    ).fetchall()
    paused = sorted(r["id"] for r in rows)
    if effects:
        for trial_id in paused:
            _enqueue(conn, effects.get(trial_id, ()), now)
    return paused


def _enqueue(conn: sqlite3.Connection, effects: Sequence[OutboxRecord], at: float) -> int:
    """Write outbox records, each unless its id is there already; how many went in."""
    return sum(conn.execute(*sq(outbox_sql.ENQUEUE, e.record_id, e.topic, e.body, at)).rowcount for e in effects)


def _funnel(conn: sqlite3.Connection, trial_id: str) -> dict[str, int]:
    return {r["outcome"]: r["n"] for r in conn.execute("SELECT outcome, n FROM funnel WHERE trial_id=?", (trial_id,))}


def _score_counts(conn: sqlite3.Connection, trial_id: str) -> dict[float, int]:
    rows = conn.execute(
        "SELECT score, COUNT(*) AS n FROM cases WHERE trial_id=? AND outcome='judged' AND score IS NOT NULL GROUP BY score",
        (trial_id,),
    )
    return {float(r["score"]): r["n"] for r in rows}


def _judgments(conn: sqlite3.Connection, trial_id: str) -> list[JudgmentRow]:
    rows = conn.execute("SELECT * FROM judgments WHERE trial_id=? ORDER BY created_at, id", (trial_id,))
    return [
        JudgmentRow(
            judgment_id=r["id"], case_id=r["case_id"], trial_id=r["trial_id"],
            judge_version_id=r["judge_version_id"], order=r["presentation_order"], is_audit=bool(r["is_audit"]),
            outcome=r["outcome"], score=r["score"], strong=bool(r["strong"]), winner_slot=r["winner_slot"],
            error=r["error"], longer_won=None if r["longer_won"] is None else bool(r["longer_won"]),
            created_at=r["created_at"],
        )
        for r in rows
    ]


def _paired_figures(conn: sqlite3.Connection, trial_id: str) -> dict[str, float | int | None]:
    """Candidate against incumbent over the same judged cases: cost and latency ratios."""
    rows = conn.execute(
        "SELECT candidate_cost_micros AS cc, candidate_cost_coverage AS ccv, incumbent_cost_micros AS ic, "
        "incumbent_cost_coverage AS icv, candidate_latency_ms AS cl, incumbent_latency_ms AS il "
        "FROM cases WHERE trial_id=? AND outcome='judged'",
        (trial_id,),
    ).fetchall()
    return paired_figures([(r["cc"], r["ccv"], r["ic"], r["icv"], r["cl"], r["il"]) for r in rows])


def _case_states(conn: sqlite3.Connection, trial_id: str) -> dict[str, int]:
    rows = conn.execute("SELECT state, COUNT(*) AS n FROM cases WHERE trial_id=? GROUP BY state", (trial_id,))
    return {r["state"]: r["n"] for r in rows}


def _bump(conn: sqlite3.Connection, trial_id: str, outcome: str, n: int) -> None:
    conn.execute(
        "INSERT INTO funnel (trial_id, outcome, n) VALUES (?,?,?) "
        "ON CONFLICT (trial_id, outcome) DO UPDATE SET n = n + excluded.n",
        (trial_id, outcome, n),
    )
