"""The control-plane wing's store: the sidecar's store (:mod:`sidecar.store`) with the tables
only a collector keeps — the collected records, corpus evidence and running comparison groups —
and their own migrations (:mod:`sidecar.collector.store.schema`). Only the collector opens one,
with :func:`make_collector_store`; a sidecar's :func:`sidecar.store.make_store` never migrates
or opens these tables.
"""

from __future__ import annotations

from sidecar.collector.store.base import ControlPlaneStore

__all__ = ["ControlPlaneStore", "make_collector_store"]


def make_collector_store(url: str, *, lock_timeout_s: float = 10.0) -> ControlPlaneStore:
    """As :func:`sidecar.store.make_store` (``postgresql://…`` or ``postgres://…`` opens
    PostgreSQL, ``sqlite:///path`` or a plain path SQLite), with the collector's tables."""
    if url.startswith(("postgresql://", "postgres://")):
        from sidecar.collector.store.postgres import CollectorPostgresStore

        store: ControlPlaneStore = CollectorPostgresStore(url, lock_timeout_s=lock_timeout_s)
        return store
    from sidecar.collector.store.sqlite import CollectorSQLiteStore

    return CollectorSQLiteStore(url.removeprefix("sqlite://") if url.startswith("sqlite://") else url,
                                lock_timeout_s=lock_timeout_s)
