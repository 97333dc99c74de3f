"""PostgreSQL schema, as numbered migrations applied at open.

The tables, columns and meanings are those of the SQLite schema
(:mod:`sidecar.store.schema`), in PostgreSQL's types: money in BIGINT
micro-dollars, times and scores in DOUBLE PRECISION, flags in BOOLEAN. Key
text columns use the "C" collation so every ``ORDER BY id`` agrees with
SQLite's byte order whatever the database's locale.

The cap is a table constraint (SQLite uses a trigger for the same rule):
``spent + reserved <= cap`` and ``reserved >= 0`` hold for every committed row.

:func:`migrate` applies what is missing in one transaction under a
transaction-scoped advisory lock, so several sidecars starting at once on one
database apply each migration exactly once; ``shadowtrial_schema_version``
records which. A database migrated by a newer release (a version above ours)
is left alone: migrations only ever add.
"""

from __future__ import annotations

import time
from typing import Any

from sidecar.store.schema import MOVED

#: The pg_advisory_xact_lock key that serialises migrations: a fixed bigint owned by shadowtrial.
MIGRATION_LOCK = 0x5F3C_2A91_7D0E_4B6C

MIGRATIONS: tuple[str, ...] = (
    # 1: the trial loop and a fleet's case ledger (owners, leases, outbox)
    """
    CREATE TABLE trials (
        id TEXT COLLATE "C" PRIMARY KEY,
        team TEXT NOT NULL,
        incumbent_model TEXT NOT NULL,
        candidate_model TEXT NOT NULL,
        route TEXT,
        gateway TEXT,
        sample_rate DOUBLE PRECISION NOT NULL,
        cap_micros BIGINT NOT NULL,
        expected_cases BIGINT NOT NULL,
        delta DOUBLE PRECISION NOT NULL,
        min_cases BIGINT NOT NULL,
        audit_share DOUBLE PRECISION NOT NULL,
        candidate_max_tokens BIGINT NOT NULL,
        candidate_price_in BIGINT NOT NULL,
        candidate_price_out BIGINT NOT NULL,
        judge_price_in BIGINT NOT NULL,
        judge_price_out BIGINT NOT NULL,
        incumbent_price_in BIGINT,
        incumbent_price_out BIGINT,
        judge_model TEXT NOT NULL,
        judge_version_id TEXT NOT NULL,
        judge_version_name TEXT NOT NULL,
        judge_spec_json TEXT NOT NULL,
        execution_site TEXT NOT NULL,
        prompt_retention BOOLEAN NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        status TEXT NOT NULL,
        status_reason TEXT,
        ended_at DOUBLE PRECISION,
        spent_micros BIGINT NOT NULL DEFAULT 0,
        known_micros BIGINT NOT NULL DEFAULT 0,
        reserved_micros BIGINT NOT NULL DEFAULT 0,
        unknown_calls BIGINT NOT NULL DEFAULT 0,
        priced_calls BIGINT NOT NULL DEFAULT 0,
        CONSTRAINT trials_reserved_not_negative CHECK (reserved_micros >= 0),
        CONSTRAINT trials_cap_never_passed CHECK (spent_micros + reserved_micros <= cap_micros)
    );
    CREATE INDEX trials_team_created ON trials (team, created_at DESC);
    CREATE TABLE cases (
        id TEXT COLLATE "C" PRIMARY KEY,
        trial_id TEXT COLLATE "C" NOT NULL REFERENCES trials(id),
        exchange_id TEXT NOT NULL,
        owner TEXT,
        state TEXT NOT NULL,              -- claimed | reserved | dispatched | finished
        outcome TEXT,
        reserved_micros BIGINT NOT NULL,
        charged_micros BIGINT,
        incumbent_latency_ms DOUBLE PRECISION,
        incumbent_output_tokens BIGINT,
        incumbent_cost_micros BIGINT NOT NULL,
        incumbent_cost_coverage TEXT NOT NULL,
        candidate_cost_micros BIGINT,
        candidate_cost_coverage TEXT,
        judge_cost_micros BIGINT,
        judge_cost_coverage TEXT,
        candidate_latency_ms DOUBLE PRECISION,
        candidate_output_tokens BIGINT,
        score DOUBLE PRECISION,
        error TEXT,
        bodies_json TEXT,
        created_at DOUBLE PRECISION NOT NULL,
        finished_at DOUBLE PRECISION,
        CONSTRAINT cases_one_per_exchange UNIQUE (trial_id, exchange_id)
    );
    CREATE INDEX cases_trial_outcome ON cases (trial_id, outcome);
    CREATE INDEX cases_unfinished_owner ON cases (owner) WHERE state <> 'finished';
    CREATE TABLE judgments (
        id TEXT COLLATE "C" PRIMARY KEY,
        case_id TEXT COLLATE "C" NOT NULL REFERENCES cases(id),
        trial_id TEXT COLLATE "C" NOT NULL,
        judge_version_id TEXT NOT NULL,
        presentation_order TEXT NOT NULL,
        is_audit BOOLEAN NOT NULL,
        outcome TEXT NOT NULL,
        score INTEGER,
        strong BOOLEAN NOT NULL,
        winner_slot TEXT,
        error TEXT,
        longer_won BOOLEAN,
        created_at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX judgments_trial ON judgments (trial_id);
    CREATE TABLE funnel (
        trial_id TEXT COLLATE "C" NOT NULL,
        outcome TEXT COLLATE "C" NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (trial_id, outcome)
    );
    CREATE TABLE spend_ledger (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        trial_id TEXT COLLATE "C" NOT NULL,
        case_id TEXT COLLATE "C",
        kind TEXT NOT NULL,               -- reserve | top_up | release | charge | hold_unknown
        micros BIGINT NOT NULL,
        at DOUBLE PRECISION NOT NULL
    );
    CREATE INDEX spend_ledger_trial ON spend_ledger (trial_id, seq);
    CREATE TABLE idempotency (
        key TEXT PRIMARY KEY,
        body_hash TEXT NOT NULL,
        trial_id TEXT COLLATE "C" NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE owners (
        owner TEXT PRIMARY KEY,
        lease_until DOUBLE PRECISION NOT NULL,
        started_at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE outbox (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        record_id TEXT NOT NULL UNIQUE,
        topic TEXT NOT NULL,
        body TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL
    );
    """,
    # 2: the statistics a trial keeps between reads (sidecar/trials/fold.py), as in SQLite's migration 3
    """
    ALTER TABLE trials
        ADD COLUMN sequence_state TEXT,
        ADD COLUMN sequence_n BIGINT,
        ADD COLUMN judge_health_state TEXT,
        ADD COLUMN judge_health_n BIGINT;
    """,
    # 3: disputed usage reports, as in SQLite's migration 4
    """
    ALTER TABLE trials ADD COLUMN disputed_calls BIGINT NOT NULL DEFAULT 0;
    """,
    # 4: who started a trial, as in SQLite's migration 5
    """
    ALTER TABLE trials ADD COLUMN started_by TEXT;
    """,
    # 5: teams' posture, as in SQLite's migration 6
    """
    CREATE TABLE team_posture (
        team TEXT PRIMARY KEY,
        prompt_retention BOOLEAN NOT NULL,
        cut_over BOOLEAN NOT NULL,
        revision BIGINT NOT NULL,
        updated_at DOUBLE PRECISION NOT NULL,
        updated_by TEXT
    );
    CREATE TABLE gateway_uplink (
        team TEXT NOT NULL,
        gateway TEXT NOT NULL,
        content_uplink BOOLEAN NOT NULL,
        last_seen DOUBLE PRECISION NOT NULL,
        PRIMARY KEY (team, gateway)
    );
    """,
    # 6: the uplink's delivery leases, as in SQLite's migration 7 (claimed with SKIP LOCKED)
    """
    ALTER TABLE outbox ADD COLUMN claimed_by TEXT, ADD COLUMN lease_until DOUBLE PRECISION;
    """,
    # 7: a trial's state revision, as in SQLite's migration 8
    """
    ALTER TABLE trials ADD COLUMN state_revision BIGINT NOT NULL DEFAULT 0;
    CREATE FUNCTION shadowtrial_trials_state_revision() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        NEW.state_revision := OLD.state_revision + 1;
        RETURN NEW;
    END
    $$;
    CREATE TRIGGER trials_state_revision BEFORE UPDATE ON trials
    FOR EACH ROW EXECUTE FUNCTION shadowtrial_trials_state_revision();
    """,
    # 8: (moved) what a collector holds of the uplink: the collector's migration 1
    MOVED,
    # 9: the retention window and a trial's source, as in
    # SQLite's migration 10
    """
    ALTER TABLE trials
        ADD COLUMN source TEXT NOT NULL DEFAULT 'live',
        ADD COLUMN source_from DOUBLE PRECISION,
        ADD COLUMN source_to DOUBLE PRECISION,
        ADD COLUMN source_size BIGINT,
        ADD COLUMN replay_cursor BIGINT NOT NULL DEFAULT 0,
        ADD COLUMN replay_fed BIGINT NOT NULL DEFAULT 0;
    CREATE TABLE retained (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        team TEXT COLLATE "C" NOT NULL,
        exchange_id TEXT COLLATE "C" NOT NULL,
        model TEXT NOT NULL,
        gateway TEXT NOT NULL,
        route TEXT,
        served_at DOUBLE PRECISION NOT NULL,
        kept_at DOUBLE PRECISION NOT NULL,
        size BIGINT NOT NULL,
        sealed BYTEA NOT NULL,
        UNIQUE (team, exchange_id)
    );
    CREATE INDEX retained_team_served ON retained (team, served_at);
    CREATE INDEX retained_kept ON retained (kept_at);
    """,
    # 10: (moved) corpus evidence: the collector's migration 2
    MOVED,
    # 11: promotion, watches and alerts (DESIGN.md section 10). A watch's sentinel runs as
    # trials rows of kind 'watch', one per UTC day, so each day's cap is the ledger's own cap;
    # the watch keeps its detector's design and integer state; alerts and their transitions
    # (kept until the webhook delivered them)
    """
    ALTER TABLE trials ADD COLUMN kind TEXT NOT NULL DEFAULT 'trial', ADD COLUMN watch_id TEXT;
    CREATE TABLE watches (
        id TEXT COLLATE "C" PRIMARY KEY,
        team TEXT NOT NULL,
        trial_id TEXT COLLATE "C" NOT NULL UNIQUE REFERENCES trials(id),
        old_model TEXT NOT NULL,
        new_model TEXT NOT NULL,
        route TEXT,
        gateway TEXT,
        sample_rate DOUBLE PRECISION NOT NULL,
        daily_cap_micros BIGINT NOT NULL,
        judge_version_id TEXT NOT NULL,
        baseline DOUBLE PRECISION NOT NULL,
        design_json TEXT NOT NULL,
        created_at DOUBLE PRECISION NOT NULL,
        created_by TEXT,
        status TEXT NOT NULL,
        stopped_at DOUBLE PRECISION,
        current_day TEXT NOT NULL,
        current_trial_id TEXT NOT NULL,
        statistic BIGINT NOT NULL DEFAULT 0,
        judged BIGINT NOT NULL DEFAULT 0,
        decisive BIGINT NOT NULL DEFAULT 0,
        fired_at BIGINT,
        old_wins BIGINT NOT NULL DEFAULT 0,
        new_wins BIGINT NOT NULL DEFAULT 0,
        ties BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX watches_team_status ON watches (team, status);
    CREATE TABLE promotions (
        id TEXT COLLATE "C" PRIMARY KEY,
        trial_id TEXT NOT NULL UNIQUE,
        watch_id TEXT NOT NULL,
        team TEXT NOT NULL,
        promoted_by TEXT,
        promoted_at DOUBLE PRECISION NOT NULL,
        evidence_json TEXT NOT NULL
    );
    CREATE TABLE alerts (
        id TEXT COLLATE "C" PRIMARY KEY,
        watch_id TEXT NOT NULL,
        team TEXT NOT NULL,
        status TEXT NOT NULL,
        raised_at DOUBLE PRECISION NOT NULL,
        evidence_json TEXT NOT NULL,
        acknowledged_at DOUBLE PRECISION,
        acknowledged_by TEXT,
        resolved_at DOUBLE PRECISION,
        resolved_by TEXT
    );
    CREATE INDEX alerts_team_status ON alerts (team, status);
    CREATE TABLE alert_transitions (
        id TEXT COLLATE "C" PRIMARY KEY,
        alert_id TEXT NOT NULL,
        watch_id TEXT NOT NULL,
        team TEXT NOT NULL,
        state TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        actor TEXT,
        attempts BIGINT NOT NULL DEFAULT 0,
        delivered_at DOUBLE PRECISION
    );
    """,
    # 12: (moved) running comparison groups: the collector's migration 3
    MOVED,
    # 13: watch periods (issue 23, item 5): resolving an alert re-arms the watch's detector for
    # a new period, and each period's alert has its own row
    """
    ALTER TABLE watches ADD COLUMN period BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE watches ADD COLUMN period_started_at DOUBLE PRECISION;
    ALTER TABLE watches ADD COLUMN judged_before BIGINT NOT NULL DEFAULT 0;
    ALTER TABLE alerts ADD COLUMN period BIGINT NOT NULL DEFAULT 1;
    """,
    # 14: the scoring sequence (issue 31): SQLite's 15
    """
    ALTER TABLE cases ADD COLUMN score_seq BIGINT;
    ALTER TABLE trials ADD COLUMN scored_seq BIGINT NOT NULL DEFAULT 0;
    UPDATE cases SET score_seq = o.r FROM (
        SELECT id, ROW_NUMBER() OVER (PARTITION BY trial_id ORDER BY finished_at, id) AS r
        FROM cases WHERE outcome = 'judged' AND score IS NOT NULL
    ) AS o WHERE o.id = cases.id;
    UPDATE trials SET scored_seq = (SELECT COUNT(*) FROM cases WHERE cases.trial_id = trials.id
                                    AND cases.score_seq IS NOT NULL);
    CREATE INDEX cases_trial_score_seq ON cases (trial_id, score_seq);
    """,
    # 15: a trial that knows when to stop (issue 26, item 2), as in SQLite's migration 16
    """
    ALTER TABLE trials ADD COLUMN on_decision TEXT NOT NULL DEFAULT 'continue';
    """,
    # 16: per-segment verdicts (issue 27), as in SQLite's migration 17: the segments a trial is read by and its cap; the
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
    # 17: Compare's spend (issue 28, item 5), as in SQLite's migration 18
    """
    CREATE TABLE compare_spend (
        seq BIGSERIAL PRIMARY KEY,
        team TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL,
        charged_micros BIGINT NOT NULL,
        known_micros BIGINT NOT NULL,
        calls BIGINT NOT NULL,
        unknown_calls BIGINT NOT NULL
    );
    CREATE INDEX compare_spend_at ON compare_spend (at, team);
    """,
)


async def migrate(conn: Any) -> int:
    """Bring the database connected on ``conn`` (an asyncpg connection) up to
    ``len(MIGRATIONS)``; returns the version it was at before."""
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS shadowtrial_schema_version ("
            "version INTEGER PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)"
        )
        current: int = await conn.fetchval("SELECT COALESCE(MAX(version), 0) FROM shadowtrial_schema_version")
        for number, script in enumerate(MIGRATIONS, start=1):
            if number <= current:
                continue
            if script:  # an empty step (MOVED) only takes its number
                await conn.execute(script)  # no arguments: asyncpg runs a multi-statement script
            await conn.execute(
                "INSERT INTO shadowtrial_schema_version (version, applied_at) VALUES ($1, $2)", number, time.time()
            )
        return current
