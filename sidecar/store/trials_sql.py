"""The trials', the teams' postures' and the gateways' reports' statements, once for both
dialects (:mod:`sidecar.store.dialect`), and the rows they read into records.

Booleans are bound as Python ``bool`` (SQLite stores 1/0) and read through ``bool()``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.store.records import GatewayReport, TeamPosture, TrialRecord

_FIELDS = [f.name for f in dataclasses.fields(TrialRecord)]

INSERT = f"INSERT INTO trials ({', '.join(_FIELDS)}) VALUES ({', '.join('?' for _ in _FIELDS)})"
BY_ID = "SELECT * FROM trials WHERE id = ?"
STATUS = "SELECT status FROM trials WHERE id = ?"
#: key, body hash, trial id, created at: the key is taken first, so a concurrent create with
#: the same key waits on it, then finds it and returns the same trial.
TAKE_KEY = (
    "INSERT INTO idempotency (key, body_hash, trial_id, created_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (key) DO NOTHING RETURNING 1"
)
KEY = "SELECT body_hash, trial_id FROM idempotency WHERE key = ?"
#: status, reason, ended, now, id, status (adoption is final: a promotion made it).
SET_STATUS = (
    "UPDATE trials SET status = ?, status_reason = ?, ended_at = CASE WHEN ? THEN COALESCE(ended_at, ?) ELSE ended_at END "
    "WHERE id = ? AND status <> ? AND status <> 'adopted' RETURNING *"
)
RESUME = (
    "UPDATE trials SET status = 'running', status_reason = NULL, started_by = ?, "
    "execution_site = COALESCE(?:text, execution_site), prompt_retention = COALESCE(?:boolean, prompt_retention) "
    "WHERE id = ? AND status IN ?[] RETURNING *"
)
#: Per kept state, a compare-and-set on its text that never lowers its count:
#: text, n, id, the text it was folded from, n.
SAVE_STATE = {
    column: f"UPDATE trials SET {column}_state = ?, {column}_n = ? WHERE id = ? "
    f"AND {column}_state IS NOT DISTINCT FROM ?:text AND ({column}_n IS NULL OR {column}_n <= ?)"
    for column in ("sequence", "judge_health")
}
#: Ends a trial a case's outcome ended (stopped by a rule, for example).
END_RUNNING = (
    "UPDATE trials SET status = ?, status_reason = ?, ended_at = COALESCE(ended_at, ?) WHERE id = ? AND status = 'running'"
)

#: reason, now, id: a running trial ends ``decided`` (issue 26): only from running, so an
#: operator's stop, a pause or a promotion that came first stands.
DECIDE = (
    "UPDATE trials SET status = 'decided', status_reason = ?, ended_at = COALESCE(ended_at, ?) "
    "WHERE id = ? AND status = 'running' RETURNING *"
)

POSTURE = "SELECT * FROM team_posture WHERE team = ?"
LOCK_POSTURE = POSTURE + " {FOR_UPDATE}"
SEED_POSTURE = (
    "INSERT INTO team_posture (team, prompt_retention, cut_over, revision, updated_at, updated_by) "
    "VALUES (?, ?, ?, 1, ?, NULL) ON CONFLICT (team) DO NOTHING"
)
#: team, retention, cut over, now, by, expected revision twice: created only when none was expected.
CREATE_POSTURE = (
    "INSERT INTO team_posture (team, prompt_retention, cut_over, revision, updated_at, updated_by) "
    "SELECT ?, ?, ?, 1, ?, ? WHERE ?:bigint IS NULL OR ?:bigint = 0 ON CONFLICT (team) DO NOTHING RETURNING 1"
)
UPDATE_POSTURE = (
    "UPDATE team_posture SET prompt_retention = ?, cut_over = ?, revision = revision + 1, updated_at = ?, updated_by = ? "
    "WHERE team = ? RETURNING *"
)
#: The team's running trials pinned to another site or retention, locked in ascending id.
MISMATCHED = (
    "SELECT id FROM trials WHERE team = ? AND status = 'running' AND (execution_site <> ? OR prompt_retention <> ?) "
    "ORDER BY id {FOR_UPDATE}"
)
PAUSE = "UPDATE trials SET status = 'posture_changed', status_reason = ? WHERE id IN ?[] AND status = 'running'"

REPORT_UPLINK = (
    "INSERT INTO gateway_uplink (team, gateway, content_uplink, last_seen) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (team, gateway) DO UPDATE SET content_uplink = excluded.content_uplink, "
    "last_seen = {GREATEST}(gateway_uplink.last_seen, excluded.last_seen)"
)
GATEWAY_REPORTS = "SELECT gateway, content_uplink, last_seen FROM gateway_uplink WHERE team = ? ORDER BY gateway {COLLATE_C}"


def listing(*, teams: Sequence[str] | None, status: str | None, kind: str | None) -> tuple[str, tuple[Any, ...]]:
    """The trials of a listing, newest first, and its arguments."""
    sql, args = "SELECT * FROM trials WHERE 1 = 1", []
    for clause, value in (
        (" AND kind = ?", kind), (" AND team IN ?[]", None if teams is None else list(teams)), (" AND status = ?", status)
    ):
        if value is not None:
            sql += clause
            args.append(value)
    return sql + " ORDER BY created_at DESC, id", tuple(args)


def trial(row: Mapping[str, Any]) -> TrialRecord:
    values = {k: row[k] for k in _FIELDS}
    values["prompt_retention"] = bool(values["prompt_retention"])
    return TrialRecord(**values)


def posture(r: Mapping[str, Any]) -> TeamPosture:
    return TeamPosture(r["team"], bool(r["prompt_retention"]), bool(r["cut_over"]), r["revision"], r["updated_at"],
                       r["updated_by"])


def gateway_report(r: Mapping[str, Any]) -> GatewayReport:
    return GatewayReport(r["gateway"], bool(r["content_uplink"]), r["last_seen"])
