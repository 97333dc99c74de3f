"""Telemetry: OpenTelemetry traces and metrics, and the counts the Prometheus endpoint shows.

- :mod:`~sidecar.telemetry.names` — every exported name and label vocabulary, declared once;
- :mod:`~sidecar.telemetry.sdk` — one process's tracer and meter providers (:class:`Telemetry`),
  built from ``[telemetry]``: nothing at all unless something is exported;
- :mod:`~sidecar.telemetry.tally` — process-local counters the metrics read;
- :mod:`~sidecar.telemetry.readings` — the value of every series, per process;
- :mod:`~sidecar.telemetry.spans` and :mod:`~sidecar.telemetry.provider` — a case's spans.

:class:`EngineTelemetry` is what an engine reports through, wherever it runs.
docs/telemetry.md lists what is exported and the guarantee that no content is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from opentelemetry.trace import Tracer

from sidecar.providers.base import Provider
from sidecar.telemetry.names import Role
from sidecar.telemetry.provider import InstrumentedProvider
from sidecar.telemetry.sdk import Telemetry
from sidecar.telemetry.tally import CountingFunnel, Tally

__all__ = ["CountingFunnel", "EngineTelemetry", "Tally", "Telemetry"]


@dataclass(frozen=True)
class EngineTelemetry:
    """The engine's counters, its tracer (None: no traces), the share of cases it traces when
    the gateway did not decide, and each provider's kind by name."""

    tally: Tally = field(default_factory=Tally)
    tracer: Tracer | None = None
    sample_ratio: float = 1.0
    systems: Mapping[str, str] = field(default_factory=dict)

    def wrap(self, provider: Provider, name: str, role: Role) -> Provider:
        """``provider`` (configured as ``name``) counted and traced as ``role``."""
        return InstrumentedProvider(provider, role=role, system=self.systems.get(name, "_OTHER"),
                                    tally=self.tally, tracer=self.tracer)
