"""The collector's migration 4 (issue 24, items 10 and 12): comparison templates, their
versions and request keys, and archived groups. Rows: :mod:`sidecar.collector.store.template_records`."""

from __future__ import annotations

_TABLES = """
CREATE TABLE comparison_templates (
    id TEXT{C} PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT{C} NOT NULL,
    revision {INT} NOT NULL,
    created_at {REAL} NOT NULL,
    created_by TEXT,
    updated_at {REAL} NOT NULL,
    UNIQUE (team, name)
);
CREATE TABLE comparison_template_versions (
    template_id TEXT{C} NOT NULL,
    version {INT} NOT NULL,
    config TEXT NOT NULL,
    created_at {REAL} NOT NULL,
    created_by TEXT,
    PRIMARY KEY (template_id, version)
);
CREATE TABLE comparison_template_keys (
    key TEXT{C} PRIMARY KEY,
    body_hash TEXT NOT NULL,
    template_id TEXT{C} NOT NULL,
    version {INT} NOT NULL,
    created_at {REAL} NOT NULL
);
CREATE TABLE comparison_archive (
    comparison_id TEXT{C} PRIMARY KEY,
    archived_at {REAL} NOT NULL,
    archived_by TEXT
);
"""

SQLITE = _TABLES.format(C="", INT="INTEGER", REAL="REAL")
POSTGRES = _TABLES.format(C=' COLLATE "C"', INT="BIGINT", REAL="DOUBLE PRECISION")
