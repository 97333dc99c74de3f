"""PostgreSQL: the store a fleet of sidecars shares.

An asyncpg pool opened in :meth:`PostgresStore.open` on the running event loop
(and only usable from it) and closed in :meth:`PostgresStore.close`; opening
applies the numbered migrations of :mod:`sidecar.store.schema_pg` under an
advisory lock. Each method is one READ COMMITTED transaction (the snapshot one
REPEATABLE READ, read-only).

Concurrency, by construction rather than by retry:

* The cap: :meth:`PostgresStore.reserve` adds to the trial's reservation with
  one conditional ``UPDATE … WHERE spent + reserved + amount <= cap``; a
  concurrent writer of the same trial row makes it wait and then re-evaluate
  the condition on the committed row. The table's CHECK refuses any row over
  the cap whatever the statement.
* Ledger order: every transaction that writes spend-ledger rows updates the
  trial row first and holds its lock to commit, so for one trial the ledger's
  ``seq`` order is commit order.
* Lock order is owners → cases → trials (ascending id) → funnel rows
  (ascending key) in every method, so no two transactions wait on each other
  in a cycle. (A deadlock or serialization failure is still retried, twice, as
  a safety net: each method is one transaction with no effect outside it.)
* Recovery (:meth:`PostgresStore.recover_expired`, :meth:`PostgresStore.retire`)
  picks owners and cases with ``FOR UPDATE SKIP LOCKED``: sweepers in several
  processes share the work and never recover a case twice; a case its owner is
  finishing right now is skipped, and re-checked by the next sweep.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import asyncpg

from policies.paired import paired_figures
from sidecar.store.corpus_pg import PostgresCorpus
from sidecar.store.corpus_runs_pg import PostgresCorpusRuns
from sidecar.store.errors import IdempotencyConflict
from sidecar.store import outbox_sql, reports
from sidecar.store.dialect import pg, rowcount
from sidecar.store.records import (
    CaseFinish,
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
    ended_outcome,
)
from sidecar.store.schema_pg import migrate
from sidecar.store.watch_pg import PostgresWatches, apply_effects
from sidecar.store.collected_pg import PostgresCollected
from sidecar.store.retention_pg import PostgresRetention

T = TypeVar("T")
Conn = Any  # asyncpg.Connection; asyncpg ships no type information

_TRIAL_FIELDS = [f.name for f in dataclasses.fields(TrialRecord)]
_TRIAL_COLUMNS = ", ".join(_TRIAL_FIELDS)
_INSERT_TRIAL = (
    f"INSERT INTO trials ({_TRIAL_COLUMNS}) VALUES ({', '.join(f'${i}' for i in range(1, len(_TRIAL_FIELDS) + 1))})"
)
_INSERT_LEDGER = "INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES ($1, $2, $3, $4, $5)"
_FIGURES = "cap_micros, spent_micros, reserved_micros, status"
_RETRYABLE = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)
_ATTEMPTS = 3


def _trial(row: Any) -> TrialRecord:
    return TrialRecord(**{k: row[k] for k in _TRIAL_FIELDS})


class PostgresStore(PostgresCorpus, PostgresCorpusRuns, PostgresWatches, PostgresCollected, PostgresRetention):
    """The :class:`sidecar.store.base.Store` over one PostgreSQL database.

    Several instances — in one process or many — may share the database; that
    is what it is for. An instance is bound to the event loop that opened it.
    Using it before :meth:`open` or after :meth:`close` raises ``RuntimeError``.
    """

    def __init__(
        self, dsn: str, *, min_connections: int = 1, max_connections: int = 10, lock_timeout_s: float = 10.0
    ) -> None:
        self.dsn = dsn
        self._lock_timeout_ms = max(1, int(lock_timeout_s * 1000))
        self._min = min_connections
        self._max = max_connections
        self._pool: Any = None

    # -- plumbing -------------------------------------------------------------

    async def open(self) -> None:
        pool = await asyncpg.create_pool(
            self.dsn, min_size=self._min, max_size=self._max,
            server_settings={"lock_timeout": str(self._lock_timeout_ms)},
        )
        try:
            async with pool.acquire() as conn:
                await migrate(conn)
        except BaseException:
            await pool.close()
            raise
        self._pool = pool

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    def _open_pool(self) -> Any:
        if self._pool is None:
            raise RuntimeError("store is not open")
        return self._pool

    async def _tx(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        """Run ``fn`` in one READ COMMITTED transaction, retrying a deadlock or
        serialization failure (none is expected: see the module docstring)."""
        pool = self._open_pool()
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                async with pool.acquire() as conn, conn.transaction():
                    return await fn(conn)
            except _RETRYABLE:
                if attempt == _ATTEMPTS:
                    raise
        raise AssertionError("unreachable")

    # -- trials ----------------------------------------------------------------

    async def create_trial(
        self, trial: TrialRecord, *, idempotency_key: str | None = None, body_hash: str | None = None,
        effects: Sequence[OutboxRecord] = (),
    ) -> TrialRecord:
        """The key row is inserted first: a concurrent create with the same key
        waits on it, then finds it and returns the same trial."""

        async def fn(conn: Conn) -> TrialRecord:
            if idempotency_key is not None:
                taken = await conn.fetchval(
                    "INSERT INTO idempotency (key, body_hash, trial_id, created_at) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT (key) DO NOTHING RETURNING 1",
                    idempotency_key, body_hash, trial.id, trial.created_at,
                )
                if taken is None:
                    row = await conn.fetchrow("SELECT body_hash, trial_id FROM idempotency WHERE key=$1", idempotency_key)
                    if row["body_hash"] != body_hash:
                        raise IdempotencyConflict(idempotency_key)
                    return _trial(await conn.fetchrow("SELECT * FROM trials WHERE id=$1", row["trial_id"]))
            await conn.execute(_INSERT_TRIAL, *dataclasses.astuple(trial))
            await _enqueue(conn, effects, trial.created_at)
            return trial

        return await self._tx(fn)

    async def get_trial(self, trial_id: str) -> TrialRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM trials WHERE id=$1", trial_id)
        return None if row is None else _trial(row)

    async def list_trials(
        self, *, teams: Sequence[str] | None = None, status: str | None = None, kind: str | None = None
    ) -> list[TrialRecord]:
        rows = await self._open_pool().fetch(
            "SELECT * FROM trials WHERE ($1::text[] IS NULL OR team = ANY($1::text[])) "
            "AND ($2::text IS NULL OR status = $2::text) AND ($3::text IS NULL OR kind = $3::text) "
            "ORDER BY created_at DESC, id",
            None if teams is None else list(teams), status, kind,
        )
        return [_trial(r) for r in rows]

    async def set_trial_status(
        self, trial_id: str, status: str, reason: str | None, *, ended: bool, now: float,
        effects: Sequence[OutboxRecord] = (),
    ) -> tuple[TrialRecord | None, bool]:
        async def fn(conn: Conn) -> tuple[TrialRecord | None, bool]:
            row = await conn.fetchrow(
                "UPDATE trials SET status=$2, status_reason=$3, "
                "ended_at = CASE WHEN $4 THEN COALESCE(ended_at, $5) ELSE ended_at END "
                "WHERE id=$1 AND status <> $2 AND status <> 'adopted' RETURNING *",  # adoption is final
                trial_id, status, reason, ended, now,
            )
            if row is not None:
                await _enqueue(conn, effects, now)
                return _trial(row), True
            row = await conn.fetchrow("SELECT * FROM trials WHERE id=$1", trial_id)
            return (None if row is None else _trial(row)), False

        return await self._tx(fn)

    async def resume_trial(
        self, trial_id: str, *, paused: Sequence[str], started_by: str | None,
        execution_site: str | None = None, prompt_retention: bool | None = None,
        effects: Sequence[OutboxRecord] = (), now: float = 0.0,
    ) -> tuple[TrialRecord | None, bool]:
        async def fn(conn: Conn) -> tuple[TrialRecord | None, bool]:
            row = await conn.fetchrow(
                "UPDATE trials SET status='running', status_reason=NULL, started_by=$2, "
                "execution_site=COALESCE($4::text, execution_site), "
                "prompt_retention=COALESCE($5::boolean, prompt_retention) "
                "WHERE id=$1 AND status = ANY($3::text[]) RETURNING *",
                trial_id, started_by, list(paused), execution_site, prompt_retention,
            )
            if row is not None:
                await _enqueue(conn, effects, now)
                return _trial(row), True
            row = await conn.fetchrow("SELECT * FROM trials WHERE id=$1", trial_id)
            return (None if row is None else _trial(row)), False

        return await self._tx(fn)

    async def save_states(
        self, trial_id: str, *, sequence: KeptState | None = None, judge_health: KeptState | None = None
    ) -> TrialRecord | None:
        """Each state a compare-and-set on its text that never lowers its count. The
        trial row's lock serialises writers: one that waited re-checks the condition
        on the committed row (READ COMMITTED), so of two racing from one text only
        the first is kept."""

        async def fn(conn: Conn) -> TrialRecord | None:
            for column, state in (("sequence", sequence), ("judge_health", judge_health)):
                if state is not None:
                    await conn.execute(
                        f"UPDATE trials SET {column}_state=$2, {column}_n=$3 WHERE id=$1 "
                        f"AND {column}_state IS NOT DISTINCT FROM $4::text "
                        f"AND ({column}_n IS NULL OR {column}_n <= $3)",
                        trial_id, state.text, state.n, state.folded_from,
                    )
            row = await conn.fetchrow("SELECT * FROM trials WHERE id=$1", trial_id)
            return None if row is None else _trial(row)

        return await self._tx(fn)

    # -- posture ---------------------------------------------------------------

    async def get_posture(self, team: str) -> TeamPosture | None:
        row = await self._open_pool().fetchrow("SELECT * FROM team_posture WHERE team=$1", team)
        return None if row is None else _posture(row)

    async def seed_posture(self, team: str, *, prompt_retention: bool, cut_over: bool, now: float) -> bool:
        done = await self._open_pool().fetchval(
            "INSERT INTO team_posture (team, prompt_retention, cut_over, revision, updated_at, updated_by) "
            "VALUES ($1, $2, $3, 1, $4, NULL) ON CONFLICT (team) DO NOTHING RETURNING 1",
            team, prompt_retention, cut_over, now,
        )
        return done is not None

    async def put_posture(
        self, team: str, *, prompt_retention: bool, cut_over: bool, expected_revision: int | None,
        site: str, now: float, by: str | None, reason: str, effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> PostureWrite:
        """The posture row is created if missing, then locked (so two writers of one team take
        turns and each compares the revision the other committed), then the trials are paused."""

        async def fn(conn: Conn) -> PostureWrite:
            created = await conn.fetchval(
                "INSERT INTO team_posture (team, prompt_retention, cut_over, revision, updated_at, updated_by) "
                "SELECT $1, $2, $3, 1, $4, $5 WHERE $6::bigint IS NULL OR $6::bigint = 0 "
                "ON CONFLICT (team) DO NOTHING RETURNING 1",
                team, prompt_retention, cut_over, now, by, expected_revision,
            )
            row = await conn.fetchrow("SELECT * FROM team_posture WHERE team=$1 FOR UPDATE", team)
            current = None if row is None else _posture(row)
            if created is None and expected_revision is not None and expected_revision != (
                0 if current is None else current.revision
            ):
                return PostureWrite(False, current)
            if current is not None and (current.prompt_retention, current.cut_over) != (prompt_retention, cut_over):
                row = await conn.fetchrow(
                    "UPDATE team_posture SET prompt_retention=$2, cut_over=$3, revision=revision+1, updated_at=$4, "
                    "updated_by=$5 WHERE team=$1 RETURNING *",
                    team, prompt_retention, cut_over, now, by,
                )
                current = _posture(row)
            paused = await _pause(conn, team, site, prompt_retention, reason, effects, now)
            return PostureWrite(True, current, tuple(paused))

        return await self._tx(fn)

    async def report_uplink(self, team: str, gateway: str, *, content_uplink: bool, now: float) -> None:
        await self._open_pool().execute(
            "INSERT INTO gateway_uplink (team, gateway, content_uplink, last_seen) VALUES ($1, $2, $3, $4) "
            "ON CONFLICT (team, gateway) DO UPDATE SET content_uplink=EXCLUDED.content_uplink, "
            "last_seen=GREATEST(gateway_uplink.last_seen, EXCLUDED.last_seen)",
            team, gateway, content_uplink, now,
        )

    async def gateway_reports(self, team: str) -> list[GatewayReport]:
        rows = await self._open_pool().fetch(
            "SELECT gateway, content_uplink, last_seen FROM gateway_uplink WHERE team=$1 ORDER BY gateway COLLATE \"C\"",
            team,
        )
        return [GatewayReport(r["gateway"], r["content_uplink"], r["last_seen"]) for r in rows]

    async def pause_mismatched(
        self, team: str, *, site: str, prompt_retention: bool, reason: str, now: float,
        effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> list[str]:
        return await self._tx(lambda conn: _pause(conn, team, site, prompt_retention, reason, effects, now))

    # -- cases -----------------------------------------------------------------

    async def claim_case(self, case: CaseStart) -> ClaimOutcome:
        async def fn(conn: Conn) -> ClaimOutcome:
            # A re-delivery is a duplicate whatever the trial's status now: it was counted once.
            if await conn.fetchval(
                "SELECT 1 FROM cases WHERE trial_id=$1 AND exchange_id=$2", case.trial_id, case.exchange_id
            ):
                return "duplicate"
            status = await conn.fetchval("SELECT status FROM trials WHERE id=$1", case.trial_id)
            if status is None:
                return "not_running"
            ended = ended_outcome(status)
            inserted = await conn.fetchval(
                "INSERT INTO cases (id, trial_id, exchange_id, owner, state, outcome, reserved_micros, charged_micros, "
                "incumbent_latency_ms, incumbent_output_tokens, incumbent_cost_micros, incumbent_cost_coverage, "
                "bodies_json, error, created_at, finished_at) "
                "VALUES ($1, $2, $3, $4, $5, $6, 0, $7, $8, $9, $10, $11, $12, $13, $14, $15) "
                "ON CONFLICT DO NOTHING RETURNING 1",
                case.case_id, case.trial_id, case.exchange_id, case.owner,
                "claimed" if ended is None else "finished", ended, None if ended is None else 0,
                case.incumbent_latency_ms, case.incumbent_output_tokens, case.incumbent_cost_micros,
                case.incumbent_cost_coverage, None if ended else case.bodies_json,
                None if ended is None else f"trial is {status}", case.created_at,
                None if ended is None else case.created_at,
            )
            if inserted is None:
                return "duplicate"
            if ended is not None:
                await _bump(conn, {(case.trial_id, ended): 1})
                return "not_running"
            return "claimed"

        return await self._tx(fn)

    async def reserve(self, trial_id: str, case_id: str, micros: int, *, kind: LedgerKind, at: float) -> ReserveResult:
        """The case row is locked first (lock order), and only an unfinished case
        of this trial can reserve: a case recovered meanwhile gets nothing."""

        async def fn(conn: Conn) -> ReserveResult:
            state = await conn.fetchval(
                "SELECT state FROM cases WHERE id=$1 AND trial_id=$2 FOR UPDATE", case_id, trial_id
            )
            row = None
            if state is not None and state != "finished":
                row = await conn.fetchrow(
                    "UPDATE trials SET reserved_micros = reserved_micros + $1 "
                    "WHERE id=$2 AND status='running' AND spent_micros + reserved_micros + $1 <= cap_micros "
                    f"RETURNING {_FIGURES}",
                    micros, trial_id,
                )
            if row is not None:
                await conn.execute(
                    "UPDATE cases SET reserved_micros = reserved_micros + $1, "
                    "state = CASE WHEN state='claimed' THEN 'reserved' ELSE state END WHERE id=$2",
                    micros, case_id,
                )
                await conn.execute(_INSERT_LEDGER, trial_id, case_id, kind, micros, at)
                return ReserveResult(True, row["cap_micros"], row["spent_micros"], row["reserved_micros"], row["status"])
            row = await conn.fetchrow(f"SELECT {_FIGURES} FROM trials WHERE id=$1", trial_id)
            if row is None:
                return ReserveResult(False, 0, 0, 0, "missing")
            return ReserveResult(False, row["cap_micros"], row["spent_micros"], row["reserved_micros"], row["status"])

        return await self._tx(fn)

    async def mark_dispatched(self, case_id: str, owner: str) -> bool:
        done = await self._open_pool().fetchval(
            "UPDATE cases SET state='dispatched' WHERE id=$1 AND owner=$2 AND state='reserved' RETURNING 1",
            case_id, owner,
        )
        return done is not None

    async def finish_case(self, finish: CaseFinish, owner: str) -> bool:
        async def fn(conn: Conn) -> bool:
            reserved = await conn.fetchval(
                "SELECT reserved_micros FROM cases WHERE id=$1 AND owner=$2 AND state <> 'finished' FOR UPDATE",
                finish.case_id, owner,
            )
            if reserved is None:
                return False
            await conn.execute(
                "UPDATE trials SET reserved_micros = reserved_micros - $1, spent_micros = spent_micros + $2, "
                "known_micros = known_micros + $3, unknown_calls = unknown_calls + $4, priced_calls = priced_calls + $5, "
                "disputed_calls = disputed_calls + $6 WHERE id=$7",
                reserved, finish.charged_micros, finish.known_micros, finish.unknown_calls, finish.priced_calls,
                finish.disputed_calls, finish.trial_id,
            )
            if finish.trial_status is not None:
                await conn.execute(
                    "UPDATE trials SET status=$1, status_reason=$2, ended_at=COALESCE(ended_at, $3) "
                    "WHERE id=$4 AND status='running'",
                    finish.trial_status, finish.trial_status_reason, finish.finished_at, finish.trial_id,
                )
            await conn.execute(
                "UPDATE cases SET state='finished', outcome=$1, charged_micros=$2, candidate_cost_micros=$3, "
                "candidate_cost_coverage=$4, judge_cost_micros=$5, judge_cost_coverage=$6, candidate_latency_ms=$7, "
                "candidate_output_tokens=$8, score=$9, error=$10, finished_at=$11, bodies_json=$12 WHERE id=$13",
                finish.outcome, finish.charged_micros, finish.candidate_cost_micros, finish.candidate_cost_coverage,
                finish.judge_cost_micros, finish.judge_cost_coverage, finish.candidate_latency_ms,
                finish.candidate_output_tokens, finish.score, finish.error, finish.finished_at,
                finish.bodies_json, finish.case_id,
            )
            ledger = [(finish.trial_id, finish.case_id, "charge", finish.charged_micros, finish.finished_at)]
            if reserved:
                ledger.insert(0, (finish.trial_id, finish.case_id, "release", reserved, finish.finished_at))
            await conn.executemany(_INSERT_LEDGER, ledger)
            if finish.judgments:
                await conn.executemany(
                    "INSERT INTO judgments (id, case_id, trial_id, judge_version_id, presentation_order, is_audit, "
                    "outcome, score, strong, winner_slot, error, longer_won, created_at) "
                    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
                    [
                        (j.judgment_id, j.case_id, j.trial_id, j.judge_version_id, j.order, j.is_audit, j.outcome,
                         j.score, j.strong, j.winner_slot, j.error, j.longer_won, j.created_at)
                        for j in finish.judgments
                    ],
                )
            await apply_effects(conn, finish)  # outbox records and watch steps
            await _bump(conn, {(finish.trial_id, finish.outcome): 1})
            return True

        return await self._tx(fn)

    async def count_outcomes(self, counts: Mapping[tuple[str, str], int]) -> None:
        if counts:
            await self._tx(lambda conn: _bump(conn, counts))

    async def heartbeat(self, owner: str, *, now: float, lease_s: float) -> None:
        await self._open_pool().execute(
            "INSERT INTO owners (owner, lease_until, started_at) VALUES ($1, $2, $3) "
            "ON CONFLICT (owner) DO UPDATE SET lease_until = EXCLUDED.lease_until",
            owner, now + lease_s, now,
        )

    async def recover_expired(self, now: float, *, report: bool = False) -> list[str]:
        """Owners whose lease ended before ``now``, and cases whose owner has no
        lease row at all (or none recorded), are recovered; rows another sweeper
        or a live transaction holds are skipped."""

        async def fn(conn: Conn) -> list[str]:
            gone = [
                r["owner"]
                for r in await conn.fetch(
                    "SELECT owner FROM owners WHERE lease_until < $1 ORDER BY owner FOR UPDATE SKIP LOCKED", now
                )
            ]
            rows = await conn.fetch(
                "SELECT c.id, c.trial_id, c.state, c.reserved_micros, c.owner FROM cases c "
                "WHERE c.state <> 'finished' AND (c.owner IS NULL OR c.owner = ANY($1::text[]) "
                "OR NOT EXISTS (SELECT 1 FROM owners o WHERE o.owner = c.owner)) "
                "ORDER BY c.trial_id, c.id FOR UPDATE OF c SKIP LOCKED",
                gone,
            )
            expired = set(gone)
            reasons = {
                r["id"]: "its owner's lease expired" if r["owner"] in expired else "its owner is gone" for r in rows
            }
            await _mark_indeterminate(conn, rows, now, reasons)
            if gone:
                await conn.execute("DELETE FROM owners WHERE owner = ANY($1::text[])", gone)
            if report:
                await _report(conn, [r["id"] for r in rows], now)
            return [r["id"] for r in rows]

        return await self._tx(fn)

    async def retire(self, owner: str, now: float, *, report: bool = False) -> list[str]:
        async def fn(conn: Conn) -> list[str]:
            # The owner row first: the lock order every method keeps (owners → cases → trials).
            await conn.execute("DELETE FROM owners WHERE owner=$1", owner)
            rows = await conn.fetch(
                "SELECT id, trial_id, state, reserved_micros, owner FROM cases "
                "WHERE owner=$1 AND state <> 'finished' ORDER BY trial_id, id FOR UPDATE SKIP LOCKED",
                owner,
            )
            await _mark_indeterminate(conn, rows, now, {r["id"]: "in flight when the process stopped" for r in rows})
            if report:
                await _report(conn, [r["id"] for r in rows], now)
            return [r["id"] for r in rows]

        return await self._tx(fn)

    # -- reads -----------------------------------------------------------------

    async def score_counts(self, trial_id: str) -> dict[float, int]:
        async with self._open_pool().acquire() as conn:
            return await _score_counts(conn, trial_id)

    async def snapshot(self, trial_id: str) -> TrialSnapshot | None:
        """One REPEATABLE READ, read-only transaction: every figure from one snapshot."""
        async with self._open_pool().acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            row = await conn.fetchrow("SELECT * FROM trials WHERE id=$1", trial_id)
            if row is None:
                return None
            funnel = await conn.fetch("SELECT outcome, n FROM funnel WHERE trial_id=$1", trial_id)
            states = await conn.fetch("SELECT state, COUNT(*) AS n FROM cases WHERE trial_id=$1 GROUP BY state", trial_id)
            judgments = await conn.fetch("SELECT * FROM judgments WHERE trial_id=$1 ORDER BY created_at, id", trial_id)
            paired = await conn.fetch(
                "SELECT candidate_cost_micros AS cc, candidate_cost_coverage AS ccv, incumbent_cost_micros AS ic, "
                "incumbent_cost_coverage AS icv, candidate_latency_ms AS cl, incumbent_latency_ms AS il "
                "FROM cases WHERE trial_id=$1 AND outcome='judged'",
                trial_id,
            )
            return TrialSnapshot(
                record=_trial(row),
                funnel={r["outcome"]: r["n"] for r in funnel},
                score_counts=await _score_counts(conn, trial_id),
                case_states={r["state"]: r["n"] for r in states},
                judgments=[_judgment(r) for r in judgments],
                paired=paired_figures([(r["cc"], r["ccv"], r["ic"], r["icv"], r["cl"], r["il"]) for r in paired]),
            )

    async def total_spend(self, *, teams: Sequence[str] | None = None) -> dict[str, int]:
        row = await self._open_pool().fetchrow(
            "SELECT COALESCE(SUM(spent_micros), 0)::bigint AS spent, COALESCE(SUM(known_micros), 0)::bigint AS known, "
            "COALESCE(SUM(reserved_micros), 0)::bigint AS reserved, "
            "COALESCE(SUM(unknown_calls), 0)::bigint AS unknown_calls "
            "FROM trials WHERE $1::text[] IS NULL OR team = ANY($1::text[])",
            None if teams is None else list(teams),
        )
        return {k: int(row[k]) for k in ("spent", "known", "reserved", "unknown_calls")}

    async def cases(self, trial_id: str) -> list[dict[str, object]]:
        rows = await self._open_pool().fetch(
            "SELECT id, exchange_id, owner, state, outcome, reserved_micros, charged_micros, score, error FROM cases "
            "WHERE trial_id=$1 ORDER BY created_at, id",
            trial_id,
        )
        return [dict(r.items()) for r in rows]

    async def ledger(self, trial_id: str) -> list[LedgerEntry]:
        rows = await self._open_pool().fetch(
            "SELECT seq, trial_id, case_id, kind, micros, at FROM spend_ledger WHERE trial_id=$1 ORDER BY seq", trial_id
        )
        return [LedgerEntry(r["seq"], r["trial_id"], r["case_id"], r["kind"], r["micros"], r["at"]) for r in rows]

    async def outbox(self, *, limit: int = 1000) -> list[OutboxRecord]:
        rows = await self._open_pool().fetch(*pg(outbox_sql.LIST, limit))
        return [OutboxRecord(r["record_id"], r["topic"], r["body"]) for r in rows]

    # -- the uplink's delivery (sidecar.store.base.OutboxDelivery) -------------

    async def claim_outbox(self, owner: str, *, limit: int, lease_s: float, now: float) -> list[tuple[str, bytes]]:
        rows = await self._open_pool().fetch(*pg(outbox_sql.CLAIM, owner, now + lease_s, owner, now, limit))
        return [(r["record_id"], r["body"].encode()) for r in sorted(rows, key=lambda r: r["seq"])]

    async def delete_outbox(self, record_ids: Sequence[str]) -> int:
        return rowcount(await self._open_pool().execute(*pg(outbox_sql.DELETE, record_ids)))

    async def outbox_depth(self) -> int:
        return int(await self._open_pool().fetchval(outbox_sql.DEPTH))

    async def enqueue_outbox(self, records: Sequence[OutboxRecord], *, now: float) -> int:
        return await self._tx(lambda conn: _enqueue(conn, records, now))


async def _report(conn: Conn, case_ids: Sequence[str], now: float) -> None:
    """Write the ``case_result`` of each case recovery just finished (:mod:`sidecar.store.reports`)."""
    if not case_ids:
        return
    rows = await conn.fetch(*pg(reports.FINISHED, case_ids))
    await _enqueue(conn, [reports.indeterminate_record(r) for r in rows], now)


def _posture(row: Any) -> TeamPosture:
    return TeamPosture(row["team"], row["prompt_retention"], row["cut_over"], row["revision"], row["updated_at"],
                       row["updated_by"])


async def _enqueue(conn: Conn, effects: Sequence[OutboxRecord], at: float) -> int:
    """Write outbox records, each unless its id is there already; how many went in."""
    added = 0
    for e in effects:
        added += rowcount(await conn.execute(*pg(outbox_sql.ENQUEUE, e.record_id, e.topic, e.body, at)))
    return added


async def _pause(
    conn: Conn, team: str, site: str, retention: bool, reason: str,
    effects: Mapping[str, Sequence[OutboxRecord]] | None = None, now: float = 0.0,
) -> list[str]:
    """Pause the team's running trials pinned to another site or retention; their ids. The
    rows are locked in ascending id first (the lock order of the module's docstring)."""
    ids = [
        r["id"]
        for r in await conn.fetch(
            "SELECT id FROM trials WHERE team=$1 AND status='running' AND (execution_site <> $2 OR prompt_retention <> $3) "
            "ORDER BY id FOR UPDATE",
            team, site, retention,
        )
    ]
    if ids:
        await conn.execute(
            "UPDATE trials SET status='posture_changed', status_reason=$2 WHERE id = ANY($1::text[]) AND status='running'",
            ids, reason,
        )
    if effects:
        for trial_id in sorted(ids):
            await _enqueue(conn, effects.get(trial_id, ()), now)
    return sorted(ids)


async def _mark_indeterminate(conn: Conn, rows: Sequence[Any], now: float, reasons: Mapping[str, str]) -> None:
    """Finish the locked cases ``rows`` as ``indeterminate``; none is re-run.

    A case that dispatched may have been billed: its reservation is held as
    unknown spend. One that never dispatched has its reservation released.
    Trial rows are updated first, in ascending id, then the cases, the ledger
    and the funnel."""
    per_trial: dict[str, list[int]] = {}  # trial id -> [released, held, unknown calls, cases]
    for r in rows:
        dispatched = r["state"] == "dispatched"
        figures = per_trial.setdefault(r["trial_id"], [0, 0, 0, 0])
        figures[0] += r["reserved_micros"]
        figures[1] += r["reserved_micros"] if dispatched else 0
        figures[2] += 1 if dispatched else 0
        figures[3] += 1
    for trial_id in sorted(per_trial):
        released, held, unknown, _ = per_trial[trial_id]
        await conn.execute(
            "UPDATE trials SET reserved_micros = reserved_micros - $1, spent_micros = spent_micros + $2, "
            "unknown_calls = unknown_calls + $3 WHERE id=$4",
            released, held, unknown, trial_id,
        )
    updates, ledger = [], []
    for r in rows:
        dispatched = r["state"] == "dispatched"
        held = r["reserved_micros"] if dispatched else 0
        coverage = "unknown" if dispatched else "complete"
        why = reasons[r["id"]] + ("" if dispatched else " (never dispatched)")
        updates.append((held, coverage, why, now, r["id"]))
        if r["reserved_micros"]:
            ledger.append((r["trial_id"], r["id"], "release", r["reserved_micros"], now))
        if held:
            ledger.append((r["trial_id"], r["id"], "hold_unknown", held, now))
    if updates:
        await conn.executemany(
            "UPDATE cases SET state='finished', outcome='indeterminate', charged_micros=$1, "
            "candidate_cost_coverage=$2, judge_cost_coverage=$2, error=$3, finished_at=$4 WHERE id=$5",
            updates,
        )
    if ledger:
        await conn.executemany(_INSERT_LEDGER, ledger)
    if per_trial:
        await _bump(conn, {(t, "indeterminate"): figures[3] for t, figures in per_trial.items()})


async def _bump(conn: Conn, counts: Mapping[tuple[str, str], int]) -> None:
    """Add ``counts`` to the funnel in one statement, rows taken in key order."""
    keys = sorted(counts)
    await conn.execute(
        "INSERT INTO funnel (trial_id, outcome, n) "
        "SELECT t, o, n FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(t, o, n) ORDER BY t, o "
        "ON CONFLICT (trial_id, outcome) DO UPDATE SET n = funnel.n + EXCLUDED.n",
        [t for t, _ in keys], [o for _, o in keys], [counts[k] for k in keys],
    )


async def _score_counts(conn: Conn, trial_id: str) -> dict[float, int]:
    rows = await conn.fetch(
        "SELECT score, COUNT(*) AS n FROM cases WHERE trial_id=$1 AND outcome='judged' AND score IS NOT NULL "
        "GROUP BY score",
        trial_id,
    )
    return {float(r["score"]): r["n"] for r in rows}


def _judgment(r: Any) -> JudgmentRow:
    return JudgmentRow(
        judgment_id=r["id"], case_id=r["case_id"], trial_id=r["trial_id"], judge_version_id=r["judge_version_id"],
        order=r["presentation_order"], is_audit=r["is_audit"], outcome=r["outcome"], score=r["score"],
        strong=r["strong"], winner_slot=r["winner_slot"], error=r["error"], longer_won=r["longer_won"],
        created_at=r["created_at"],
    )
