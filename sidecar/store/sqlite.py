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
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Sequence, TypeVar

from sidecar.store.errors import IdempotencyConflict
from sidecar.store.records import CaseFinish, CaseStart, JudgmentRow, ReserveOutcome, TrialRecord, TrialSnapshot
from sidecar.store.schema import MIGRATIONS

T = TypeVar("T")

_TRIAL_FIELDS = [f.name for f in dataclasses.fields(TrialRecord)]


def _trial(row: sqlite3.Row) -> TrialRecord:
    values = {k: row[k] for k in _TRIAL_FIELDS}
    values["prompt_retention"] = bool(values["prompt_retention"])
    return TrialRecord(**values)


class SQLiteStore:
    """The :class:`sidecar.store.base.Store` over one SQLite file (WAL mode)."""

    def __init__(self, path: str) -> None:
        self.path = path
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
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=30.0)
            conn.row_factory = sqlite3.Row
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("PRAGMA foreign_keys=ON")
            conn.execute("PRAGMA busy_timeout=30000")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            for number, script in enumerate(MIGRATIONS, start=1):
                if number <= version:
                    continue
                conn.execute("BEGIN IMMEDIATE")
                try:
                    for statement in script.split(";"):
                        if statement.strip():
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
        self, trial: TrialRecord, *, idempotency_key: str | None = None, body_hash: str | None = None
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
            return trial

        return await self._write(fn)

    async def get_trial(self, trial_id: str) -> TrialRecord | None:
        def fn(conn: sqlite3.Connection) -> TrialRecord | None:
            row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
            return None if row is None else _trial(row)

        return await self._run(fn)

    async def list_trials(self, *, teams: Sequence[str] | None = None, status: str | None = None) -> list[TrialRecord]:
        def fn(conn: sqlite3.Connection) -> list[TrialRecord]:
            sql = "SELECT * FROM trials WHERE 1=1"
            args: list[Any] = []
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
        self, trial_id: str, status: str, reason: str | None, *, ended: bool
    ) -> tuple[TrialRecord | None, bool]:
        """Set the status unless it already is ``status``; returns (record, changed)."""

        def fn(conn: sqlite3.Connection) -> tuple[TrialRecord | None, bool]:
            cur = conn.execute(
                "UPDATE trials SET status=?, status_reason=?, "
                "ended_at=CASE WHEN ? THEN COALESCE(ended_at, ?) ELSE ended_at END WHERE id=? AND status != ?",
                (status, reason, int(ended), time.time(), trial_id, status),
            )
            row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
            return (None if row is None else _trial(row)), cur.rowcount == 1

        return await self._write(fn)

    # -- cases -----------------------------------------------------------------

    async def reserve_case(self, case: CaseStart) -> ReserveOutcome:
        def fn(conn: sqlite3.Connection) -> ReserveOutcome:
            if conn.execute(
                "SELECT 1 FROM cases WHERE trial_id=? AND exchange_id=?", (case.trial_id, case.exchange_id)
            ).fetchone():
                return "duplicate"
            cur = conn.execute(
                "UPDATE trials SET reserved_micros = reserved_micros + ? "
                "WHERE id=? AND status='running' AND spent_micros + reserved_micros + ? <= cap_micros",
                (case.reserve_micros, case.trial_id, case.reserve_micros),
            )
            if cur.rowcount == 0:
                row = conn.execute("SELECT status FROM trials WHERE id=?", (case.trial_id,)).fetchone()
                if row is None or row["status"] != "running":
                    return "not_running"
                conn.execute(
                    "UPDATE trials SET status='cap_reached', status_reason='next reservation does not fit' WHERE id=?",
                    (case.trial_id,),
                )
                return "cap_reached"
            conn.execute(
                "INSERT INTO cases (id, trial_id, exchange_id, state, reserved_micros, incumbent_latency_ms, "
                "incumbent_output_tokens, incumbent_cost_micros, incumbent_cost_coverage, bodies_json, created_at) "
                "VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                (
                    case.case_id, case.trial_id, case.exchange_id, "reserved", case.reserve_micros,
                    case.incumbent_latency_ms, case.incumbent_output_tokens, case.incumbent_cost_micros,
                    case.incumbent_cost_coverage, case.bodies_json, case.created_at,
                ),
            )
            conn.execute(
                "INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?,?,?,?,?)",
                (case.trial_id, case.case_id, "reserve", case.reserve_micros, case.created_at),
            )
            return "reserved"

        return await self._write(fn)

    async def mark_dispatched(self, case_id: str) -> None:
        await self._write(lambda c: c.execute("UPDATE cases SET state='dispatched' WHERE id=? AND state='reserved'", (case_id,)))

    async def top_up(self, case_id: str, trial_id: str, extra_micros: int) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE trials SET reserved_micros = reserved_micros + ? "
                "WHERE id=? AND spent_micros + reserved_micros + ? <= cap_micros",
                (extra_micros, trial_id, extra_micros),
            )
            if cur.rowcount == 0:
                return False
            conn.execute("UPDATE cases SET reserved_micros = reserved_micros + ? WHERE id=?", (extra_micros, case_id))
            conn.execute(
                "INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?,?,?,?,?)",
                (trial_id, case_id, "top_up", extra_micros, time.time()),
            )
            return True

        return await self._write(fn)

    async def finish_case(self, finish: CaseFinish) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT reserved_micros, state FROM cases WHERE id=?", (finish.case_id,)).fetchone()
            if row is None or row["state"] == "finished":
                return
            reserved = row["reserved_micros"]
            conn.execute(
                "UPDATE trials SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ?, "
                "known_micros = known_micros + ?, unknown_calls = unknown_calls + ?, priced_calls = priced_calls + ? "
                "WHERE id=?",
                (reserved, finish.charged_micros, finish.known_micros, finish.unknown_calls, finish.priced_calls, finish.trial_id),
            )
            if finish.trial_status is not None:
                conn.execute(
                    "UPDATE trials SET status=?, status_reason=COALESCE(status_reason, 'next reservation does not fit') "
                    "WHERE id=? AND status='running'",
                    (finish.trial_status, finish.trial_id),
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
            conn.executemany(
                "INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?,?,?,?,?)",
                [
                    (finish.trial_id, finish.case_id, "release", reserved, finish.finished_at),
                    (finish.trial_id, finish.case_id, "charge", finish.charged_micros, finish.finished_at),
                ],
            )
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
            _bump(conn, finish.trial_id, finish.outcome, 1)

        await self._write(fn)

    async def count_outcomes(
        self, counts: Mapping[tuple[str, str], int], *, on_commit: Callable[[], None] | None = None
    ) -> None:
        if not counts:
            if on_commit is not None:
                on_commit()
            return

        def tx(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for (trial_id, outcome), n in counts.items():
                    _bump(conn, trial_id, outcome, n)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            if on_commit is not None:
                on_commit()  # on this thread, before any later snapshot can read

        await self._run(tx)

    async def recover_in_flight(self, now: float) -> list[str]:
        def fn(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute(
                "SELECT id, trial_id, state, reserved_micros FROM cases WHERE state IN ('reserved', 'dispatched')"
            ).fetchall()
            for r in rows:
                dispatched = r["state"] == "dispatched"
                # A dispatched call may have been billed: hold its reservation as unknown spend.
                charged = r["reserved_micros"] if dispatched else 0
                conn.execute(
                    "UPDATE trials SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ?, "
                    "unknown_calls = unknown_calls + ? WHERE id=?",
                    (r["reserved_micros"], charged, 1 if dispatched else 0, r["trial_id"]),
                )
                conn.execute(
                    "UPDATE cases SET state='finished', outcome='indeterminate', charged_micros=?, "
                    "candidate_cost_coverage=?, judge_cost_coverage=?, error=?, finished_at=? WHERE id=?",
                    (
                        charged, "unknown" if dispatched else "complete", "unknown" if dispatched else "complete",
                        "in flight when the process stopped" + ("" if dispatched else " (never dispatched)"),
                        now, r["id"],
                    ),
                )
                conn.executemany(
                    "INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?,?,?,?,?)",
                    [
                        (r["trial_id"], r["id"], "release", r["reserved_micros"], now),
                        (r["trial_id"], r["id"], "hold_unknown", charged, now),
                    ],
                )
                _bump(conn, r["trial_id"], "indeterminate", 1)
            return [r["id"] for r in rows]

        return await self._write(fn)

    # -- reads -----------------------------------------------------------------

    async def score_counts(self, trial_id: str) -> dict[float, int]:
        return await self._run(lambda conn: _score_counts(conn, trial_id))

    async def snapshot(
        self, trial_id: str, *, pending: Callable[[str], dict[str, int]] | None = None
    ) -> TrialSnapshot | None:
        """A trial and its figures read together, so they agree with each other.

        ``pending`` (funnel counts not yet committed) is read on the store's
        thread inside the same read, so a count is in exactly one of the two.
        """

        def fn(conn: sqlite3.Connection) -> TrialSnapshot | None:
            conn.execute("BEGIN")  # one read transaction: consistent across processes too
            try:
                row = conn.execute("SELECT * FROM trials WHERE id=?", (trial_id,)).fetchone()
                if row is None:
                    return None
                funnel = _funnel(conn, trial_id)
                if pending is not None:
                    for outcome, n in pending(trial_id).items():
                        funnel[outcome] = funnel.get(outcome, 0) + n
                return TrialSnapshot(
                    record=_trial(row),
                    funnel=funnel,
                    score_counts=_score_counts(conn, trial_id),
                    case_states=_case_states(conn, trial_id),
                    judgments=_judgments(conn, trial_id),
                    paired=_paired_figures(conn, trial_id),
                )
            finally:
                conn.execute("COMMIT")

        return await self._run(fn)

    async def total_spend(self) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            r = conn.execute(
                "SELECT COALESCE(SUM(spent_micros),0) AS spent, COALESCE(SUM(known_micros),0) AS known, "
                "COALESCE(SUM(reserved_micros),0) AS reserved, COALESCE(SUM(unknown_calls),0) AS unknown_calls "
                "FROM trials"
            ).fetchone()
            return {k: r[k] for k in ("spent", "known", "reserved", "unknown_calls")}

        return await self._run(fn)

    async def cases(self, trial_id: str) -> list[dict[str, Any]]:
        """Every case of a trial, content-free columns only (for tests and audits)."""

        def fn(conn: sqlite3.Connection) -> list[dict[str, Any]]:
            rows = conn.execute(
                "SELECT id, exchange_id, state, outcome, reserved_micros, charged_micros, score, error FROM cases "
                "WHERE trial_id=? ORDER BY created_at, id",
                (trial_id,),
            )
            return [dict(r) for r in rows]

        return await self._run(fn)


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
    cost_pairs = [(r["cc"], r["ic"]) for r in rows if r["ccv"] == "complete" and r["icv"] == "complete"]
    lat_pairs = [(r["cl"], r["il"]) for r in rows if r["cl"] is not None and r["il"] is not None]
    cand_cost = sum(c for c, _ in cost_pairs)
    inc_cost = sum(i for _, i in cost_pairs)
    cand_lat = statistics.median([c for c, _ in lat_pairs]) if lat_pairs else None
    inc_lat = statistics.median([i for _, i in lat_pairs]) if lat_pairs else None
    return {
        "cost_cases": len(cost_pairs),
        "candidate_cost_micros": cand_cost,
        "incumbent_cost_micros": inc_cost,
        "cost_ratio": (cand_cost / inc_cost) if cost_pairs and inc_cost > 0 else None,
        "latency_cases": len(lat_pairs),
        "candidate_latency_ms_p50": cand_lat,
        "incumbent_latency_ms_p50": inc_lat,
        "latency_ratio": (cand_lat / inc_lat) if cand_lat is not None and inc_lat else None,
    }


def _case_states(conn: sqlite3.Connection, trial_id: str) -> dict[str, int]:
    rows = conn.execute("SELECT state, COUNT(*) AS n FROM cases WHERE trial_id=? GROUP BY state", (trial_id,))
    return {r["state"]: r["n"] for r in rows}


def _bump(conn: sqlite3.Connection, trial_id: str, outcome: str, n: int) -> None:
    conn.execute(
        "INSERT INTO funnel (trial_id, outcome, n) VALUES (?,?,?) "
        "ON CONFLICT (trial_id, outcome) DO UPDATE SET n = n + excluded.n",
        (trial_id, outcome, n),
    )
