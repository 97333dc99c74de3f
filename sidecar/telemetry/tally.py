"""Process-local counts that metrics read: what the engine decided, and the funnel's totals.

The store counts the funnel per trial, fleet-wide; a metric wants this process's counts with
no trial in them. So the places that decide an outcome also add to a :class:`Tally` — a few
integer increments under a lock never held across anything else — and the exporters (the
Prometheus endpoint, the OpenTelemetry readers) take :meth:`Tally.snapshot`\\ s. Nothing here
is ever flushed or reset: every key is a monotonic counter since the process started.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Mapping
from sidecar.ingest.funnel import FunnelCounter
from sidecar.telemetry.names import CALL_RESULTS, Role, judgment_outcome


class Tally:
    """Monotonic counts by reading key (``outcome.judged``, ``judgment.tie``, ``call.judge.ok``).

    Safe to add to and read from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, key: str, n: int = 1) -> None:
        with self._lock:
            self._counts[key] += n

    def outcome(self, outcome: str, n: int = 1) -> None:
        """A claimed case's funnel outcome (the store counted it in the finishing transaction)."""
        self.add(f"outcome.{outcome}", n)

    def judgment(self, outcome: str, score: int | float | None, error: str | None) -> None:
        self.add(f"judgment.{judgment_outcome(outcome, score, error)}")

    def call(self, role: Role, error: str | None) -> None:
        """A provider call's result: ``ok``, or its error kind."""
        result = "ok" if error is None else error if error in CALL_RESULTS else "malformed"
        self.add(f"call.{role}.{result}")

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)


class CountingFunnel(FunnelCounter):
    """The funnel counter, also keeping this process's totals by outcome (no trial) in a
    :class:`Tally` for the metrics; what it hands the store is unchanged."""

    def __init__(self, tally: Tally | None = None) -> None:
        super().__init__()
        self.tally = tally if tally is not None else Tally()

    def add(self, trial_id: str, outcome: str, n: int = 1) -> None:
        super().add(trial_id, outcome, n)
        self.tally.outcome(outcome, n)

    def add_many(self, counts: Mapping[tuple[str, str], int]) -> None:
        super().add_many(counts)
        for (_, outcome), n in counts.items():  # a batch has an entry or two
            self.tally.outcome(outcome, n)

