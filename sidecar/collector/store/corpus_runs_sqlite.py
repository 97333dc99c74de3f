"""Running comparison groups in SQLite (:class:`sidecar.collector.store.base.CorpusRunStore`), mixed into
:class:`sidecar.collector.store.sqlite.CollectorSQLiteStore`. Each write is one ``BEGIN IMMEDIATE`` transaction,
so a reservation (``spent + reserved + amount <= cap``, one conditional update) and the
claim it pays for land together or not at all."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.collector.store.corpus_run_records import AttemptRecord, RunRecord, ScoreRecord

T = TypeVar("T")

_RESERVE = ("UPDATE comparison_runs SET reserved_micros = reserved_micros + ? "
            "WHERE comparison_id=? AND spent_micros + reserved_micros + ? <= cap_micros")


def _build(cls: type[T], row: sqlite3.Row) -> T:
    return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def _insert(conn: sqlite3.Connection, table: str, record: Any) -> None:
    values = dataclasses.asdict(record)
    conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({', '.join('?' for _ in values)})",
                 tuple(values.values()))


def _reserve(conn: sqlite3.Connection, comparison_id: str, amount: int) -> bool:
    return amount >= 0 and conn.execute(_RESERVE, (amount, comparison_id, amount)).rowcount == 1


def _settle(conn: sqlite3.Connection, comparison_id: str, reserved: int, charge: int) -> None:
    conn.execute("UPDATE comparison_runs SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ? "
                 "WHERE comparison_id=?", (reserved, max(0, min(charge, reserved)), comparison_id))


class SQLiteCorpusRuns:
    if TYPE_CHECKING:
        async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T: ...

        async def _write(self, fn: Callable[[sqlite3.Connection], T], *, rerun_safe: bool = False) -> T: ...

    async def begin_run(self, comparison_id: str, *, cap_micros: int, now: float) -> RunRecord | None:
        def fn(conn: sqlite3.Connection) -> RunRecord | None:
            if conn.execute("SELECT 1 FROM comparisons WHERE id=?", (comparison_id,)).fetchone() is None:
                return None
            conn.execute("INSERT OR IGNORE INTO comparison_runs (comparison_id, cap_micros, started_at) VALUES (?,?,?)",
                         (comparison_id, cap_micros, now))
            conn.execute("UPDATE comparisons SET status='running' WHERE id=? AND status='admitted'", (comparison_id,))
            row = conn.execute("SELECT * FROM comparison_runs WHERE comparison_id=?", (comparison_id,)).fetchone()
            return _build(RunRecord, row)

        return await self._write(fn)

    async def get_run(self, comparison_id: str) -> RunRecord | None:
        def fn(conn: sqlite3.Connection) -> RunRecord | None:
            row = conn.execute("SELECT * FROM comparison_runs WHERE comparison_id=?", (comparison_id,)).fetchone()
            return None if row is None else _build(RunRecord, row)

        return await self._run(fn)

    async def runnable_comparisons(self) -> list[ComparisonRecord]:
        def fn(conn: sqlite3.Connection) -> list[ComparisonRecord]:
            rows = conn.execute("SELECT * FROM comparisons WHERE status IN ('admitted', 'running') "
                                "ORDER BY created_at, id")
            return [_build(ComparisonRecord, r) for r in rows]

        return await self._run(fn)

    async def set_comparison_status(self, comparison_id: str, status: str, *, allowed_from: Sequence[str],
                                    now: float, final: bool) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            marks = ", ".join("?" for _ in allowed_from)
            cur = conn.execute(f"UPDATE comparisons SET status=? WHERE id=? AND status IN ({marks})",
                               (status, comparison_id, *allowed_from))
            if cur.rowcount != 1:
                return False
            conn.execute("UPDATE comparison_runs SET ended_at=? WHERE comparison_id=?",
                         (now if final else None, comparison_id))
            return True

        return await self._write(fn)

    async def cancel_arm(self, comparison_id: str, arm: str) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT cancelled_arms FROM comparison_runs WHERE comparison_id=?",
                               (comparison_id,)).fetchone()
            if row is None:
                return False
            arms = json.loads(row["cancelled_arms"])
            if arm not in arms:
                conn.execute("UPDATE comparison_runs SET cancelled_arms=? WHERE comparison_id=?",
                             (json.dumps(sorted([*arms, arm])), comparison_id))
            return True

        return await self._write(fn)

    async def claim_attempt(self, attempt: AttemptRecord) -> str:
        def fn(conn: sqlite3.Connection) -> str:
            row = conn.execute("SELECT status FROM comparison_attempts WHERE id=?", (attempt.id,)).fetchone()
            if row is not None and row["status"] != "queued":
                return "exists"
            if not _reserve(conn, attempt.comparison_id, attempt.reserved_micros):
                return "cap"
            if row is None:
                _insert(conn, "comparison_attempts", attempt)
            else:
                conn.execute("UPDATE comparison_attempts SET status='claimed', owner=?, lease_until=?, "
                             "reserved_micros=? WHERE id=?",
                             (attempt.owner, attempt.lease_until, attempt.reserved_micros, attempt.id))
            return "claimed"

        return await self._write(fn)

    async def top_up(self, comparison_id: str, attempt_id: str, amount: int) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT 1 FROM comparison_attempts WHERE id=? AND status='claimed'",
                               (attempt_id,)).fetchone()
            if row is None or not _reserve(conn, comparison_id, amount):
                return False
            conn.execute("UPDATE comparison_attempts SET reserved_micros = reserved_micros + ? WHERE id=?",
                         (amount, attempt_id))
            return True

        return await self._write(fn)

    async def finish_attempt(self, attempt: AttemptRecord, *, charge_micros: int, scores: Sequence[ScoreRecord]) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT reserved_micros FROM comparison_attempts WHERE id=? AND status='claimed'",
                               (attempt.id,)).fetchone()
            if row is None:
                return False
            _settle(conn, attempt.comparison_id, row["reserved_micros"], charge_micros)
            conn.execute(
                "UPDATE comparison_attempts SET status=?, owner=NULL, lease_until=NULL, finished_at=?, latency_ms=?, "
                "cost_micros=?, cost_coverage=?, output=?, error=? WHERE id=?",
                (attempt.status, attempt.finished_at, attempt.latency_ms, attempt.cost_micros, attempt.cost_coverage,
                 attempt.output, attempt.error, attempt.id))
            for score in scores:
                _insert(conn, "comparison_scores", score)
            return True

        return await self._write(fn)

    async def claim_judgment(self, score: ScoreRecord) -> str:
        def fn(conn: sqlite3.Connection) -> str:
            row = conn.execute("SELECT 1 FROM comparison_scores WHERE attempt_id=? AND metric=?",
                               (score.attempt_id, score.metric)).fetchone()
            if row is not None:
                return "exists"
            if not _reserve(conn, score.comparison_id, score.reserved_micros):
                return "cap"
            _insert(conn, "comparison_scores", score)
            return "claimed"

        return await self._write(fn)

    async def finish_judgment(self, score: ScoreRecord, *, charge_micros: int) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            row = conn.execute("SELECT reserved_micros FROM comparison_scores WHERE attempt_id=? AND metric=? "
                               "AND status='pending'", (score.attempt_id, score.metric)).fetchone()
            if row is None:
                return False
            _settle(conn, score.comparison_id, row["reserved_micros"], charge_micros)
            conn.execute(
                "UPDATE comparison_scores SET status=?, value=?, category=?, detail=?, cost_micros=?, cost_coverage=?, "
                "owner=NULL, lease_until=NULL WHERE attempt_id=? AND metric=?",
                (score.status, score.value, score.category, score.detail, score.cost_micros, score.cost_coverage,
                 score.attempt_id, score.metric))
            return True

        return await self._write(fn)

    async def refresh_claims(self, owner: str, *, lease_until: float) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            conn.execute("UPDATE comparison_attempts SET lease_until=? WHERE owner=? AND status='claimed'",
                         (lease_until, owner))
            conn.execute("UPDATE comparison_scores SET lease_until=? WHERE owner=? AND status='pending'",
                         (lease_until, owner))
            conn.execute("UPDATE comparison_item_leases SET lease_until=? WHERE owner=?", (lease_until, owner))

        await self._write(fn)

    async def expire_claims(self, *, now: float) -> int:
        def fn(conn: sqlite3.Connection) -> int:
            n = 0
            for row in conn.execute("SELECT id, comparison_id, reserved_micros FROM comparison_attempts "
                                    "WHERE status='claimed' AND lease_until < ?", (now,)).fetchall():
                _settle(conn, row["comparison_id"], row["reserved_micros"], row["reserved_micros"])
                conn.execute("UPDATE comparison_attempts SET status='invocation_indeterminate', "
                             "lease_until=NULL, finished_at=?, cost_micros=0, cost_coverage='unknown', "
                             "error='claim_expired' WHERE id=?", (now, row["id"]))
                n += 1
            for row in conn.execute("SELECT attempt_id, metric, comparison_id, reserved_micros FROM comparison_scores "
                                    "WHERE status='pending' AND lease_until < ?", (now,)).fetchall():
                _settle(conn, row["comparison_id"], row["reserved_micros"], row["reserved_micros"])
                conn.execute("UPDATE comparison_scores SET status='invocation_indeterminate', "
                             "lease_until=NULL, cost_micros=0, cost_coverage='unknown' WHERE attempt_id=? AND metric=?",
                             (row["attempt_id"], row["metric"]))
                n += 1
            return n

        return await self._write(fn)

    async def queue_retry(self, attempt_id: str, *, new: Callable[[AttemptRecord], AttemptRecord]
                          ) -> tuple[str, AttemptRecord | None]:
        def fn(conn: sqlite3.Connection) -> tuple[str, AttemptRecord | None]:
            row = conn.execute("SELECT * FROM comparison_attempts WHERE id=?", (attempt_id,)).fetchone()
            if row is None:
                return "missing", None
            original = _build(AttemptRecord, row)
            again = conn.execute("SELECT * FROM comparison_attempts WHERE retry_of=?", (attempt_id,)).fetchone()
            if again is not None:
                return "existing", _build(AttemptRecord, again)
            if original.status not in ("invocation_indeterminate", "failed"):
                return "not_retryable", original
            later = conn.execute(
                "SELECT 1 FROM comparison_attempts WHERE comparison_id=? AND arm=? AND item_id=? AND revision_id=? "
                "AND repetition=? AND attempt > ?", (original.comparison_id, original.arm, original.item_id,
                                                    original.revision_id, original.repetition, original.attempt),
            ).fetchone()
            if later is not None:
                return "superseded", original
            retry = new(original)
            _insert(conn, "comparison_attempts", retry)
            conn.execute("UPDATE comparisons SET status='running' WHERE id=? AND status='completed'",
                         (original.comparison_id,))
            conn.execute("UPDATE comparison_runs SET ended_at=NULL WHERE comparison_id=?", (original.comparison_id,))
            return "queued", retry

        return await self._write(fn)

    async def lease_items(self, comparison_id: str, indexes: Sequence[int], *, owner: str, now: float,
                          lease_until: float) -> list[int]:
        def fn(conn: sqlite3.Connection) -> list[int]:
            granted: list[int] = []
            for index in sorted(set(indexes)):
                conn.execute("INSERT OR IGNORE INTO comparison_item_leases (comparison_id, item_index) VALUES (?, ?)",
                             (comparison_id, index))
                cur = conn.execute("UPDATE comparison_item_leases SET owner=?, lease_until=? WHERE comparison_id=? "
                                   "AND item_index=? AND (owner IS NULL OR owner=? OR lease_until < ?)",
                                   (owner, lease_until, comparison_id, index, owner, now))
                if cur.rowcount == 1:
                    granted.append(index)
            return granted

        return await self._write(fn)

    async def release_items(self, comparison_id: str, indexes: Sequence[int], *, owner: str) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            for index in sorted(set(indexes)):
                conn.execute("UPDATE comparison_item_leases SET owner=NULL, lease_until=0 WHERE comparison_id=? "
                             "AND item_index=? AND owner=?", (comparison_id, index, owner))

        await self._write(fn)

    async def fail_run(self, comparison_id: str, *, error: str, now: float) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            cur = conn.execute("UPDATE comparisons SET status='failed' WHERE id=? AND status IN ('admitted', 'running')",
                               (comparison_id,))
            if cur.rowcount != 1:
                return False
            conn.execute("UPDATE comparison_runs SET ended_at=?, error=? WHERE comparison_id=?",
                         (now, error, comparison_id))
            return True

        return await self._write(fn)

    async def run_attempts(self, comparison_id: str) -> list[AttemptRecord]:
        def fn(conn: sqlite3.Connection) -> list[AttemptRecord]:
            rows = conn.execute("SELECT * FROM comparison_attempts WHERE comparison_id=? "
                                "ORDER BY created_at, id", (comparison_id,))
            return [_build(AttemptRecord, r) for r in rows]

        return await self._run(fn)

    async def run_scores(self, comparison_id: str) -> list[ScoreRecord]:
        def fn(conn: sqlite3.Connection) -> list[ScoreRecord]:
            rows = conn.execute("SELECT * FROM comparison_scores WHERE comparison_id=? ORDER BY attempt_id, metric",
                                (comparison_id,))
            return [_build(ScoreRecord, r) for r in rows]

        return await self._run(fn)
