"""Every name the sidecar exports, declared once: span names, attribute keys, metrics and the
closed sets of label values they may take.

A label or attribute value is either one of the fixed vocabularies below, an identity the
sidecar made (a trial id, a case id, a judge version id), a configured model name, or a
number. Nothing a caller or a model wrote — a prompt, an answer, a rationale, an error
message — has a name here, so nothing of it can be exported (docs/telemetry.md). Metric
labels are narrower still: no trial, team, route or model, only the vocabularies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

from sidecar.ingest import genai_spans, plugin_stats
from sidecar.integrations import slo
from sidecar.store.records import OUTCOMES

#: The instrumentation scope of every span and metric.
SCOPE = "shadowtrial"

# -- spans -----------------------------------------------------------------------------------

CASE_SPAN = "shadowtrial.case"
JUDGE_SPAN = "shadowtrial.judge"
#: A model call's span is named ``"{operation} {model}"`` (GenAI semantic conventions).
CHAT_OPERATION = "chat"

# GenAI semantic-convention attributes.
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
#: The older name of ``gen_ai.provider.name``, still what many backends group by.
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_EVALUATION_RESULT = "gen_ai.evaluation.result"  # an event on the judge span
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
ERROR_TYPE = "error.type"

# shadowtrial's own.
TRIAL_ID = "shadowtrial.trial.id"
CASE_ID = "shadowtrial.case.id"
SUBJECT_KIND = "shadowtrial.subject.kind"
JUDGE_VERSION = "shadowtrial.judge.version"
CASE_OUTCOME = "shadowtrial.case.outcome"
CASE_AUDITED = "shadowtrial.case.audited"
CASE_RESERVED = "shadowtrial.case.reserved_micros"
CASE_CHARGED = "shadowtrial.case.charged_micros"
CALL_ROLE = "shadowtrial.call.role"
CALL_ATTEMPTS = "shadowtrial.call.attempts"
JUDGE_ORDER = "shadowtrial.judge.order"
JUDGE_AUDIT = "shadowtrial.judge.audit"
JUDGE_OUTCOME = "shadowtrial.judge.outcome"
JUDGE_CALLS = "shadowtrial.judge.calls"
#: The name of the paired evaluation in ``gen_ai.evaluation.name``.
PAIRED_EVALUATION = "shadowtrial.paired"

# -- vocabularies ----------------------------------------------------------------------------

Role = Literal["candidate", "judge"]
ROLES: tuple[Role, ...] = ("candidate", "judge")

#: A provider call's result: ``ok`` or the provider's error kind (sidecar.providers.base).
CALL_RESULTS = ("ok", "timeout", "connection", "http_429", "http_5xx", "http_4xx", "malformed")

#: How one judgment ended: a verdict, from the candidate's side, or why there was none.
JUDGMENT_OUTCOMES = ("candidate_better", "tie", "incumbent_better", "no_label", "conflicting_labels", "call_failed")

#: Funnel outcomes that are a sampled case shed without a judgment, by the reason label.
SHED_REASONS = {
    "shed_queue_full": "queue_full",
    "shed_stopped": "stopped",
    "shed_cap_busy": "cap_busy",
    "shed_outbox_full": "outbox_full",
    "cap_reached": "cap_reached",
    "not_at_site": "not_at_site",
    "after_decision": "after_decision",
}

#: Finish reasons as providers spell them; any other is exported as ``other``.
FINISH_REASONS = frozenset(
    {"stop", "length", "tool_calls", "content_filter", "function_call", "end_turn", "max_tokens", "stop_sequence",
     "tool_use", "refusal", "pause_turn"}
)

#: Tap refusals and excluded gateway figures (:class:`sidecar.telemetry.counters.TapCounters`).
TapRejection = Literal["malformed", "too_large", "unauthorized", "read_timeout", "unsupported_encoding"]
TAP_REJECTED: tuple[TapRejection, ...] = (
    "malformed", "too_large", "unauthorized", "read_timeout", "unsupported_encoding",
)
TAP_FIGURES = ("cost_usd", "latency_ms", "input_tokens", "output_tokens")
#: Why a gateway plugin dropped an exchange, as it reports it (sidecar.ingest.plugin_stats).
PLUGIN_DROP_REASONS: tuple[str, ...] = plugin_stats.REASONS
#: Why the LiteLLM webhook did not take an entry (sidecar.integrations.slo).
WEBHOOK_SKIPS: tuple[str, ...] = slo.SKIP_REASONS
#: What became of the spans ``POST /v1/traces`` received (sidecar.ingest.genai_spans), and
#: ``refused``: a team the gateway's credential does not cover.
OTLP_SPAN_OUTCOMES: tuple[str, ...] = (*genai_spans.SPAN_OUTCOMES, "refused")


def finish_reason(value: str | None) -> str:
    """A provider's finish reason, folded into :data:`FINISH_REASONS` (``other`` else)."""
    if value is None:
        return "none"
    return value if value in FINISH_REASONS else "other"


