"""Promotion, watches and alerts in PostgreSQL (:class:`sidecar.store.base.WatchStore`).

Mixed into :class:`sidecar.store.postgres.PostgresStore`. A watch step reads the watch row
``FOR UPDATE`` inside the finishing transaction, so concurrent finishes of one watch's
cases, on any sidecar of the fleet, step its detector one after the other.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from sidecar.store.errors import IdempotencyConflict
from sidecar.store.records import CaseFinish, OutboxRecord, TrialRecord
from sidecar.store.watch_logic import (
    REARM_COLUMNS, STATE_COLUMNS, alert_id, alert_outbox, apply_step, design_baseline, transition_id,
)
from sidecar.store.watch_records import AlertRow, AlertTransition, PromoteResult, PromotionRecord, WatchRecord, WatchStep

T = TypeVar("T")
Conn = Any

_WATCH_FIELDS = [f.name for f in dataclasses.fields(WatchRecord)]
_ALERT_FIELDS = [f.name for f in dataclasses.fields(AlertRow)]
_TRIAL_FIELDS = [f.name for f in dataclasses.fields(TrialRecord)]
_ALERT_ORDER = "CASE status WHEN 'firing' THEN 0 WHEN 'acknowledged' THEN 1 ELSE 2 END, raised_at DESC, id"


def _watch(row: Any) -> WatchRecord:
    return WatchRecord(**{k: row[k] for k in _WATCH_FIELDS})


def _alert(row: Any) -> AlertRow:
    return AlertRow(**{k: row[k] for k in _ALERT_FIELDS})


async def _insert(conn: Conn, table: str, values: dict[str, Any]) -> None:
    marks = ", ".join(f"${i}" for i in range(1, len(values) + 1))
    await conn.execute(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks})", *values.values())


async def _transition(conn: Conn, alert: str, watch_id: str, team: str, state: str, at: float,
                      actor: str | None) -> None:
    await conn.execute(
        "INSERT INTO alert_transitions (id, alert_id, watch_id, team, state, at, actor) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
        transition_id(alert, state), alert, watch_id, team, state, at, actor,
    )


async def _outbox(conn: Conn, record: OutboxRecord, at: float) -> None:
    await conn.execute(
        "INSERT INTO outbox (record_id, topic, body, created_at) VALUES ($1, $2, $3, $4) "
        "ON CONFLICT (record_id) DO NOTHING",
        record.record_id, record.topic, record.body, at,
    )


async def apply_effects(conn: Conn, finish: CaseFinish) -> None:
    """Write ``finish.effects`` inside the finishing transaction."""
    for effect in finish.effects:
        if isinstance(effect, WatchStep):
            await _step(conn, effect)
        else:
            await _outbox(conn, effect, finish.finished_at)


async def _step(conn: Conn, step: WatchStep) -> None:
    row = await conn.fetchrow(f"SELECT {STATE_COLUMNS} FROM watches WHERE id=$1 FOR UPDATE", step.watch_id)
    if row is None:
        return
    s = apply_step(row, step.observation, case_id=step.case_id, at=step.at)
    await conn.execute(
        "UPDATE watches SET statistic=$1, judged=$2, decisive=$3, fired_at=$4, old_wins=$5, new_wins=$6, ties=$7 "
        "WHERE id=$8",
        s.state.statistic, s.state.judged, s.state.decisive, s.state.fired_at, s.old_wins, s.new_wins, s.ties,
        step.watch_id,
    )
    if s.fired_now:
        alert = alert_id(step.watch_id, row["period"])
        await conn.execute(
            "INSERT INTO alerts (id, watch_id, team, status, raised_at, evidence_json, period) "
            "VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (id) DO NOTHING",
            alert, step.watch_id, row["team"], "firing", step.at, json.dumps(s.evidence), row["period"],
        )
        await _transition(conn, alert, step.watch_id, row["team"], "firing", step.at, None)
        if step.announce:
            await _outbox(conn, alert_outbox(alert, watch_id=step.watch_id, team=row["team"], state="firing",
                                             at=step.at), step.at)


async def _rearm(conn: Conn, alert: Any, now: float, design_json: str | None) -> None:
    """The resolved alert's watch starts its next period, if the alert is of its current one and
    it is still active (a stopped watch keeps its last state, for the record). A step of the
    watch waiting on its row lock then reads the new period."""
    await conn.execute(
        f"UPDATE watches SET {REARM_COLUMNS}, period_started_at=$1, design_json=COALESCE($2, design_json), "
        "baseline=COALESCE($3, baseline) WHERE id=$4 AND period=$5 AND status='active'",
        now, design_json, None if design_json is None else design_baseline(design_json), alert["watch_id"],
        alert["period"],
    )


class PostgresWatches:
    """The watch methods of the PostgreSQL store (needs its ``_tx`` and ``_open_pool``)."""

    _tx: Callable[..., Awaitable[Any]]
    _open_pool: Callable[[], Any]

    async def promote(
        self, promotion: PromotionRecord, watch: WatchRecord, first_day: TrialRecord, *, promotable: Sequence[str],
        idempotency_key: str | None = None, body_hash: str | None = None,
    ) -> PromoteResult:
        async def fn(conn: Conn) -> PromoteResult:
            if idempotency_key is not None:
                # The key's row is taken first (inserted or locked), so two requests with one key serialise here.
                inserted = await conn.fetchval(
                    "INSERT INTO idempotency (key, body_hash, trial_id, created_at) VALUES ($1, $2, $3, $4) "
                    "ON CONFLICT (key) DO NOTHING RETURNING 1",
                    idempotency_key, body_hash, watch.id, watch.created_at,
                )
                if inserted is None:
                    row = await conn.fetchrow("SELECT body_hash, trial_id FROM idempotency WHERE key=$1", idempotency_key)
                    if row["body_hash"] != body_hash:
                        raise IdempotencyConflict(idempotency_key.rsplit("\x1f", 1)[-1])
                    existing = await conn.fetchrow("SELECT * FROM watches WHERE id=$1", row["trial_id"])
                    if existing is not None:
                        return PromoteResult(_watch(existing), False)
            done = await conn.fetchval(
                "UPDATE trials SET status='adopted', status_reason='promoted', ended_at=COALESCE(ended_at, $1) "
                "WHERE id=$2 AND kind='trial' AND status = ANY($3::text[]) RETURNING 1",
                promotion.promoted_at, promotion.trial_id, list(promotable),
            )
            if done is None:
                status = await conn.fetchval("SELECT status FROM trials WHERE id=$1", promotion.trial_id)
                if idempotency_key is not None:  # nothing was promoted: the key stays free
                    await conn.execute("DELETE FROM idempotency WHERE key=$1 AND trial_id=$2", idempotency_key, watch.id)
                return PromoteResult(None, False, status)
            await _insert(conn, "trials", {k: getattr(first_day, k) for k in _TRIAL_FIELDS})
            await _insert(conn, "watches", dataclasses.asdict(watch))
            await _insert(conn, "promotions", dataclasses.asdict(promotion))
            return PromoteResult(watch, True)

        result: PromoteResult = await self._tx(fn)
        return result

    async def get_watch(self, watch_id: str) -> WatchRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM watches WHERE id=$1", watch_id)
        return None if row is None else _watch(row)

    async def get_promotion(self, watch_id: str) -> PromotionRecord | None:
        row = await self._open_pool().fetchrow("SELECT * FROM promotions WHERE watch_id=$1", watch_id)
        return None if row is None else PromotionRecord(**dict(row))

    async def list_watches(
        self, *, teams: Sequence[str] | None = None, status: str | None = None
    ) -> list[WatchRecord]:
        rows = await self._open_pool().fetch(
            "SELECT * FROM watches WHERE ($1::text[] IS NULL OR team = ANY($1::text[])) "
            "AND ($2::text IS NULL OR status = $2::text) ORDER BY created_at DESC, id",
            None if teams is None else list(teams), status,
        )
        return [_watch(r) for r in rows]

    async def roll_watch_day(self, watch_id: str, day: str, row: TrialRecord) -> bool:
        async def fn(conn: Conn) -> bool:
            current = await conn.fetchval(
                "SELECT current_trial_id FROM watches WHERE id=$1 AND status='active' AND current_day < $2 FOR UPDATE",
                watch_id, day,
            )
            if current is None:
                return False
            await conn.execute(
                "UPDATE trials SET status='stopped', status_reason='the watch day ended', ended_at=$1 "
                "WHERE id=$2 AND status='running'",
                row.created_at, current,
            )
            await _insert(conn, "trials", {k: getattr(row, k) for k in _TRIAL_FIELDS})
            await conn.execute("UPDATE watches SET current_day=$1, current_trial_id=$2 WHERE id=$3", day, row.id, watch_id)
            return True

        result: bool = await self._tx(fn)
        return result

    async def stop_watch(self, watch_id: str, *, now: float) -> tuple[WatchRecord | None, bool]:
        async def fn(conn: Conn) -> tuple[WatchRecord | None, bool]:
            changed = await conn.fetchval(
                "UPDATE watches SET status='stopped', stopped_at=$1 WHERE id=$2 AND status='active' RETURNING 1",
                now, watch_id,
            )
            if changed is not None:
                await conn.execute(
                    "UPDATE trials SET status='stopped', status_reason='the watch was stopped', ended_at=$1 "
                    "WHERE watch_id=$2 AND status='running'",
                    now, watch_id,
                )
            row = await conn.fetchrow("SELECT * FROM watches WHERE id=$1", watch_id)
            return (None if row is None else _watch(row)), changed is not None

        result: tuple[WatchRecord | None, bool] = await self._tx(fn)
        return result

    async def list_alerts(
        self, *, teams: Sequence[str] | None = None, status: str | None = None
    ) -> list[AlertRow]:
        rows = await self._open_pool().fetch(
            "SELECT * FROM alerts WHERE ($1::text[] IS NULL OR team = ANY($1::text[])) "
            f"AND ($2::text IS NULL OR status = $2::text) ORDER BY {_ALERT_ORDER}",
            None if teams is None else list(teams), status,
        )
        return [_alert(r) for r in rows]

    async def get_alert(self, alert_id: str) -> AlertRow | None:
        row = await self._open_pool().fetchrow("SELECT * FROM alerts WHERE id=$1", alert_id)
        return None if row is None else _alert(row)

    async def transition_alert(
        self, alert_id: str, to: str, *, allowed_from: Sequence[str], actor: str | None, now: float,
        outbox: OutboxRecord | None = None, next_design_json: str | None = None,
    ) -> tuple[AlertRow | None, bool]:
        column = {"acknowledged": "acknowledged", "resolved": "resolved"}[to]

        async def fn(conn: Conn) -> tuple[AlertRow | None, bool]:
            changed = await conn.fetchval(
                f"UPDATE alerts SET status=$1, {column}_at=$2, {column}_by=$3 "
                "WHERE id=$4 AND status = ANY($5::text[]) RETURNING 1",
                to, now, actor, alert_id, list(allowed_from),
            )
            row = await conn.fetchrow("SELECT * FROM alerts WHERE id=$1", alert_id)
            if changed is not None:
                await _transition(conn, alert_id, row["watch_id"], row["team"], to, now, actor)
                if outbox is not None:
                    await _outbox(conn, outbox, now)
                if to == "resolved":
                    await _rearm(conn, row, now, next_design_json)
            return (None if row is None else _alert(row)), changed is not None

        result: tuple[AlertRow | None, bool] = await self._tx(fn)
        return result

    async def spend_window(self, *, since: float, until: float, teams: Sequence[str] | None = None) -> dict[str, int]:
        row = await self._open_pool().fetchrow(
            "SELECT COALESCE(SUM(c.charged_micros), 0) AS charged, COUNT(*) AS cases, "
            "COALESCE(SUM(CASE WHEN c.incumbent_cost_coverage <> 'unknown' THEN c.incumbent_cost_micros END), 0) "
            "AS incumbent_known, COUNT(*) FILTER (WHERE c.incumbent_cost_coverage = 'unknown') AS incumbent_unknown "
            "FROM cases c JOIN trials t ON t.id = c.trial_id WHERE c.finished_at >= $1 AND c.finished_at < $2 "
            "AND ($3::text[] IS NULL OR t.team = ANY($3::text[]))",
            since, until, None if teams is None else list(teams),
        )
        return {k: int(row[k]) for k in ("charged", "cases", "incumbent_known", "incumbent_unknown")}

    async def record_compare_spend(self, *, team: str, at: float, charged_micros: int, known_micros: int,
                                   calls: int, unknown_calls: int) -> None:
        await _insert(self._open_pool(), "compare_spend", {
            "team": team, "at": at, "charged_micros": charged_micros, "known_micros": known_micros,
            "calls": calls, "unknown_calls": unknown_calls})

    async def compare_spend_window(self, *, since: float, until: float,
                                   teams: Sequence[str] | None = None) -> dict[str, int]:
        row = await self._open_pool().fetchrow(
            "SELECT COALESCE(SUM(charged_micros), 0) AS charged, COUNT(*) AS compares, "
            "COALESCE(SUM(unknown_calls), 0) AS unknown_calls FROM compare_spend WHERE at >= $1 AND at < $2 "
            "AND ($3::text[] IS NULL OR team = ANY($3::text[]))",
            since, until, None if teams is None else list(teams),
        )
        return {k: int(row[k]) for k in ("charged", "compares", "unknown_calls")}

    async def pending_transitions(self, *, limit: int) -> list[AlertTransition]:
        rows = await self._open_pool().fetch(
            "SELECT id, alert_id, watch_id, team, state, at, actor, attempts FROM alert_transitions "
            "WHERE delivered_at IS NULL ORDER BY at, id LIMIT $1", limit,
        )
        return [AlertTransition(**dict(r)) for r in rows]

    async def mark_transition(self, transition_id: str, *, done: bool, now: float) -> None:
        await self._open_pool().execute(
            "UPDATE alert_transitions SET attempts = attempts + 1, "
            "delivered_at = CASE WHEN $1 THEN $2::double precision END WHERE id=$3 AND delivered_at IS NULL",
            done, now, transition_id,
        )
