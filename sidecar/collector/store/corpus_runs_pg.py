"""Running comparison groups in PostgreSQL (:class:`sidecar.collector.store.base.CorpusRunStore`), mixed
into :class:`sidecar.collector.store.postgres.CollectorPostgresStore`.

Concurrency: the reservation is one conditional update of the group's ledger row
(``spent + reserved + amount <= cap``), so collectors sharing the database never pass the cap
together; a claim inserts its attempt row first (``ON CONFLICT DO NOTHING``), so of two
claims of one identity exactly one lands; a claim that does not fit the cap rolls its row
back. Finishing and expiring lock the row (``FOR UPDATE``) and move only a ``claimed`` one."""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Sequence, TypeVar

from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.collector.store.corpus_run_records import AttemptRecord, RunRecord, ScoreRecord

T = TypeVar("T")
Conn = Any

_RESERVE = ("UPDATE comparison_runs SET reserved_micros = reserved_micros + $1 "
            "WHERE comparison_id=$2 AND spent_micros + reserved_micros + $1 <= cap_micros RETURNING 1")


class _CapReached(Exception):
    """Rolls back a claim whose reservation did not fit."""


def _build(cls: type[T], row: Any) -> T:
    return cls(**{f.name: row[f.name] for f in dataclasses.fields(cls)})  # type: ignore[arg-type]


def _insert_sql(table: str, record: Any, conflict: str = "") -> tuple[str, list[Any]]:
    values = dataclasses.asdict(record)
    marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
    return f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks}){conflict}", list(values.values())


async def _reserve(conn: Conn, comparison_id: str, amount: int) -> bool:
    return amount >= 0 and await conn.fetchval(_RESERVE, amount, comparison_id) is not None


async def _settle(conn: Conn, comparison_id: str, reserved: int, charge: int) -> None:
    await conn.execute("UPDATE comparison_runs SET reserved_micros = reserved_micros - $1, "
                       "spent_micros = spent_micros + $2 WHERE comparison_id=$3",
                       reserved, max(0, min(charge, reserved)), comparison_id)


