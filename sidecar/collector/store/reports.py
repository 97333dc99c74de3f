"""What the control plane's console reads of the uplink records a collector keeps
(:class:`ReportsStore`): per trial and reporting sidecar, its latest ``trial_state`` and its
count of ``case_result`` records; every ``alert`` record. Read-only; implemented by
:mod:`sidecar.collector.store.reports_sqlite` and :mod:`sidecar.collector.store.reports_pg`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class SidecarReport:
    """What one sidecar reported of one trial."""

    trial_id: str
    sidecar_id: str
    team: str | None
    #: Its ``case_result`` records held.
    case_results: int
    #: The body of the highest-revision ``trial_state`` it sent (None: none yet).
    state: bytes | None
    #: When its latest record of the trial arrived.
    last_received_at: float


class ReportsStore(Protocol):
    async def sidecar_reports(self) -> list[SidecarReport]:
        """One row per (trial, sidecar) that sent a ``trial_state`` or a ``case_result``,
        ordered by trial id then sidecar id."""
        ...

    async def alert_records(self) -> list[tuple[str, bytes]]:
        """Every held ``alert`` record as ``(sidecar_id, body)``, in arrival order."""
        ...
