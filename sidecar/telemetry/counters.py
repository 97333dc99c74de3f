"""The main process's own counts: one typed int field per series, never a counter by string key.

:class:`TapCounters` is written on the tap's loop by the places that decide a count (the tap's
refusals, intake, the retention window, compare) and read by the exporters
(:func:`sidecar.telemetry.readings.tap_part`) and ``/v1/live``. Each field is named in
:data:`sidecar.telemetry.names.TAP_COUNTERS`, which maps it to its ``/metrics`` series (or
says it is read on ``/v1/live`` only). It reads as a mapping from those names to their
values (``counters["exchanges_received"]``), so a reading is ``dict(counters)``; every write
goes through a field or a method whose label is one of the names' vocabularies.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields

from sidecar.telemetry.names import TAP_COUNTERS, TapRejection


@dataclass(slots=True, eq=False)
class TapCounters(Mapping[str, int]):
    """Monotonic counts since the process started (all on the tap's loop)."""

    exchanges_received: int = 0
    cases_sampled: int = 0
    tap_rejected_malformed: int = 0
    tap_rejected_too_large: int = 0
    tap_rejected_unauthorized: int = 0
    tap_rejected_read_timeout: int = 0
    tap_rejected_unsupported_encoding: int = 0
    tap_figures_excluded_cost_usd: int = 0
    tap_figures_excluded_latency_ms: int = 0
    tap_figures_excluded_input_tokens: int = 0
    tap_figures_excluded_output_tokens: int = 0
    litellm_webhook_skipped_not_chat: int = 0
    litellm_webhook_skipped_failed: int = 0
    litellm_webhook_skipped_shadow_call: int = 0
    litellm_webhook_skipped_incomplete: int = 0
    litellm_webhook_skipped_invalid: int = 0
    otlp_spans_exchange: int = 0
    otlp_spans_not_llm: int = 0
    otlp_spans_skipped_redacted: int = 0
    otlp_spans_unattributed: int = 0
    otlp_spans_invalid: int = 0
    otlp_spans_refused: int = 0
    retention_kept: int = 0
    retention_evicted_age: int = 0
    retention_evicted_count: int = 0
    retention_evicted_bytes: int = 0
    retention_shed_buffer_full: int = 0
    retention_skipped_retention_off: int = 0
    retention_skipped_redacted: int = 0
    retention_write_failed: int = 0
    retention_forgotten: int = 0
    compare_streamed: int = 0
    compare_refused: int = 0
    # read on /v1/live only
    tap_exchanges_refused_team: int = 0
    tap_failed: int = 0
    cases_shed: int = 0
    journal_write_errors: int = 0
    tap_rejected_forbidden: int = 0

    # -- labelled writes (the label is a name's vocabulary, checked) -------------------------

    def tap_rejected(self, reason: TapRejection) -> None:
        self._add(f"tap_rejected_{reason}", 1)

    def figures_excluded(self, excluded: Mapping[str, int]) -> None:
        """Gateway figures out of range, by field (``sidecar.ingest.screen.FIGURES``)."""
        for figure, n in excluded.items():
            self._add(f"tap_figures_excluded_{figure}", n)

    def webhook_skipped(self, skipped: Mapping[str, int]) -> None:
        """LiteLLM webhook entries not taken, by reason (``sidecar.integrations.slo.SKIP_REASONS``)."""
        for reason, n in skipped.items():
            self._add(f"litellm_webhook_skipped_{reason}", n)

    def otlp_spans(self, outcomes: Mapping[str, int]) -> None:
        """Spans of ``POST /v1/traces`` by outcome (``sidecar.telemetry.names.OTLP_SPAN_OUTCOMES``)."""
        for outcome, n in outcomes.items():
            self._add(f"otlp_spans_{outcome}", n)

    def _add(self, name: str, n: int) -> None:
        if name not in _NAMES:
            raise KeyError(f"{name!r} is not a counter of sidecar.telemetry.names.TAP_COUNTERS")
        setattr(self, name, getattr(self, name) + n)

    # -- read as a mapping of reading keys -------------------------------------------------

    def __getitem__(self, name: str) -> int:
        if name not in _NAMES:
            raise KeyError(name)
        value: int = getattr(self, name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(TAP_COUNTERS)

    def __len__(self) -> int:
        return len(TAP_COUNTERS)


_NAMES = frozenset(TAP_COUNTERS)
if _NAMES != {f.name for f in fields(TapCounters)} or len(_NAMES) != len(TAP_COUNTERS):
    raise ImportError("TapCounters' fields and sidecar.telemetry.names.TAP_COUNTERS differ")