class PostgresCorpusRuns:
    if TYPE_CHECKING:
        def _open_pool(self) -> Any: ...

        async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T: ...

    async def begin_run(self, comparison_id: str, *, cap_micros: int, now: float) -> RunRecord | None:
        async def fn(conn: Conn) -> RunRecord | None:
            if await conn.fetchval("SELECT 1 FROM comparisons WHERE id=$1", comparison_id) is None:
                return None
            await conn.execute("INSERT INTO comparison_runs (comparison_id, cap_micros, started_at) VALUES ($1,$2,$3) "
                               "ON CONFLICT DO NOTHING", comparison_id, cap_micros, now)
            await conn.execute("UPDATE comparisons SET status='running' WHERE id=$1 AND status='admitted'",
                               comparison_id)
            row = await conn.fetchrow("SELECT * FROM comparison_runs WHERE comparison_id=$1", comparison_id)
            return _build(RunRecord, row)

        return await self._tx(fn)

    async def get_run(self, comparison_id: str) -> RunRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM comparison_runs WHERE comparison_id=$1", comparison_id)
        return None if row is None else _build(RunRecord, row)

    async def runnable_comparisons(self) -> list[ComparisonRecord]:
        rows = await self._open_pool().fetch("SELECT * FROM comparisons WHERE status IN ('admitted', 'running') "
                                             "ORDER BY created_at, id")
        return [_build(ComparisonRecord, r) for r in rows]

    async def set_comparison_status(self, comparison_id: str, status: str, *, allowed_from: Sequence[str],
                                    now: float, final: bool) -> bool:
        async def fn(conn: Conn) -> bool:
            moved = await conn.fetchval("UPDATE comparisons SET status=$1 WHERE id=$2 AND status = ANY($3::text[]) "
                                        "RETURNING 1", status, comparison_id, list(allowed_from))
            if moved is None:
                return False
            await conn.execute("UPDATE comparison_runs SET ended_at=$1 WHERE comparison_id=$2",
                               now if final else None, comparison_id)
            return True

        return await self._tx(fn)

    async def cancel_arm(self, comparison_id: str, arm: str) -> bool:
        async def fn(conn: Conn) -> bool:
            row = await conn.fetchrow("SELECT cancelled_arms FROM comparison_runs WHERE comparison_id=$1 FOR UPDATE",
                                      comparison_id)
            if row is None:
                return False
            arms = json.loads(row["cancelled_arms"])
            if arm not in arms:
                await conn.execute("UPDATE comparison_runs SET cancelled_arms=$1 WHERE comparison_id=$2",
                                   json.dumps(sorted([*arms, arm])), comparison_id)
            return True

        return await self._tx(fn)

    async def claim_attempt(self, attempt: AttemptRecord) -> str:
        async def fn(conn: Conn) -> str:
            sql, args = _insert_sql("comparison_attempts", attempt, " ON CONFLICT DO NOTHING RETURNING 1")
            if await conn.fetchval(sql, *args) is None:
                queued = await conn.fetchval("UPDATE comparison_attempts SET status='claimed', owner=$1, lease_until=$2, "
                                             "reserved_micros=$3 WHERE id=$4 AND status='queued' RETURNING 1",
                                             attempt.owner, attempt.lease_until, attempt.reserved_micros, attempt.id)
                if queued is None:
                    return "exists"
            if not await _reserve(conn, attempt.comparison_id, attempt.reserved_micros):
                raise _CapReached
            return "claimed"

        try:
            return await self._tx(fn)
        except _CapReached:
            return "cap"

    async def top_up(self, comparison_id: str, attempt_id: str, amount: int) -> bool:
        async def fn(conn: Conn) -> bool:
            if await conn.fetchval("SELECT 1 FROM comparison_attempts WHERE id=$1 AND status='claimed' FOR UPDATE",
                                   attempt_id) is None:
                return False
            if not await _reserve(conn, comparison_id, amount):
                return False
            await conn.execute("UPDATE comparison_attempts SET reserved_micros = reserved_micros + $1 WHERE id=$2",
                               amount, attempt_id)
            return True

        return await self._tx(fn)

    async def finish_attempt(self, attempt: AttemptRecord, *, charge_micros: int, scores: Sequence[ScoreRecord]) -> bool:
        async def fn(conn: Conn) -> bool:
            reserved = await conn.fetchval("SELECT reserved_micros FROM comparison_attempts WHERE id=$1 "
                                           "AND status='claimed' FOR UPDATE", attempt.id)
            if reserved is None:
                return False
            await _settle(conn, attempt.comparison_id, reserved, charge_micros)
            await conn.execute(
                "UPDATE comparison_attempts SET status=$1, owner=NULL, lease_until=NULL, finished_at=$2, latency_ms=$3, "
                "cost_micros=$4, cost_coverage=$5, output=$6, error=$7 WHERE id=$8",
                attempt.status, attempt.finished_at, attempt.latency_ms, attempt.cost_micros, attempt.cost_coverage,
                attempt.output, attempt.error, attempt.id)
            for score in scores:
                sql, args = _insert_sql("comparison_scores", score)
                await conn.execute(sql, *args)
            return True

        return await self._tx(fn)

    async def claim_judgment(self, score: ScoreRecord) -> str:
        async def fn(conn: Conn) -> str:
            sql, args = _insert_sql("comparison_scores", score, " ON CONFLICT DO NOTHING RETURNING 1")
            if await conn.fetchval(sql, *args) is None:
                return "exists"
            if not await _reserve(conn, score.comparison_id, score.reserved_micros):
                raise _CapReached
            return "claimed"

        try:
            return await self._tx(fn)
        except _CapReached:
            return "cap"

    async def finish_judgment(self, score: ScoreRecord, *, charge_micros: int) -> bool:
        async def fn(conn: Conn) -> bool:
            reserved = await conn.fetchval("SELECT reserved_micros FROM comparison_scores WHERE attempt_id=$1 "
                                           "AND metric=$2 AND status='pending' FOR UPDATE", score.attempt_id, score.metric)
            if reserved is None:
                return False
            await _settle(conn, score.comparison_id, reserved, charge_micros)
            await conn.execute(
                "UPDATE comparison_scores SET status=$1, value=$2, category=$3, detail=$4, cost_micros=$5, "
                "cost_coverage=$6, owner=NULL, lease_until=NULL WHERE attempt_id=$7 AND metric=$8",
                score.status, score.value, score.category, score.detail, score.cost_micros, score.cost_coverage,
                score.attempt_id, score.metric)
            return True

        return await self._tx(fn)

    async def refresh_claims(self, owner: str, *, lease_until: float) -> None:
        async def fn(conn: Conn) -> None:
            await conn.execute("UPDATE comparison_attempts SET lease_until=$1 WHERE owner=$2 AND status='claimed'",
                               lease_until, owner)
            await conn.execute("UPDATE comparison_scores SET lease_until=$1 WHERE owner=$2 AND status='pending'",
                               lease_until, owner)
            await conn.execute("UPDATE comparison_item_leases SET lease_until=$1 WHERE owner=$2", lease_until, owner)

        await self._tx(fn)

    async def expire_claims(self, *, now: float) -> int:
        async def fn(conn: Conn) -> int:
            n = 0
            for row in await conn.fetch("SELECT id, comparison_id, reserved_micros FROM comparison_attempts "
                                        "WHERE status='claimed' AND lease_until < $1 FOR UPDATE SKIP LOCKED", now):
                await _settle(conn, row["comparison_id"], row["reserved_micros"], row["reserved_micros"])
                await conn.execute("UPDATE comparison_attempts SET status='invocation_indeterminate', "
                                   "lease_until=NULL, finished_at=$1, cost_micros=0, cost_coverage='unknown', "
                                   "error='claim_expired' WHERE id=$2", now, row["id"])
                n += 1
            for row in await conn.fetch("SELECT attempt_id, metric, comparison_id, reserved_micros FROM comparison_scores "
                                        "WHERE status='pending' AND lease_until < $1 FOR UPDATE SKIP LOCKED", now):
                await _settle(conn, row["comparison_id"], row["reserved_micros"], row["reserved_micros"])
                await conn.execute("UPDATE comparison_scores SET status='invocation_indeterminate', "
                                   "lease_until=NULL, cost_micros=0, cost_coverage='unknown' "
                                   "WHERE attempt_id=$1 AND metric=$2", row["attempt_id"], row["metric"])
                n += 1
            return n

        return await self._tx(fn)

    async def queue_retry(self, attempt_id: str, *, new: Callable[[AttemptRecord], AttemptRecord]
                          ) -> tuple[str, AttemptRecord | None]:
        async def fn(conn: Conn) -> tuple[str, AttemptRecord | None]:
            row = await conn.fetchrow("SELECT * FROM comparison_attempts WHERE id=$1 FOR UPDATE", attempt_id)
            if row is None:
                return "missing", None
            original = _build(AttemptRecord, row)
            again = await conn.fetchrow("SELECT * FROM comparison_attempts WHERE retry_of=$1", attempt_id)
            if again is not None:
                return "existing", _build(AttemptRecord, again)
            if original.status not in ("invocation_indeterminate", "failed"):
                return "not_retryable", original
            later = await conn.fetchval(
                "SELECT 1 FROM comparison_attempts WHERE comparison_id=$1 AND arm=$2 AND item_id=$3 AND revision_id=$4 "
                "AND repetition=$5 AND attempt > $6", original.comparison_id, original.arm, original.item_id,
                original.revision_id, original.repetition, original.attempt)
            if later is not None:
                return "superseded", original
            retry = new(original)
            sql, args = _insert_sql("comparison_attempts", retry)
            await conn.execute(sql, *args)
            await conn.execute("UPDATE comparisons SET status='running' WHERE id=$1 AND status='completed'",
                               original.comparison_id)
            await conn.execute("UPDATE comparison_runs SET ended_at=NULL WHERE comparison_id=$1",
                               original.comparison_id)
            return "queued", retry

        return await self._tx(fn)

    async def lease_items(self, comparison_id: str, indexes: Sequence[int], *, owner: str, now: float,
                          lease_until: float) -> list[int]:
        async def fn(conn: Conn) -> list[int]:
            wanted = sorted(set(indexes))
            await conn.execute("INSERT INTO comparison_item_leases (comparison_id, item_index) "
                               "SELECT $1, unnest($2::bigint[]) ON CONFLICT DO NOTHING", comparison_id, wanted)
            rows = await conn.fetch(
                "UPDATE comparison_item_leases SET owner=$3, lease_until=$4 WHERE comparison_id=$1 AND item_index IN "
                "(SELECT item_index FROM comparison_item_leases WHERE comparison_id=$1 AND item_index = ANY($2::bigint[]) "
                "AND (owner IS NULL OR owner=$3 OR lease_until < $5) ORDER BY item_index FOR UPDATE SKIP LOCKED) "
                "RETURNING item_index", comparison_id, wanted, owner, lease_until, now)
            return sorted(int(r["item_index"]) for r in rows)

        return await self._tx(fn)

    async def release_items(self, comparison_id: str, indexes: Sequence[int], *, owner: str) -> None:
        await self._open_pool().execute(
            "UPDATE comparison_item_leases SET owner=NULL, lease_until=0 WHERE comparison_id=$1 "
            "AND item_index = ANY($2::bigint[]) AND owner=$3", comparison_id, sorted(set(indexes)), owner)

    async def fail_run(self, comparison_id: str, *, error: str, now: float) -> bool:
        async def fn(conn: Conn) -> bool:
            moved = await conn.fetchval("UPDATE comparisons SET status='failed' WHERE id=$1 "
                                        "AND status IN ('admitted', 'running') RETURNING 1", comparison_id)
            if moved is None:
                return False
            await conn.execute("UPDATE comparison_runs SET ended_at=$1, error=$2 WHERE comparison_id=$3",
                               now, error, comparison_id)
            return True

        return await self._tx(fn)

    async def run_attempts(self, comparison_id: str) -> list[AttemptRecord]:
        rows = await self._open_pool().fetch("SELECT * FROM comparison_attempts WHERE comparison_id=$1 "
                                             "ORDER BY created_at, id", comparison_id)
        return [_build(AttemptRecord, r) for r in rows]

    async def run_scores(self, comparison_id: str) -> list[ScoreRecord]:
        rows = await self._open_pool().fetch("SELECT * FROM comparison_scores WHERE comparison_id=$1 "
                                             "ORDER BY attempt_id, metric", comparison_id)
        return [_build(ScoreRecord, r) for r in rows]
