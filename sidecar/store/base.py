"""The store interface the engine and the admin API depend on.

Contract for every implementation:
- ``reserve_case`` is atomic against the cap: it inserts the case and adds its
  reservation only if the trial is running and ``spent + reserved + amount <=
  cap``; otherwise the trial moves to ``cap_reached`` (if it was running) and
  nothing is inserted. A second case for the same (trial, exchange) is a
  ``duplicate`` and changes nothing.
- ``finish_case`` releases the whole reservation of the case and charges what
  was spent, records judgments and counts the outcome, in one transaction.
- ``recover_in_flight`` (at start-up) marks every case that was reserved but not
  finished as ``indeterminate``: a case that never dispatched gets its
  reservation released; one that did keeps it charged as unknown spend. None is
  re-run.
- No method blocks the event loop: implementations do their I/O off it.
"""

from __future__ import annotations

from typing import Callable, Mapping, Protocol, Sequence

from sidecar.store.records import CaseFinish, CaseStart, JudgmentRow, ReserveOutcome, TrialRecord, TrialSnapshot


class Store(Protocol):
    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def create_trial(
        self, trial: TrialRecord, *, idempotency_key: str | None = None, body_hash: str | None = None
    ) -> TrialRecord:
        """Insert ``trial``; with a key, return the trial first created under it
        (raise ``IdempotencyConflict`` if the key came with another body)."""
        ...

    async def get_trial(self, trial_id: str) -> TrialRecord | None: ...

    async def list_trials(self, *, teams: Sequence[str] | None = None, status: str | None = None) -> list[TrialRecord]: ...

    async def set_trial_status(
        self, trial_id: str, status: str, reason: str | None, *, ended: bool
    ) -> tuple[TrialRecord | None, bool]:
        """Conditional: changes nothing when the trial already has ``status``. Returns (record, changed)."""
        ...

    async def reserve_case(self, case: CaseStart) -> ReserveOutcome: ...

    async def mark_dispatched(self, case_id: str) -> None: ...

    async def top_up(self, case_id: str, trial_id: str, extra_micros: int) -> bool: ...

    async def finish_case(self, finish: CaseFinish) -> None: ...

    async def count_outcomes(
        self, counts: Mapping[tuple[str, str], int], *, on_commit: Callable[[], None] | None = None
    ) -> None:
        """Add funnel counts for outcomes that never reserved a case, keyed by (trial id, outcome).
        ``on_commit`` runs right after the commit, before any later read."""
        ...

    async def recover_in_flight(self, now: float) -> list[str]: ...

    async def score_counts(self, trial_id: str) -> dict[float, int]: ...

    async def snapshot(
        self, trial_id: str, *, pending: Callable[[str], dict[str, int]] | None = None
    ) -> TrialSnapshot | None:
        """The trial and all its figures from one consistent read; ``pending``
        funnel counts are added inside that read."""
        ...

    async def total_spend(self) -> dict[str, int]: ...
