"""Promotion, watches and alerts in SQLite (:class:`sidecar.store.base.WatchStore`).

Mixed into :class:`sidecar.store.sqlite.SQLiteStore`; each method is one ``BEGIN IMMEDIATE``
transaction on the store's own thread. :func:`apply_effects` is called by ``finish_case``
inside its transaction.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from sidecar.store.errors import IdempotencyConflict
from sidecar.store.records import CaseFinish, OutboxRecord, TrialRecord
from sidecar.store.watch_logic import (
    REARM_COLUMNS, STATE_COLUMNS, alert_id, alert_outbox, apply_step, design_baseline, transition_id,
)
from sidecar.store.watch_records import AlertRow, AlertTransition, PromoteResult, PromotionRecord, WatchRecord, WatchStep

T = TypeVar("T")

_WATCH_FIELDS = [f.name for f in dataclasses.fields(WatchRecord)]
_ALERT_FIELDS = [f.name for f in dataclasses.fields(AlertRow)]
_ALERT_ORDER = "CASE status WHEN 'firing' THEN 0 WHEN 'acknowledged' THEN 1 ELSE 2 END, raised_at DESC, id"


def _watch(row: sqlite3.Row) -> WatchRecord:
    return WatchRecord(**{k: row[k] for k in _WATCH_FIELDS})


def _alert(row: sqlite3.Row) -> AlertRow:
    return AlertRow(**{k: row[k] for k in _ALERT_FIELDS})


def _insert(conn: sqlite3.Connection, table: str, values: dict[str, Any]) -> None:
    cols = ", ".join(values)
    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' for _ in values)})", tuple(values.values()))


def _insert_trial(conn: sqlite3.Connection, trial: TrialRecord) -> None:
    values = dataclasses.asdict(trial)
    values["prompt_retention"] = int(trial.prompt_retention)
    _insert(conn, "trials", values)


def _transition(conn: sqlite3.Connection, alert: str, watch_id: str, team: str, state: str, at: float,
                actor: str | None) -> None:
    conn.execute(
        "INSERT INTO alert_transitions (id, alert_id, watch_id, team, state, at, actor) VALUES (?,?,?,?,?,?,?) "
        "ON CONFLICT DO NOTHING",
        (transition_id(alert, state), alert, watch_id, team, state, at, actor),
    )


def _outbox(conn: sqlite3.Connection, record: OutboxRecord, at: float) -> None:
    conn.execute(
        "INSERT INTO outbox (record_id, topic, body, created_at) VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
        (record.record_id, record.topic, record.body, at),
    )


def _filtered(table: str, teams: Sequence[str] | None, status: str | None) -> tuple[str, list[Any]]:
    """``SELECT *`` of ``table`` narrowed to ``teams`` (None: every team) and ``status``."""
    sql, args = f"SELECT * FROM {table} WHERE 1=1", list[Any]()
    if teams is not None:
        sql += f" AND team IN ({', '.join('?' for _ in teams)})"
        args.extend(teams)
    if status is not None:
        sql += " AND status=?"
        args.append(status)
    return sql, args


def apply_effects(conn: sqlite3.Connection, finish: CaseFinish) -> None:
    """Write ``finish.effects`` inside the finishing transaction."""
    for effect in finish.effects:
        if isinstance(effect, WatchStep):
            _step(conn, effect)
        else:
            _outbox(conn, effect, finish.finished_at)


def _step(conn: sqlite3.Connection, step: WatchStep) -> None:
    row = conn.execute(f"SELECT {STATE_COLUMNS} FROM watches WHERE id=?", (step.watch_id,)).fetchone()
    if row is None:
        return
    s = apply_step(row, step.observation, case_id=step.case_id, at=step.at)
    conn.execute(
        "UPDATE watches SET statistic=?, judged=?, decisive=?, fired_at=?, old_wins=?, new_wins=?, ties=? WHERE id=?",
        (s.state.statistic, s.state.judged, s.state.decisive, s.state.fired_at, s.old_wins, s.new_wins, s.ties,
         step.watch_id),
    )
    if s.fired_now:
        alert = alert_id(step.watch_id, row["period"])
        conn.execute(
            "INSERT INTO alerts (id, watch_id, team, status, raised_at, evidence_json, period) VALUES (?,?,?,?,?,?,?) "
            "ON CONFLICT DO NOTHING",
            (alert, step.watch_id, row["team"], "firing", step.at, json.dumps(s.evidence), row["period"]),
        )
        _transition(conn, alert, step.watch_id, row["team"], "firing", step.at, None)
        if step.announce:
            _outbox(conn, alert_outbox(alert, watch_id=step.watch_id, team=row["team"], state="firing", at=step.at),
                    step.at)


def _rearm(conn: sqlite3.Connection, alert: sqlite3.Row, now: float, design_json: str | None) -> None:
    """The resolved alert's watch starts its next period, if the alert is of its current one and
    it is still active (a stopped watch keeps its last state, for the record)."""
    conn.execute(
        f"UPDATE watches SET {REARM_COLUMNS}, period_started_at=?, design_json=COALESCE(?, design_json), "
        "baseline=COALESCE(?, baseline) WHERE id=? AND period=? AND status='active'",
        (now, design_json, None if design_json is None else design_baseline(design_json), alert["watch_id"],
         alert["period"]),
    )


class SQLiteWatches:
    """The watch methods of the SQLite store (needs its ``_run`` and ``_write``)."""

    _run: Callable[..., Awaitable[Any]]
    _write: Callable[..., Awaitable[Any]]

    async def promote(
        self, promotion: PromotionRecord, watch: WatchRecord, first_day: TrialRecord, *, promotable: Sequence[str],
        idempotency_key: str | None = None, body_hash: str | None = None,
    ) -> PromoteResult:
        def fn(conn: sqlite3.Connection) -> PromoteResult:
            if idempotency_key is not None:
                row = conn.execute("SELECT body_hash, trial_id FROM idempotency WHERE key=?", (idempotency_key,)).fetchone()
                if row is not None:
                    if row["body_hash"] != body_hash:
                        raise IdempotencyConflict(idempotency_key.rsplit("\x1f", 1)[-1])
                    existing = conn.execute("SELECT * FROM watches WHERE id=?", (row["trial_id"],)).fetchone()
                    return PromoteResult(_watch(existing), False)
            marks = ", ".join("?" for _ in promotable)
            cur = conn.execute(
                "UPDATE trials SET status='adopted', status_reason='promoted', ended_at=COALESCE(ended_at, ?) "
                f"WHERE id=? AND kind='trial' AND status IN ({marks})",
                (promotion.promoted_at, promotion.trial_id, *promotable),
            )
            if cur.rowcount != 1:
                status = conn.execute("SELECT status FROM trials WHERE id=?", (promotion.trial_id,)).fetchone()
                return PromoteResult(None, False, None if status is None else status["status"])
            _insert_trial(conn, first_day)
            _insert(conn, "watches", dataclasses.asdict(watch))
            _insert(conn, "promotions", dataclasses.asdict(promotion))
            if idempotency_key is not None:
                conn.execute(
                    "INSERT INTO idempotency (key, body_hash, trial_id, created_at) VALUES (?,?,?,?)",
                    (idempotency_key, body_hash, watch.id, watch.created_at),
                )
            return PromoteResult(watch, True)

        result: PromoteResult = await self._write(fn)
        return result

    async def get_watch(self, watch_id: str) -> WatchRecord | None:
        def fn(conn: sqlite3.Connection) -> WatchRecord | None:
            row = conn.execute("SELECT * FROM watches WHERE id=?", (watch_id,)).fetchone()
            return None if row is None else _watch(row)

        result: WatchRecord | None = await self._run(fn)
        return result

    async def get_promotion(self, watch_id: str) -> PromotionRecord | None:
        def fn(conn: sqlite3.Connection) -> PromotionRecord | None:
            row = conn.execute("SELECT * FROM promotions WHERE watch_id=?", (watch_id,)).fetchone()
            return None if row is None else PromotionRecord(**dict(row))

        result: PromotionRecord | None = await self._run(fn)
        return result

    async def list_watches(
        self, *, teams: Sequence[str] | None = None, status: str | None = None
    ) -> list[WatchRecord]:
        def fn(conn: sqlite3.Connection) -> list[WatchRecord]:
            sql, args = _filtered("watches", teams, status)
            return [_watch(r) for r in conn.execute(sql + " ORDER BY created_at DESC, id", args).fetchall()]

        result: list[WatchRecord] = await self._run(fn)
        return result

    async def roll_watch_day(self, watch_id: str, day: str, row: TrialRecord) -> bool:
        def fn(conn: sqlite3.Connection) -> bool:
            current = conn.execute(
                "SELECT current_trial_id FROM watches WHERE id=? AND status='active' AND current_day < ?", (watch_id, day)
            ).fetchone()
            if current is None:
                return False
            conn.execute(
                "UPDATE trials SET status='stopped', status_reason='the watch day ended', ended_at=? "
                "WHERE id=? AND status='running'",
                (row.created_at, current["current_trial_id"]),
            )
            _insert_trial(conn, row)
            conn.execute("UPDATE watches SET current_day=?, current_trial_id=? WHERE id=?", (day, row.id, watch_id))
            return True

        result: bool = await self._write(fn)
        return result

    async def stop_watch(self, watch_id: str, *, now: float) -> tuple[WatchRecord | None, bool]:
        def fn(conn: sqlite3.Connection) -> tuple[WatchRecord | None, bool]:
            cur = conn.execute(
                "UPDATE watches SET status='stopped', stopped_at=? WHERE id=? AND status='active'", (now, watch_id)
            )
            changed = cur.rowcount == 1
            if changed:
                conn.execute(
                    "UPDATE trials SET status='stopped', status_reason='the watch was stopped', ended_at=? "
                    "WHERE watch_id=? AND status='running'",
                    (now, watch_id),
                )
            row = conn.execute("SELECT * FROM watches WHERE id=?", (watch_id,)).fetchone()
            return (None if row is None else _watch(row)), changed

        result: tuple[WatchRecord | None, bool] = await self._write(fn)
        return result

    async def list_alerts(
        self, *, teams: Sequence[str] | None = None, status: str | None = None
    ) -> list[AlertRow]:
        def fn(conn: sqlite3.Connection) -> list[AlertRow]:
            sql, args = _filtered("alerts", teams, status)
            return [_alert(r) for r in conn.execute(f"{sql} ORDER BY {_ALERT_ORDER}", args).fetchall()]

        result: list[AlertRow] = await self._run(fn)
        return result

    async def get_alert(self, alert_id: str) -> AlertRow | None:
        def fn(conn: sqlite3.Connection) -> AlertRow | None:
            row = conn.execute("SELECT * FROM alerts WHERE id=?", (alert_id,)).fetchone()
            return None if row is None else _alert(row)

        result: AlertRow | None = await self._run(fn)
        return result

    async def transition_alert(
        self, alert_id: str, to: str, *, allowed_from: Sequence[str], actor: str | None, now: float,
        outbox: OutboxRecord | None = None, next_design_json: str | None = None,
    ) -> tuple[AlertRow | None, bool]:
        column = {"acknowledged": "acknowledged", "resolved": "resolved"}[to]

        def fn(conn: sqlite3.Connection) -> tuple[AlertRow | None, bool]:
            marks = ", ".join("?" for _ in allowed_from)
            cur = conn.execute(
                f"UPDATE alerts SET status=?, {column}_at=?, {column}_by=? WHERE id=? AND status IN ({marks})",
                (to, now, actor, alert_id, *allowed_from),
            )
            row = conn.execute("SELECT * FROM alerts WHERE id=?", (alert_id,)).fetchone()
            changed = cur.rowcount == 1
            if changed:
                _transition(conn, alert_id, row["watch_id"], row["team"], to, now, actor)
                if outbox is not None:
                    _outbox(conn, outbox, now)
                if to == "resolved":
                    _rearm(conn, row, now, next_design_json)
            return (None if row is None else _alert(row)), changed

        result: tuple[AlertRow | None, bool] = await self._write(fn)
        return result

    async def spend_window(self, *, since: float, until: float, teams: Sequence[str] | None = None) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            sql = (
                "SELECT COALESCE(SUM(c.charged_micros), 0) AS charged, COUNT(*) AS cases, "
                "COALESCE(SUM(CASE WHEN c.incumbent_cost_coverage != 'unknown' THEN c.incumbent_cost_micros END), 0) "
                "AS incumbent_known, COALESCE(SUM(c.incumbent_cost_coverage = 'unknown'), 0) AS incumbent_unknown "
                "FROM cases c JOIN trials t ON t.id = c.trial_id WHERE c.finished_at >= ? AND c.finished_at < ?"
            )
            args: list[Any] = [since, until]
            if teams is not None:
                sql += f" AND t.team IN ({', '.join('?' for _ in teams)})"
                args.extend(teams)
            return {k: int(v) for k, v in dict(conn.execute(sql, args).fetchone()).items()}

        result: dict[str, int] = await self._run(fn)
        return result

    async def record_compare_spend(self, *, team: str, at: float, charged_micros: int, known_micros: int,
                                   calls: int, unknown_calls: int) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            _insert(conn, "compare_spend", {"team": team, "at": at, "charged_micros": charged_micros,
                                            "known_micros": known_micros, "calls": calls,
                                            "unknown_calls": unknown_calls})

        await self._write(fn)

    async def compare_spend_window(self, *, since: float, until: float,
                                   teams: Sequence[str] | None = None) -> dict[str, int]:
        def fn(conn: sqlite3.Connection) -> dict[str, int]:
            sql = ("SELECT COALESCE(SUM(charged_micros), 0) AS charged, COUNT(*) AS compares, "
                   "COALESCE(SUM(unknown_calls), 0) AS unknown_calls FROM compare_spend WHERE at >= ? AND at < ?")
            args: list[Any] = [since, until]
            if teams is not None:
                sql += f" AND team IN ({', '.join('?' for _ in teams)})"
                args.extend(teams)
            return {k: int(v) for k, v in dict(conn.execute(sql, args).fetchone()).items()}

        result: dict[str, int] = await self._run(fn)
        return result

    async def pending_transitions(self, *, limit: int) -> list[AlertTransition]:
        def fn(conn: sqlite3.Connection) -> list[AlertTransition]:
            rows = conn.execute(
                "SELECT id, alert_id, watch_id, team, state, at, actor, attempts FROM alert_transitions "
                "WHERE delivered_at IS NULL ORDER BY at, id LIMIT ?", (limit,),
            ).fetchall()
            return [AlertTransition(**dict(r)) for r in rows]

        result: list[AlertTransition] = await self._run(fn)
        return result

    async def mark_transition(self, transition_id: str, *, done: bool, now: float) -> None:
        def fn(conn: sqlite3.Connection) -> None:
            conn.execute(
                "UPDATE alert_transitions SET attempts = attempts + 1, delivered_at = CASE WHEN ? THEN ? END "
                "WHERE id=? AND delivered_at IS NULL",
                (int(done), now, transition_id),
            )

        await self._write(fn)
