"""The corpus tables (issue 13), one migration for each dialect: the collector's migration 2
(:mod:`sidecar.collector.store.schema`). Item content lives once per revision
(``dataset_revisions``); a version is the ordered list of (item, revision) pairs it holds
(``dataset_items``).
"""

from __future__ import annotations

SQLITE = """
CREATE TABLE datasets (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    latest_version INTEGER NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT,
    UNIQUE (team, name)
);
CREATE TABLE dataset_versions (
    dataset_id TEXT NOT NULL REFERENCES datasets(id),
    version INTEGER NOT NULL,
    source TEXT NOT NULL,             -- import | edit | seed
    parent INTEGER,
    item_count INTEGER NOT NULL,
    digest TEXT NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT,
    PRIMARY KEY (dataset_id, version)
);
CREATE TABLE dataset_revisions (
    dataset_id TEXT NOT NULL,
    revision_id TEXT NOT NULL,
    item_id TEXT NOT NULL,
    content TEXT NOT NULL,
    PRIMARY KEY (dataset_id, revision_id)
);
CREATE TABLE dataset_items (
    dataset_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    position INTEGER NOT NULL,
    item_id TEXT NOT NULL,
    revision_id TEXT NOT NULL,
    PRIMARY KEY (dataset_id, version, position),
    UNIQUE (dataset_id, version, item_id)
);
CREATE TABLE dataset_slices (
    dataset_id TEXT NOT NULL REFERENCES datasets(id),
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    dataset_version INTEGER NOT NULL,
    filter TEXT NOT NULL,
    item_count INTEGER NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT,
    PRIMARY KEY (dataset_id, name, version)
);
CREATE TABLE suites (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    dataset_id TEXT NOT NULL REFERENCES datasets(id),
    dataset_version INTEGER NOT NULL,
    slice_name TEXT,
    slice_version INTEGER,
    metrics TEXT NOT NULL,
    digest TEXT NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT,
    UNIQUE (team, name, version)
);
CREATE TABLE comparisons (
    id TEXT PRIMARY KEY,
    team TEXT NOT NULL,
    suite_id TEXT NOT NULL REFERENCES suites(id),
    spec TEXT NOT NULL,
    readiness TEXT NOT NULL,
    readiness_token TEXT NOT NULL,
    planned_total INTEGER NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    created_by TEXT
);
CREATE INDEX comparisons_team_created ON comparisons (team, created_at);
CREATE TABLE comparison_keys (
    key TEXT PRIMARY KEY,
    body_hash TEXT NOT NULL,
    comparison_id TEXT NOT NULL,
    created_at REAL NOT NULL
);
"""

POSTGRES = """
CREATE TABLE datasets (
    id TEXT COLLATE "C" PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT NOT NULL,
    latest_version BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    created_by TEXT,
    CONSTRAINT datasets_team_name UNIQUE (team, name)
);
CREATE TABLE dataset_versions (
    dataset_id TEXT COLLATE "C" NOT NULL REFERENCES datasets(id),
    version BIGINT NOT NULL,
    source TEXT NOT NULL,
    parent BIGINT,
    item_count BIGINT NOT NULL,
    digest TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    created_by TEXT,
    PRIMARY KEY (dataset_id, version)
);
CREATE TABLE dataset_revisions (
    dataset_id TEXT COLLATE "C" NOT NULL,
    revision_id TEXT COLLATE "C" NOT NULL,
    item_id TEXT COLLATE "C" NOT NULL,
    content TEXT NOT NULL,
    PRIMARY KEY (dataset_id, revision_id)
);
CREATE TABLE dataset_items (
    dataset_id TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    position BIGINT NOT NULL,
    item_id TEXT COLLATE "C" NOT NULL,
    revision_id TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (dataset_id, version, position),
    CONSTRAINT dataset_items_one_per_version UNIQUE (dataset_id, version, item_id)
);
CREATE TABLE dataset_slices (
    dataset_id TEXT COLLATE "C" NOT NULL REFERENCES datasets(id),
    name TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    dataset_version BIGINT NOT NULL,
    filter TEXT NOT NULL,
    item_count BIGINT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    created_by TEXT,
    PRIMARY KEY (dataset_id, name, version)
);
CREATE TABLE suites (
    id TEXT COLLATE "C" PRIMARY KEY,
    team TEXT NOT NULL,
    name TEXT COLLATE "C" NOT NULL,
    version BIGINT NOT NULL,
    dataset_id TEXT COLLATE "C" NOT NULL REFERENCES datasets(id),
    dataset_version BIGINT NOT NULL,
    slice_name TEXT,
    slice_version BIGINT,
    metrics TEXT NOT NULL,
    digest TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    created_by TEXT,
    CONSTRAINT suites_team_name_version UNIQUE (team, name, version)
);
CREATE TABLE comparisons (
    id TEXT COLLATE "C" PRIMARY KEY,
    team TEXT NOT NULL,
    suite_id TEXT COLLATE "C" NOT NULL REFERENCES suites(id),
    spec TEXT NOT NULL,
    readiness TEXT NOT NULL,
    readiness_token TEXT NOT NULL,
    planned_total BIGINT NOT NULL,
    status TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL,
    created_by TEXT
);
CREATE INDEX comparisons_team_created ON comparisons (team, created_at DESC);
CREATE TABLE comparison_keys (
    key TEXT PRIMARY KEY,
    body_hash TEXT NOT NULL,
    comparison_id TEXT COLLATE "C" NOT NULL,
    created_at DOUBLE PRECISION NOT NULL
);
"""
