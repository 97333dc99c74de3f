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
from sidecar.store.errors import IdempotencyConflict
from sidecar.store import cases_sql as c, outbox_sql, reports, segments_sql as g, trials_sql as t
from sidecar.store.dialect import POSTGRES, pg, rowcount
from sidecar.store.records import (
    CaseFinish,
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
    ended_outcome,
)
from sidecar.store.schema_pg import migrate
from sidecar.store.watch_pg import PostgresWatches, apply_effects
from sidecar.store.retention_pg import PostgresRetention

T = TypeVar("T")
Conn = Any  # asyncpg.Connection; asyncpg ships no type information

_RETRYABLE = (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError)
_ATTEMPTS = 3


class PostgresStore(PostgresWatches, PostgresRetention):
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
                if await conn.fetchval(*pg(t.TAKE_KEY, idempotency_key, body_hash, trial.id, trial.created_at)) is None:
                    row = await conn.fetchrow(*pg(t.KEY, idempotency_key))
                    if row["body_hash"] != body_hash:
                        raise IdempotencyConflict(idempotency_key)
                    return t.trial(await conn.fetchrow(*pg(t.BY_ID, row["trial_id"])))
            await conn.execute(*pg(t.INSERT, *dataclasses.astuple(trial)))
            await _enqueue(conn, effects, trial.created_at)
            return trial

        return await self._tx(fn)

    async def get_trial(self, trial_id: str) -> TrialRecord | None:
        return await _trial(self._open_pool(), trial_id)

    async def list_trials(
        self, *, teams: Sequence[str] | None = None, status: str | None = None, kind: str | None = None
    ) -> list[TrialRecord]:
        sql, args = t.listing(teams=teams, status=status, kind=kind)
        return [t.trial(r) for r in await self._open_pool().fetch(*pg(sql, *args))]

    async def set_trial_status(
        self, trial_id: str, status: str, reason: str | None, *, ended: bool, now: float,
        effects: Sequence[OutboxRecord] = (),
    ) -> tuple[TrialRecord | None, bool]:
        async def fn(conn: Conn) -> tuple[TrialRecord | None, bool]:
            row = await conn.fetchrow(*pg(t.SET_STATUS, status, reason, ended, now, trial_id, status))
            if row is None:
                return await _trial(conn, trial_id), False
            await _enqueue(conn, effects, now)
            return t.trial(row), True

        return await self._tx(fn)

    async def decide_trial(
        self, trial_id: str, reason: str, *, now: float, effects: Sequence[OutboxRecord] = ()
    ) -> TrialRecord | None:
        async def fn(conn: Conn) -> TrialRecord | None:
            row = await conn.fetchrow(*pg(t.DECIDE, reason, now, trial_id))
            if row is None:
                return None
            await _enqueue(conn, effects, now)
            return t.trial(row)

        return await self._tx(fn)

    async def resume_trial(
        self, trial_id: str, *, paused: Sequence[str], started_by: str | None,
        execution_site: str | None = None, prompt_retention: bool | None = None,
        effects: Sequence[OutboxRecord] = (), now: float = 0.0,
    ) -> tuple[TrialRecord | None, bool]:
        async def fn(conn: Conn) -> tuple[TrialRecord | None, bool]:
            row = await conn.fetchrow(*pg(t.RESUME, started_by, execution_site, prompt_retention, trial_id, paused))
            if row is None:
                return await _trial(conn, trial_id), False
            await _enqueue(conn, effects, now)
            return t.trial(row), True

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
                    await conn.execute(*pg(t.SAVE_STATE[column], state.text, state.n, trial_id, state.folded_from,
                                           state.n))
            return await _trial(conn, trial_id)

        return await self._tx(fn)

    # -- posture ---------------------------------------------------------------

    async def get_posture(self, team: str) -> TeamPosture | None:
        row = await self._open_pool().fetchrow(*pg(t.POSTURE, team))
        return None if row is None else t.posture(row)

    async def seed_posture(self, team: str, *, prompt_retention: bool, cut_over: bool, now: float) -> bool:
        return rowcount(await self._open_pool().execute(*pg(t.SEED_POSTURE, team, prompt_retention, cut_over, now))) == 1

    async def put_posture(
        self, team: str, *, prompt_retention: bool, cut_over: bool, expected_revision: int | None,
        site: str, now: float, by: str | None, reason: str, effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> PostureWrite:
        """The posture row is created if missing, then locked (so two writers of one team take
        turns and each compares the revision the other committed), then the trials are paused."""

        async def fn(conn: Conn) -> PostureWrite:
            created = await conn.fetchval(*pg(t.CREATE_POSTURE, team, prompt_retention, cut_over, now, by,
                                              expected_revision, expected_revision))
            row = await conn.fetchrow(*pg(t.LOCK_POSTURE, team))
            current = None if row is None else t.posture(row)
            if created is None and expected_revision is not None and expected_revision != (
                0 if current is None else current.revision
            ):
                return PostureWrite(False, current)
            if current is not None and (current.prompt_retention, current.cut_over) != (prompt_retention, cut_over):
                current = t.posture(await conn.fetchrow(*pg(t.UPDATE_POSTURE, prompt_retention, cut_over, now, by, team)))
            paused = await _pause(conn, team, site, prompt_retention, reason, effects, now)
            return PostureWrite(True, current, tuple(paused))

        return await self._tx(fn)

    async def report_uplink(self, team: str, gateway: str, *, content_uplink: bool, now: float) -> None:
        await self._open_pool().execute(*pg(t.REPORT_UPLINK, team, gateway, content_uplink, now))

    async def gateway_reports(self, team: str) -> list[GatewayReport]:
        return [t.gateway_report(r) for r in await self._open_pool().fetch(*pg(t.GATEWAY_REPORTS, team))]

    async def pause_mismatched(
        self, team: str, *, site: str, prompt_retention: bool, reason: str, now: float,
        effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> list[str]:
        return await self._tx(lambda conn: _pause(conn, team, site, prompt_retention, reason, effects, now))

    # -- cases -----------------------------------------------------------------

    async def claim_case(self, case: CaseStart) -> ClaimOutcome:
        return await self._tx(lambda conn: _claim(conn, case))

    async def reserve(self, trial_id: str, case_id: str, micros: int, *, kind: LedgerKind, at: float) -> ReserveResult:
        """The case row is locked first (lock order), and only an unfinished case
        of this trial can reserve: a case recovered meanwhile gets nothing. The cap's
        check and the reservation are one conditional update of the trial row."""

        return await self._tx(lambda conn: _reserve(conn, trial_id, case_id, micros, kind, at))

    async def claim_and_reserve(self, case: CaseStart, micros: int, *, at: float) -> tuple[ClaimOutcome, bool]:
        """One transaction: the claim, the reservation (still the one conditional update of the
        trial row against the cap, :func:`_reserve`) and the dispatch mark — one round of
        BEGIN/COMMIT and one connection from the pool where it was three."""

        async def fn(conn: Conn) -> tuple[ClaimOutcome, bool]:
            claimed = await _claim(conn, case)
            if claimed != "claimed" or not (await _reserve(conn, case.trial_id, case.case_id, micros, "reserve",
                                                           at)).applied:
                return claimed, False
            return claimed, rowcount(await conn.execute(*pg(c.DISPATCHED, case.case_id, case.owner))) == 1

        return await self._tx(fn)

    async def mark_dispatched(self, case_id: str, owner: str) -> bool:
        return rowcount(await self._open_pool().execute(*pg(c.DISPATCHED, case_id, owner))) == 1

    async def finish_case(self, finish: CaseFinish, owner: str) -> bool:
        async def fn(conn: Conn) -> bool:
            reserved = await conn.fetchval(*pg(c.UNFINISHED, finish.case_id, owner))
            if reserved is None:
                return False
            await conn.execute(*pg(c.SETTLE_TRIAL, *c.settle_args(finish, reserved)))
            if finish.trial_status is not None:
                await conn.execute(*pg(t.END_RUNNING, finish.trial_status, finish.trial_status_reason,
                                       finish.finished_at, finish.trial_id))
            await conn.execute(*pg(c.FINISH, *c.finish_args(finish)))
            if c.scored(finish):  # its number was taken by SETTLE_TRIAL
                await conn.execute(*pg(c.SET_SCORE_SEQ, finish.trial_id, finish.case_id))
            await conn.executemany(POSTGRES.sql(c.INSERT_LEDGER), c.finish_ledger(finish, reserved))
            if finish.judgments:
                await conn.executemany(POSTGRES.sql(c.INSERT_JUDGMENT), c.judgment_args(finish))
            await apply_effects(conn, finish)  # outbox records and watch steps
            await _bump(conn, {(finish.trial_id, finish.outcome): 1})
            return True

        return await self._tx(fn)

    async def count_outcomes(self, counts: Mapping[tuple[str, str], int]) -> None:
        if counts:
            await self._tx(lambda conn: _bump(conn, counts))

    async def heartbeat(self, owner: str, *, now: float, lease_s: float) -> None:
        await self._open_pool().execute(*pg(c.HEARTBEAT, owner, now + lease_s, now))

    async def recover_expired(self, now: float, *, report: bool = False, alive: str = "") -> list[str]:
        """Owners whose lease ended before ``now``, and cases whose owner has no
        lease row at all (or none recorded), are recovered, ``alive``'s never; rows
        another sweeper or a live transaction holds are skipped."""

        async def fn(conn: Conn) -> list[str]:
            gone = [
                r["owner"]
                for r in await conn.fetch(
                    "SELECT owner FROM owners WHERE lease_until < $1 AND owner <> $2 ORDER BY owner "
                    "FOR UPDATE SKIP LOCKED", now, alive,
                )
            ]
            rows = await conn.fetch(
                "SELECT c.id, c.trial_id, c.state, c.reserved_micros, c.owner FROM cases c "
                "WHERE c.state <> 'finished' AND (c.owner IS NULL OR c.owner = ANY($1::text[]) "
                "OR NOT EXISTS (SELECT 1 FROM owners o WHERE o.owner = c.owner)) "
                "AND (c.owner IS NULL OR c.owner <> $2) ORDER BY c.trial_id, c.id FOR UPDATE OF c SKIP LOCKED",
                gone, alive,
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
            await conn.execute(*pg(c.FORGET_OWNER, owner))
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
        return await _score_counts(self._open_pool(), trial_id)

    async def scores_after(self, trial_id: str, after: int, limit: int = 100_000) -> list[tuple[int, float]]:
        rows = await self._open_pool().fetch(*pg(c.SCORES_AFTER, trial_id, after, limit))
        return [(int(r["score_seq"]), float(r["score"])) for r in rows]

    async def segment_cases(self, trial_id: str) -> list[g.SegmentCase]:
        return [g.segment_case(r) for r in await self._open_pool().fetch(*pg(g.SCORED, trial_id))]

    async def tracked_segments(self, trial_id: str) -> list[tuple[str, str, str]]:
        rows = await self._open_pool().fetch(*pg(g.TRACKED, trial_id))
        return [(r["key"], r["segment"], r["value"]) for r in rows]

    async def judged_keys(self, trial_id: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in await self._open_pool().fetch(*pg(g.KEYS_OF_JUDGED, trial_id)):
            for key in g.parse_keys(r["segment_keys"]):
                out[key] = out.get(key, 0) + 1
        return out

    async def fold_inputs(self, trial_id: str) -> FoldInputs | None:
        async with self._open_pool().acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            record = await _trial(conn, trial_id)
            if record is None:
                return None
            first = await conn.fetchrow(*pg(c.FIRST_SLOT, trial_id, False))
            return FoldInputs(record, await _score_counts(conn, trial_id), int(first["n"]), int(first["first"]))

    async def snapshot(self, trial_id: str) -> TrialSnapshot | None:
        """One REPEATABLE READ, read-only transaction: every figure from one snapshot."""
        async with self._open_pool().acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            record = await _trial(conn, trial_id)
            if record is None:
                return None
            return TrialSnapshot(
                record=record,
                funnel={r["outcome"]: r["n"] for r in await conn.fetch(*pg(c.FUNNEL, trial_id))},
                score_counts=await _score_counts(conn, trial_id),
                case_states={r["state"]: r["n"] for r in await conn.fetch(*pg(c.STATES, trial_id))},
                judgments=[c.judgment(r) for r in await conn.fetch(*pg(c.JUDGMENTS, trial_id))],
                paired=paired_figures([c.paired_row(r) for r in await conn.fetch(*pg(c.PAIRED, trial_id))]),
            )

    async def progress(self, trial_id: str) -> TrialProgress | None:
        """The trial, its funnel and its case states from one snapshot (no judgments)."""
        async with self._open_pool().acquire() as conn, conn.transaction(isolation="repeatable_read", readonly=True):
            record = await _trial(conn, trial_id)
            if record is None:
                return None
            return TrialProgress(
                record=record,
                funnel={r["outcome"]: r["n"] for r in await conn.fetch(*pg(c.FUNNEL, trial_id))},
                case_states={r["state"]: r["n"] for r in await conn.fetch(*pg(c.STATES, trial_id))},
            )

    async def total_spend(self, *, teams: Sequence[str] | None = None) -> dict[str, int]:
        sql, args = c.spend(teams)
        row = await self._open_pool().fetchrow(*pg(sql, *args))
        return {k: int(row[k]) for k in c.SPEND_KEYS}

    async def cases(self, trial_id: str) -> list[dict[str, object]]:
        return [dict(r.items()) for r in await self._open_pool().fetch(*pg(c.CASES, trial_id))]

    async def ledger(self, trial_id: str) -> list[LedgerEntry]:
        return [c.ledger_entry(r) for r in await self._open_pool().fetch(*pg(c.LEDGER, trial_id))]

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


async def _trial(conn: Conn, trial_id: str) -> TrialRecord | None:
    row = await conn.fetchrow(*pg(t.BY_ID, trial_id))
    return None if row is None else t.trial(row)


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
    ids = [r["id"] for r in await conn.fetch(*pg(t.MISMATCHED, team, site, retention))]
    if ids:
        await conn.execute(*pg(t.PAUSE, reason, ids))
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
        await conn.execute(*pg(c.RECOVER_TRIAL, released, held, unknown, trial_id))
    updates, ledger = [], []
    for r in rows:
        dispatched = r["state"] == "dispatched"
        held = r["reserved_micros"] if dispatched else 0
        coverage = "unknown" if dispatched else "complete"
        why = reasons[r["id"]] + ("" if dispatched else " (never dispatched)")
        updates.append((held, coverage, coverage, why, now, r["id"]))
        if r["reserved_micros"]:
            ledger.append((r["trial_id"], r["id"], "release", r["reserved_micros"], now))
        if held:
            ledger.append((r["trial_id"], r["id"], "hold_unknown", held, now))
    if updates:
        await conn.executemany(POSTGRES.sql(c.RECOVER_CASE), updates)
    if ledger:
        await conn.executemany(POSTGRES.sql(c.INSERT_LEDGER), ledger)
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
    return {float(r["score"]): r["n"] for r in await conn.fetch(*pg(c.SCORES, trial_id))}


async def _track_segments(conn: Conn, case: CaseStart) -> None:
    """Map a claimed case's segment values to tracked keys or ``other``. Only a case bringing a
    new value locks the trial row (after its own case row: the lock order), so at most
    ``segment_cap`` claims of a trial ever take that lock to add one, and the cap holds
    across the fleet. ``FOR NO KEY UPDATE``: the case row's foreign key holds a key-share lock
    on the trial, which ``FOR UPDATE`` would wait on in a racing claim (a deadlock)."""
    tracked = {r["key"] for r in await conn.fetch(*pg(g.TRACKED_KEYS, case.trial_id))}
    keys, new = g.plan(case, tracked)
    if new:
        await conn.fetchval(g.LOCK_TRIAL_PG, case.trial_id)
        tracked = {r["key"] for r in await conn.fetch(*pg(g.TRACKED_KEYS, case.trial_id))}
        keys, new = g.plan(case, tracked)
        for key, segment, value in new:
            await conn.execute(*pg(g.TRACK, case.trial_id, key, segment, value, case.trial_id))
    await conn.execute(*pg(g.SET_KEYS, g.keys_text(keys), case.case_id))


async def _claim(conn: Conn, case: CaseStart) -> ClaimOutcome:
    """:meth:`PostgresStore.claim_case` on a connection in a transaction."""
    # A re-delivery is a duplicate whatever the trial's status now: it was counted once.
    if await conn.fetchval(*pg(c.SEEN, case.trial_id, case.exchange_id)):
        return "duplicate"
    status = await conn.fetchval(*pg(t.STATUS, case.trial_id))
    if status is None:
        return "not_running"
    ended = ended_outcome(status)
    if rowcount(await conn.execute(*pg(c.CLAIM, *c.claim_args(case, ended, status)))) != 1:
        return "duplicate"
    if ended is not None:
        await _bump(conn, {(case.trial_id, ended): 1})
        return "not_running"
    if case.segment_values:
        await _track_segments(conn, case)
    return "claimed"


async def _reserve(conn: Conn, trial_id: str, case_id: str, micros: int, kind: LedgerKind, at: float) -> ReserveResult:
    """:meth:`PostgresStore.reserve` on a connection in a transaction."""
    state = await conn.fetchval("SELECT state FROM cases WHERE id=$1 AND trial_id=$2 FOR UPDATE", case_id, trial_id)
    row = None
    if state is not None and state != "finished":
        row = await conn.fetchrow(
            "UPDATE trials SET reserved_micros = reserved_micros + $1 "
            "WHERE id=$2 AND status='running' AND spent_micros + reserved_micros + $1 <= cap_micros "
            "RETURNING cap_micros, spent_micros, reserved_micros, status",
            micros, trial_id,
        )
    if row is not None:
        await conn.execute(*pg(c.RESERVE_CASE, micros, case_id))
        await conn.execute(*pg(c.INSERT_LEDGER, trial_id, case_id, kind, micros, at))
        return ReserveResult(True, row["cap_micros"], row["spent_micros"], row["reserved_micros"], row["status"])
    row = await conn.fetchrow(*pg(c.FIGURES, trial_id))
    if row is None:
        return ReserveResult(False, 0, 0, 0, "missing")
    return ReserveResult(False, row["cap_micros"], row["spent_micros"], row["reserved_micros"], row["status"])
