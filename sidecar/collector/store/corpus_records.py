"""Plain records of corpus evidence (issue 13): datasets and their immutable versions, item
revisions, slices, suites and comparison groups. Item ``content`` is the one field that
holds content (input messages, expected output, tags, metadata) as JSON text: a corpus
is uploaded on purpose, so it is kept.

Immutability. A dataset version, an item revision, a slice version and a suite version are
written once and never updated; an edit is a new version. The only mutable fact is a
dataset's ``latest_version``, moved by a conditional update, so two concurrent edits of
the same version cannot both land (:meth:`~sidecar.collector.store.base.CorpusStore.add_dataset_version`).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DatasetRecord:
    id: str
    team: str
    name: str
    latest_version: int
    created_at: float
    created_by: str | None


@dataclass(frozen=True, slots=True)
class DatasetVersion:
    """``source``: ``import`` | ``edit`` | ``seed``; ``parent`` the version it was made from
    (None for the first); ``digest`` a content hash of its ordered (item, revision) pairs."""

    dataset_id: str
    version: int
    source: str
    parent: int | None
    item_count: int
    digest: str
    created_at: float
    created_by: str | None


@dataclass(frozen=True, slots=True)
class ItemRow:
    """One item of a version: its stable id, its revision (a content hash) and the content."""

    item_id: str
    revision_id: str
    content: str


@dataclass(frozen=True, slots=True)
class SliceRecord:
    """A saved filter over one dataset version; saving the same name again is its next version."""

    dataset_id: str
    name: str
    version: int
    dataset_version: int
    filter: str
    item_count: int
    created_at: float
    created_by: str | None


@dataclass(frozen=True, slots=True)
class SuiteRecord:
    """A suite version: a dataset version (or a slice version of it) and pinned metrics
    (``metrics``: JSON text, each with its exact version). Saving the same name again is
    its next version, with an id of its own."""

    id: str
    team: str
    name: str
    version: int
    dataset_id: str
    dataset_version: int
    slice_name: str | None
    slice_version: int | None
    metrics: str
    digest: str
    created_at: float
    created_by: str | None


@dataclass(frozen=True, slots=True)
class ComparisonRecord:
    """A comparison group as started: its spec and the readiness it was admitted on (JSON
    text), the readiness token, the planned invocations; ``status`` ``admitted`` until a
    runner takes it."""

    id: str
    team: str
    suite_id: str
    spec: str
    readiness: str
    readiness_token: str
    planned_total: int
    status: str
    created_at: float
    created_by: str | None
