"""The store: trials, cases, judgments, the spend ledger, idempotency keys.

One interface (:class:`sidecar.store.base.Store`), SQLite behind it by default.
"""

from sidecar.store.base import Store
from sidecar.store.records import (
    CaseFinish,
    CaseStart,
    JudgmentRow,
    ReserveOutcome,
    TrialRecord,
)

__all__ = ["Store", "CaseFinish", "CaseStart", "JudgmentRow", "ReserveOutcome", "TrialRecord"]
