"""The store: trials, the case ledger, funnel counts, the read model, the outbox.

One contract (:mod:`sidecar.store.base`), two implementations: SQLite, the
embedded default, and PostgreSQL for a fleet of sidecars sharing trials.
:func:`make_store` picks one from the configured URL.
"""

from __future__ import annotations

from sidecar.store.base import CaseLedger, FunnelStore, ReadModel, Store, TrialStore
from sidecar.store.records import CaseFinish, CaseStart, JudgmentRow, TrialRecord

__all__ = [
    "CaseFinish",
    "CaseLedger",
    "CaseStart",
    "FunnelStore",
    "JudgmentRow",
    "ReadModel",
    "Store",
    "TrialRecord",
    "TrialStore",
    "make_store",
]


def make_store(url: str, *, lock_timeout_s: float = 10.0) -> Store:
    """``postgresql://…`` (or ``postgres://…``) opens PostgreSQL; ``sqlite:///path``
    or a plain file path opens SQLite. Nothing is connected until ``open()``.

    ``lock_timeout_s``: how long a statement waits for a lock another connection (or
    process) holds before it fails, so a stuck peer cannot hang this one."""
    if url.startswith(("postgresql://", "postgres://")):
        from sidecar.store.postgres import PostgresStore

        store: Store = PostgresStore(url, lock_timeout_s=lock_timeout_s)
        return store
    from sidecar.store.sqlite import SQLiteStore

    return SQLiteStore(url.removeprefix("sqlite://") if url.startswith("sqlite://") else url, lock_timeout_s=lock_timeout_s)
