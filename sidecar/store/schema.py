"""SQLite schema, as numbered migrations applied in order at open.
:func:`statements` splits a script where SQLite itself says a statement is
complete, so a trigger body's inner statements stay whole.

Cases hold no content: prompt and answer bodies live in ``bodies_json`` only
when the team's prompt retention is on.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator


def statements(script: str) -> Iterator[str]:
    """The complete SQL statements of ``script``, in order."""
    buf = ""
    for line in script.splitlines(keepends=True):
        buf += line
        if sqlite3.complete_statement(buf):
            yield buf.strip()
            buf = ""
    if buf.strip():
        raise ValueError(f"incomplete SQL statement at the end of a migration: {buf.strip()[:80]!r}")


#: A step that created collector tables before the control-plane wing had migrations of its own
#: (:mod:`sidecar.collector.store.schema`): kept, empty, so every later step keeps its number. A
#: database created before keeps those tables (no migration ever drops one); a new one never has them.
MOVED = ""

MIGRATIONS: tuple[str, ...] = (
    # 1: the trial loop
    """
    CREATE TABLE trials (
        id TEXT PRIMARY KEY,
        team TEXT NOT NULL,
        incumbent_model TEXT NOT NULL,
        candidate_model TEXT NOT NULL,
        route TEXT,
        gateway TEXT,
        sample_rate REAL NOT NULL,
        cap_micros INTEGER NOT NULL,
        expected_cases INTEGER NOT NULL,
        delta REAL NOT NULL,
        min_cases INTEGER NOT NULL,
        audit_share REAL NOT NULL,
        candidate_max_tokens INTEGER NOT NULL,
        candidate_price_in INTEGER NOT NULL,
        candidate_price_out INTEGER NOT NULL,
        judge_price_in INTEGER NOT NULL,
        judge_price_out INTEGER NOT NULL,
        incumbent_price_in INTEGER,
        incumbent_price_out INTEGER,
        judge_model TEXT NOT NULL,
        judge_version_id TEXT NOT NULL,
        judge_version_name TEXT NOT NULL,
        judge_spec_json TEXT NOT NULL,
        execution_site TEXT NOT NULL,
        prompt_retention INTEGER NOT NULL,
        created_at REAL NOT NULL,
        status TEXT NOT NULL,
        status_reason TEXT,
        ended_at REAL,
        spent_micros INTEGER NOT NULL DEFAULT 0,
        known_micros INTEGER NOT NULL DEFAULT 0,
        reserved_micros INTEGER NOT NULL DEFAULT 0,
        unknown_calls INTEGER NOT NULL DEFAULT 0,
        priced_calls INTEGER NOT NULL DEFAULT 0,
        CHECK (reserved_micros >= 0)
    );
    CREATE TABLE cases (
        id TEXT PRIMARY KEY,
        trial_id TEXT NOT NULL REFERENCES trials(id),
        exchange_id TEXT NOT NULL,
        state TEXT NOT NULL,              -- reserved | dispatched | finished
        outcome TEXT,
        reserved_micros INTEGER NOT NULL,
        charged_micros INTEGER,
        incumbent_latency_ms REAL,
        incumbent_output_tokens INTEGER,
        incumbent_cost_micros INTEGER NOT NULL,
        incumbent_cost_coverage TEXT NOT NULL,
        candidate_cost_micros INTEGER,
        candidate_cost_coverage TEXT,
        judge_cost_micros INTEGER,
        judge_cost_coverage TEXT,
        candidate_latency_ms REAL,
        candidate_output_tokens INTEGER,
        score REAL,
        error TEXT,
        bodies_json TEXT,
        created_at REAL NOT NULL,
        finished_at REAL,
        UNIQUE (trial_id, exchange_id)
    );
    CREATE INDEX cases_trial_outcome ON cases (trial_id, outcome);
    CREATE INDEX cases_state ON cases (state);
    CREATE TABLE judgments (
        id TEXT PRIMARY KEY,
        case_id TEXT NOT NULL REFERENCES cases(id),
        trial_id TEXT NOT NULL,
        judge_version_id TEXT NOT NULL,
        presentation_order TEXT NOT NULL,
        is_audit INTEGER NOT NULL,
        outcome TEXT NOT NULL,
        score INTEGER,
        strong INTEGER NOT NULL,
        winner_slot TEXT,
        error TEXT,
        longer_won INTEGER,
        created_at REAL NOT NULL
    );
    CREATE INDEX judgments_trial ON judgments (trial_id);
    CREATE TABLE funnel (
        trial_id TEXT NOT NULL,
        outcome TEXT NOT NULL,
        n INTEGER NOT NULL,
        PRIMARY KEY (trial_id, outcome)
    );
    CREATE TABLE spend_ledger (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        trial_id TEXT NOT NULL,
        case_id TEXT,
        kind TEXT NOT NULL,               -- reserve | top_up | release | charge | hold_unknown
        micros INTEGER NOT NULL,
        at REAL NOT NULL
    );
    CREATE INDEX spend_ledger_trial ON spend_ledger (trial_id);
    CREATE TABLE idempotency (
        key TEXT PRIMARY KEY,
        body_hash TEXT NOT NULL,
        trial_id TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    """,
    # 2: a fleet's case ledger: owners with leases, the post-finish outbox, the cap as a constraint
    """
    ALTER TABLE cases ADD COLUMN owner TEXT;
    CREATE INDEX cases_owner_state ON cases (owner, state);
    CREATE TABLE owners (
        owner TEXT PRIMARY KEY,
        lease_until REAL NOT NULL,
        started_at REAL NOT NULL
    );
    CREATE TABLE outbox (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        record_id TEXT NOT NULL UNIQUE,
        topic TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE TRIGGER trials_cap_never_passed BEFORE UPDATE OF spent_micros, reserved_micros ON trials
    WHEN NEW.spent_micros + NEW.reserved_micros > NEW.cap_micros
     AND NEW.spent_micros + NEW.reserved_micros > OLD.spent_micros + OLD.reserved_micros
    BEGIN
        SELECT RAISE(ABORT, 'spend cap would be passed');
    END;
    """,
    # 3: the statistics a trial keeps between reads (sidecar/trials/fold.py): the verdict's running
    # intersection and the judge-health test, as JSON text, each with the count it was folded
    # over, which the conditional update in save_states compares
    """
    ALTER TABLE trials ADD COLUMN sequence_state TEXT;
    ALTER TABLE trials ADD COLUMN sequence_n INTEGER;
    ALTER TABLE trials ADD COLUMN judge_health_state TEXT;
    ALTER TABLE trials ADD COLUMN judge_health_n INTEGER;
    """,
    # 4: usage reports no call can have (above its worst case, or negative), charged at the
    # worst case and counted, so an operator sees that a provider's figures were refused
    """
    ALTER TABLE trials ADD COLUMN disputed_calls INTEGER NOT NULL DEFAULT 0;
    """,
    # 5: who started a trial (the principal's subject), so its rights can be checked again
    # later; NULL for trials created before it was recorded
    """
    ALTER TABLE trials ADD COLUMN started_by TEXT;
    """,
    # 6: teams' posture (DESIGN.md section 9): retention and cut-over per team, with a revision
    # counting changes; each gateway's content-uplink report per team, with when it was last heard
    """
    CREATE TABLE team_posture (
        team TEXT PRIMARY KEY,
        prompt_retention INTEGER NOT NULL,
        cut_over INTEGER NOT NULL,
        revision INTEGER NOT NULL,
        updated_at REAL NOT NULL,
        updated_by TEXT
    );
    CREATE TABLE gateway_uplink (
        team TEXT NOT NULL,
        gateway TEXT NOT NULL,
        content_uplink INTEGER NOT NULL,
        last_seen REAL NOT NULL,
        PRIMARY KEY (team, gateway)
    );
    CREATE INDEX trials_team_status ON trials (team, status);
    """,
    # 7: the uplink's delivery leases: a claimed outbox record belongs to one process until
    # its lease ends, so a fleet's sidecars never send the same record at once
    """
    ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
    ALTER TABLE outbox ADD COLUMN lease_until REAL;
    """,
    # 8: a trial's state revision, raised by every change of its row (status, spend, kept
    # statistics) so the uplink's trial_state records are ordered without touching each UPDATE
    """
    ALTER TABLE trials ADD COLUMN state_revision INTEGER NOT NULL DEFAULT 0;
    CREATE TRIGGER trials_state_revision AFTER UPDATE ON trials
    WHEN NEW.state_revision = OLD.state_revision
    BEGIN
        UPDATE trials SET state_revision = OLD.state_revision + 1 WHERE id = NEW.id;
    END;
    """,
    # 9: (moved) what a collector holds of the uplink: the collector's migration 1
    MOVED,
    # 10: the retention window of served exchanges, sealed
    # (AES-GCM, the key never stored), and a trial's source: live traffic or a replay of the window
    """
    ALTER TABLE trials ADD COLUMN source TEXT NOT NULL DEFAULT 'live';
    ALTER TABLE trials ADD COLUMN source_from REAL;
    ALTER TABLE trials ADD COLUMN source_to REAL;
    ALTER TABLE trials ADD COLUMN source_size INTEGER;
    ALTER TABLE trials ADD COLUMN replay_cursor INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE trials ADD COLUMN replay_fed INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE retained (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        team TEXT NOT NULL,
        exchange_id TEXT NOT NULL,
        model TEXT NOT NULL,
        gateway TEXT NOT NULL,
        route TEXT,
        served_at REAL NOT NULL,
        kept_at REAL NOT NULL,
        size INTEGER NOT NULL,
        sealed BLOB NOT NULL,
        UNIQUE (team, exchange_id)
    );
    CREATE INDEX retained_team_served ON retained (team, served_at);
    CREATE INDEX retained_kept ON retained (kept_at);
    """,
    # 11: (moved) corpus evidence (issue 13): the collector's migration 2
    MOVED,
    # 12: promotion, watches and alerts (DESIGN.md section 10). A watch's sentinel runs as
    # trials rows of kind 'watch', one per UTC day, so each day's cap is the ledger's own cap;
    # the watch keeps its detector's design and integer state; alerts and their transitions
    # (kept until the webhook delivered them)
    """
    ALTER TABLE trials ADD COLUMN kind TEXT NOT NULL DEFAULT 'trial';
    ALTER TABLE trials ADD COLUMN watch_id TEXT;
    CREATE TABLE watches (
        id TEXT PRIMARY KEY,
        team TEXT NOT NULL,
        trial_id TEXT NOT NULL UNIQUE REFERENCES trials(id),
        old_model TEXT NOT NULL,
        new_model TEXT NOT NULL,
        route TEXT,
        gateway TEXT,
        sample_rate REAL NOT NULL,
        daily_cap_micros INTEGER NOT NULL,
        judge_version_id TEXT NOT NULL,
        baseline REAL NOT NULL,
        design_json TEXT NOT NULL,
        created_at REAL NOT NULL,
        created_by TEXT,
        status TEXT NOT NULL,
        stopped_at REAL,
        current_day TEXT NOT NULL,
        current_trial_id TEXT NOT NULL,
        statistic INTEGER NOT NULL DEFAULT 0,
        judged INTEGER NOT NULL DEFAULT 0,
        decisive INTEGER NOT NULL DEFAULT 0,
        fired_at INTEGER,
        old_wins INTEGER NOT NULL DEFAULT 0,
        new_wins INTEGER NOT NULL DEFAULT 0,
        ties INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX watches_team_status ON watches (team, status);
    CREATE TABLE promotions (
        id TEXT PRIMARY KEY,
        trial_id TEXT NOT NULL UNIQUE,
        watch_id TEXT NOT NULL,
        team TEXT NOT NULL,
        promoted_by TEXT,
        promoted_at REAL NOT NULL,
        evidence_json TEXT NOT NULL
    );
    CREATE TABLE alerts (
        id TEXT PRIMARY KEY,
        watch_id TEXT NOT NULL,
        team TEXT NOT NULL,
        status TEXT NOT NULL,
        raised_at REAL NOT NULL,
        evidence_json TEXT NOT NULL,
        acknowledged_at REAL,
        acknowledged_by TEXT,
        resolved_at REAL,
        resolved_by TEXT
    );
    CREATE INDEX alerts_team_status ON alerts (team, status);
    CREATE TABLE alert_transitions (
        id TEXT PRIMARY KEY,
        alert_id TEXT NOT NULL,
        watch_id TEXT NOT NULL,
        team TEXT NOT NULL,
        state TEXT NOT NULL,
        at REAL NOT NULL,
        actor TEXT,
        attempts INTEGER NOT NULL DEFAULT 0,
        delivered_at REAL
    );
    """,
    # 13: (moved) running comparison groups (issue 13, items 3-4): the collector's migration 3
    MOVED,
    # 14: watch periods (issue 23, item 5): resolving an alert re-arms the watch's detector for
    # a new period, and each period's alert has its own row
    """
    ALTER TABLE watches ADD COLUMN period INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE watches ADD COLUMN period_started_at REAL;
    ALTER TABLE watches ADD COLUMN judged_before INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE alerts ADD COLUMN period INTEGER NOT NULL DEFAULT 1;
    """,
    # 15: the scoring sequence (issue 31): each scored case of a trial is numbered 1, 2, 3, ...
    # in the transaction that scores it (trials.scored_seq is the counter), the order the
    # betting confidence sequence folds cases in; cases scored before are numbered by
    # (finished_at, id)
    """
    ALTER TABLE cases ADD COLUMN score_seq INTEGER;
    ALTER TABLE trials ADD COLUMN scored_seq INTEGER NOT NULL DEFAULT 0;
    UPDATE cases SET score_seq = o.r FROM (
        SELECT id, ROW_NUMBER() OVER (PARTITION BY trial_id ORDER BY finished_at, id) AS r
        FROM cases WHERE outcome = 'judged' AND score IS NOT NULL
    ) AS o WHERE o.id = cases.id;
    UPDATE trials SET scored_seq = (SELECT COUNT(*) FROM cases WHERE cases.trial_id = trials.id
                                    AND cases.score_seq IS NOT NULL);
    CREATE INDEX cases_trial_score_seq ON cases (trial_id, score_seq);
    """,
    # 16: a trial that knows when to stop (issue 26, item 2): ``stop`` ends a decided trial
    # ``decided``; trials created before keep running after a decision, as they did
    """
    ALTER TABLE trials ADD COLUMN on_decision TEXT NOT NULL DEFAULT 'continue';
    """,
    # 17: per-segment verdicts (issue 27): the segments a trial is read by and its cap; the
    # segment values it tracks (at most ``segment_cap`` rows a trial, the rest pooled as
    # ``other``); each case's segment keys (JSON, tracked keys or ``other``); the rejected
    # segments a promotion acknowledged
    """
    ALTER TABLE trials ADD COLUMN segments TEXT NOT NULL DEFAULT '[]';
    ALTER TABLE trials ADD COLUMN segment_cap INTEGER NOT NULL DEFAULT 16;
    ALTER TABLE trials ADD COLUMN segment_min_cases INTEGER;
    ALTER TABLE cases ADD COLUMN segment_keys TEXT;
    CREATE TABLE trial_segments (
        trial_id TEXT NOT NULL,
        key TEXT NOT NULL,
        segment TEXT NOT NULL,
        value TEXT NOT NULL,
        ordinal INTEGER NOT NULL,
        PRIMARY KEY (trial_id, key)
    );
    ALTER TABLE promotions ADD COLUMN acknowledged_segments TEXT;
    """,
    # 18: Compare's spend (issue 28, item 5): one content-free row per compare (team, when,
    # list-priced micros charged against its cap, unknown-cost calls), so evaluation spend
    # counts Compare beside trials and watches
    """
    CREATE TABLE compare_spend (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        team TEXT NOT NULL,
        at REAL NOT NULL,
        charged_micros INTEGER NOT NULL,
        known_micros INTEGER NOT NULL,
        calls INTEGER NOT NULL,
        unknown_calls INTEGER NOT NULL
    );
    CREATE INDEX compare_spend_at ON compare_spend (at, team);
    """,
)