def judgment_outcome(outcome: str, score: int | float | None, error: str | None) -> str:
    """A judgment's :data:`JUDGMENT_OUTCOMES` value, from the judge's fixed outcome and error codes."""
    if outcome == "verdict":
        if score is None or score == 0:
            return "tie"
        return "candidate_better" if score > 0 else "incumbent_better"
    if error in ("no_label", "conflicting_labels"):
        return error
    return "call_failed"


# -- metrics ---------------------------------------------------------------------------------

Kind = Literal["counter", "gauge"]
#: A series' labels, as (name, value) pairs.
Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric: its OpenTelemetry name and its Prometheus name (declared, not derived, so
    each can be searched for), and its series: each a set of labels from the vocabularies
    above and the key of the reading it reports (:mod:`sidecar.telemetry.readings`). Every
    series is always exported, zeros included, so a dashboard never meets a missing one."""

    otel: str
    prometheus: str
    kind: Kind
    unit: str
    help: str
    series: tuple[tuple[Labels, str], ...]


def _one(key: str) -> tuple[tuple[Labels, str], ...]:
    return (((), key),)


def _by(label: str, pairs: Iterable[tuple[str, str]]) -> tuple[tuple[Labels, str], ...]:
    return tuple((((label, value),), key) for value, key in pairs)


#: What became of exchanges offered to the retention window (:mod:`sidecar.retention.window`).
RETENTION_EVENTS = ("kept", "evicted_age", "evicted_count", "evicted_bytes", "shed_buffer_full",
                    "skipped_retention_off", "skipped_redacted", "write_failed", "forgotten")
#: Compare requests (:mod:`sidecar.services.compare`) by how they ended: counts only.
COMPARE_RESULTS = ("streamed", "refused")

#: The main process's own counts that are ``/metrics`` series (by these reading keys, in :data:`METRICS`),
#: and those read on ``/v1/live`` only: gateway refusals for a team, tap failures, the sheds of
#: a batch, journal write errors, gateway tokens without the role.
#: :class:`sidecar.telemetry.counters.TapCounters` has one int field of each name.
TAP_COUNTER_SERIES: tuple[str, ...] = (
    ("exchanges_received", "cases_sampled")
    + tuple(f"tap_rejected_{r}" for r in TAP_REJECTED)
    + tuple(f"tap_figures_excluded_{f}" for f in TAP_FIGURES)
    + tuple(f"litellm_webhook_skipped_{r}" for r in WEBHOOK_SKIPS)
    + tuple(f"otlp_spans_{o}" for o in OTLP_SPAN_OUTCOMES)
    + tuple(f"retention_{e}" for e in RETENTION_EVENTS)
    + tuple(f"compare_{r}" for r in COMPARE_RESULTS)
)
TAP_COUNTERS_UNEXPORTED: tuple[str, ...] = (
    "tap_exchanges_refused_team", "tap_failed", "cases_shed", "journal_write_errors", "tap_rejected_forbidden",
)
TAP_COUNTERS = TAP_COUNTER_SERIES + TAP_COUNTERS_UNEXPORTED

METRICS: tuple[Metric, ...] = (
    Metric("shadowtrial.exchanges.received", "shadowtrial_exchanges_received_total", "counter", "{exchange}",
           "Exchanges decoded by the tap.", _one("exchanges_received")),
    Metric("shadowtrial.cases.sampled", "shadowtrial_cases_sampled_total", "counter", "{case}",
           "Cases offered to the intake queue and taken.", _one("cases_sampled")),
    Metric("shadowtrial.cases.shed", "shadowtrial_cases_shed_total", "counter", "{case}",
           "Sampled cases ended without a judgment, by reason.",
           _by("reason", ((reason, f"outcome.{o}") for o, reason in SHED_REASONS.items()))),
    Metric("shadowtrial.funnel.outcomes", "shadowtrial_funnel_outcomes_total", "counter", "{case}",
           "Exchange and trial pairs by funnel outcome, as this sidecar decided them.",
           _by("outcome", ((o, f"outcome.{o}") for o in OUTCOMES))),
    Metric("shadowtrial.judgments", "shadowtrial_judgments_total", "counter", "{judgment}",
           "Judgments by outcome: a verdict from the candidate's side, or why there was none.",
           _by("outcome", ((o, f"judgment.{o}") for o in JUDGMENT_OUTCOMES))),
    Metric("shadowtrial.provider.calls", "shadowtrial_provider_calls_total", "counter", "{call}",
           "Candidate and judge calls by role and result.",
           tuple(((("role", role), ("result", r)), f"call.{role}.{r}") for role in ROLES for r in CALL_RESULTS)),
    Metric("shadowtrial.tap.rejected", "shadowtrial_tap_rejected_total", "counter", "{request}",
           "Tap requests refused by reason.", _by("reason", ((r, f"tap_rejected_{r}") for r in TAP_REJECTED))),
    Metric("shadowtrial.tap.figures_excluded", "shadowtrial_tap_figures_excluded_total", "counter", "{figure}",
           "Gateway figures out of range, accepted as not reported, by field.",
           _by("field", ((f, f"tap_figures_excluded_{f}") for f in TAP_FIGURES))),
    Metric("shadowtrial.plugin.dropped", "shadowtrial_plugin_dropped_total", "counter", "{exchange}",
           "Exchanges gateway plugins dropped before the tap, by reason, as they report them.",
           _by("reason", ((r, f"plugin_dropped_{r}") for r in PLUGIN_DROP_REASONS))),
    Metric("shadowtrial.plugin.stats_ignored", "shadowtrial_plugin_stats_ignored_total", "counter", "{header}",
           "Plugin stats headers ignored as malformed.", _one("plugin_stats_ignored")),
    Metric("shadowtrial.litellm_webhook.skipped", "shadowtrial_litellm_webhook_skipped_total", "counter", "{entry}",
           "LiteLLM webhook entries not taken as exchanges, by reason.",
           _by("reason", ((r, f"litellm_webhook_skipped_{r}") for r in WEBHOOK_SKIPS))),
    Metric("shadowtrial.otlp.spans", "shadowtrial_otlp_spans_total", "counter", "{span}",
           "Spans the tap's OTLP receiver took, by outcome (exchange: a chat span handed to intake).",
           _by("outcome", ((o, f"otlp_spans_{o}") for o in OTLP_SPAN_OUTCOMES))),
    Metric("shadowtrial.retention.exchanges", "shadowtrial_retention_exchanges_total", "counter", "{exchange}",
           "Exchanges offered to the retention window, by what became of them (evictions oldest first).",
           _by("outcome", ((e, f"retention_{e}") for e in RETENTION_EVENTS))),
    Metric("shadowtrial.compare.requests", "shadowtrial_compare_requests_total", "counter", "{request}",
           "Compare requests by result (nothing of a compare is kept).",
           _by("result", ((r, f"compare_{r}") for r in COMPARE_RESULTS))),
    Metric("shadowtrial.intake.queue.depth", "shadowtrial_intake_queue_depth", "gauge", "{case}",
           "Cases waiting in the intake queue.", _one("queue_depth")),
    Metric("shadowtrial.cases.in_flight", "shadowtrial_cases_in_flight", "gauge", "{case}",
           "Cases being dispatched or judged.", _one("in_flight")),
    Metric("shadowtrial.trials.running", "shadowtrial_running_trials", "gauge", "{trial}",
           "Trials running.", _one("running_trials")),
    Metric("shadowtrial.uplink.outbox.depth", "shadowtrial_uplink_outbox_depth", "gauge", "{record}",
           "Records in the uplink's outbox not yet acknowledged by the collector (0 without an uplink).",
           _one("outbox_depth")),
    Metric("shadowtrial.uplink.records.delivered", "shadowtrial_uplink_records_delivered_total", "counter",
           "{record}", "Outbox records the collector acknowledged or refused, so deleted, by this process.",
           _one("outbox_delivered")),
    Metric("shadowtrial.evaluation.spend.known", "shadowtrial_evaluation_spend_known_micros", "gauge",
           "{micro-dollar}", "Known evaluation spend at list price, micro-dollars.", _one("spend.known")),
    Metric("shadowtrial.evaluation.spend.reserved", "shadowtrial_evaluation_spend_reserved_micros", "gauge",
           "{micro-dollar}", "Open reservations, micro-dollars.", _one("spend.reserved")),
    Metric("shadowtrial.evaluation.unpriced_calls", "shadowtrial_evaluation_unpriced_calls", "gauge", "{call}",
           "Calls whose cost is unknown (held at worst case).", _one("spend.unknown_calls")),
)
