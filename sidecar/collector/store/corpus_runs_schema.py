"""The tables of running comparison groups (issue 13, items 3-4): the collector's migration 3
(:mod:`sidecar.collector.store.schema`); :mod:`sidecar.collector.store.corpus_run_records`
describes the rows."""

from __future__ import annotations

_TABLES = """
CREATE TABLE comparison_runs (
    comparison_id TEXT{C} PRIMARY KEY,
    cap_micros {INT} NOT NULL,
    spent_micros {INT} NOT NULL DEFAULT 0,
    reserved_micros {INT} NOT NULL DEFAULT 0,
    cancelled_arms TEXT NOT NULL DEFAULT '[]',
    started_at {REAL} NOT NULL,
    ended_at {REAL}
);
CREATE TABLE comparison_attempts (
    id TEXT{C} PRIMARY KEY,
    comparison_id TEXT{C} NOT NULL,
    arm TEXT{C} NOT NULL,
    item_id TEXT{C} NOT NULL,
    revision_id TEXT{C} NOT NULL,
    repetition {INT} NOT NULL,
    attempt {INT} NOT NULL,
    retry_of TEXT,
    status TEXT NOT NULL,
    owner TEXT,
    lease_until {REAL},
    reserved_micros {INT} NOT NULL DEFAULT 0,
    created_at {REAL} NOT NULL,
    finished_at {REAL},
    latency_ms {REAL},
    cost_micros {INT} NOT NULL DEFAULT 0,
    cost_coverage TEXT NOT NULL DEFAULT 'unknown',
    output TEXT,
    error TEXT,
    UNIQUE (comparison_id, arm, item_id, revision_id, repetition, attempt)
);
CREATE INDEX comparison_attempts_status ON comparison_attempts (status, lease_until);
CREATE TABLE comparison_scores (
    attempt_id TEXT{C} NOT NULL,
    comparison_id TEXT{C} NOT NULL,
    metric TEXT{C} NOT NULL,
    kind TEXT NOT NULL,
    version TEXT NOT NULL,
    direction TEXT NOT NULL,
    status TEXT NOT NULL,
    value {REAL},
    category TEXT,
    paired_with TEXT,
    detail TEXT,
    cost_micros {INT} NOT NULL DEFAULT 0,
    cost_coverage TEXT NOT NULL DEFAULT 'complete',
    owner TEXT,
    lease_until {REAL},
    reserved_micros {INT} NOT NULL DEFAULT 0,
    PRIMARY KEY (attempt_id, metric)
);
CREATE INDEX comparison_scores_group ON comparison_scores (comparison_id);
CREATE INDEX comparison_scores_status ON comparison_scores (status, lease_until);
"""

SQLITE = _TABLES.format(C="", INT="INTEGER", REAL="REAL")
POSTGRES = _TABLES.format(C=' COLLATE "C"', INT="BIGINT", REAL="DOUBLE PRECISION")

# The collector's migration 4 (issue 25, items 3-4): collectors sharing one database take a
# group's items by lease (one row per item taken, its owner and lease), so two runners never
# work the same item at once; a run that cannot go on ends with a named ``error``; a
# control-plane trial's stored exchanges are leased to one collector's engine at a time.
_LEASES = """
CREATE TABLE comparison_item_leases (
    comparison_id TEXT{C} NOT NULL,
    item_index {INT} NOT NULL,
    owner TEXT,
    lease_until {REAL} NOT NULL DEFAULT 0,
    PRIMARY KEY (comparison_id, item_index)
);
ALTER TABLE comparison_runs ADD COLUMN error TEXT;
ALTER TABLE collected_records ADD COLUMN lease_owner TEXT;
ALTER TABLE collected_records ADD COLUMN lease_until {REAL};
"""

LEASES_SQLITE = _LEASES.format(C="", INT="INTEGER", REAL="REAL")
LEASES_POSTGRES = _LEASES.format(C=' COLLATE "C"', INT="BIGINT", REAL="DOUBLE PRECISION")
