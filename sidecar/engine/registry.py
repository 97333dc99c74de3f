"""Running trials held in memory, so the tap can match exchanges without the store.

The registry is the engine's view of which trials are running; the store is the
truth. Status changes go to the store first, then here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from judge.paired import PairedJudge
from judge.version import JudgeSpec
from policies.money import Price
from sidecar.providers.base import Provider
from sidecar.store.records import TrialRecord
from sidecar.ingest.wire import Exchange


@dataclass(frozen=True)
class ActiveTrial:
    """A running trial with everything a case needs, resolved once at load."""

    record: TrialRecord
    candidate: Provider
    candidate_upstream: str
    judge: PairedJudge
    judge_spec: JudgeSpec
    candidate_price: Price
    judge_price: Price
    incumbent_price: Price | None

    @property
    def id(self) -> str:
        return self.record.id

    def matches(self, exchange: Exchange) -> bool:
        r = self.record
        if exchange.team != r.team or exchange.model != r.incumbent_model:
            return False
        if r.route is not None and exchange.route != r.route:
            return False
        if r.gateway is not None and exchange.gateway != r.gateway:
            return False
        return True


class Registry:
    def __init__(self) -> None:
        self._running: dict[str, ActiveTrial] = {}
        self._status: dict[str, str] = {}

    def add(self, trial: ActiveTrial) -> None:
        self._status[trial.id] = trial.record.status
        if trial.record.status == "running":
            self._running[trial.id] = trial

    def set_status(self, trial_id: str, status: str) -> None:
        self._status[trial_id] = status
        if status != "running":
            self._running.pop(trial_id, None)

    def status(self, trial_id: str) -> str | None:
        return self._status.get(trial_id)

    def is_running(self, trial_id: str) -> bool:
        return trial_id in self._running

    def get(self, trial_id: str) -> ActiveTrial | None:
        return self._running.get(trial_id)

    def running(self) -> list[ActiveTrial]:
        return list(self._running.values())

    def match(self, exchange: Exchange) -> list[ActiveTrial]:
        return [t for t in self._running.values() if t.matches(exchange)]

    def refresh_record(self, record: TrialRecord) -> None:
        trial = self._running.get(record.id)
        if trial is not None:
            self._running[record.id] = replace(trial, record=record)
        self.set_status(record.id, record.status)
