"""The spans of a case: one per case, a child per judgment, and a client span per model call
(:mod:`sidecar.telemetry.provider`).

::

    shadowtrial.case                      trial, case, judge version, outcome, spend
    ├── chat <candidate model>            role=candidate, GenAI attributes
    ├── shadowtrial.judge                 order, audit, outcome; gen_ai.evaluation.result event
    │   ├── chat <judge model>            role=judge
    │   └── chat <judge model>            role=judge (the retry asking for the label, if any)
    └── shadowtrial.judge                 (the position-bias audit, for audited cases)

When the exchange carries the gateway's W3C ``traceparent`` the case span is its child, so
the case shows up in the gateway's trace under the request it copies, and is traced when the
gateway sampled it; other cases are traced with probability ``sample_ratio``. Only the
parsed ids are used: a value that is not a valid ``traceparent`` is ignored.

No text a caller or a model wrote goes into a span: attribute values are identities the
sidecar made, configured model names, numbers, and the closed vocabularies of
:mod:`sidecar.telemetry.names`. Exceptions are never recorded on a span (their messages can
echo content); an error is its type or its code. Every helper takes ``tracer=None`` (no
tracing) and then does nothing at all beyond yielding a non-recording span.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import Callable, Iterator

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.telemetry import names as n

#: A ``traceparent`` is 55 characters; anything much longer is not one and is not parsed.
MAX_TRACEPARENT = 256
_PROPAGATOR = TraceContextTextMapPropagator()
#: Case outcomes shown as an error status.
FAILED = frozenset({"candidate_failed", "judge_failed", "indeterminate"})
#: The non-recording span the helpers yield when nothing is traced.
NOT_TRACED: Span = trace.INVALID_SPAN


def gateway_context(traceparent: str | None) -> Context | None:
    """The gateway's span as a remote parent, or None when absent or not a valid ``traceparent``."""
    if not traceparent or len(traceparent) > MAX_TRACEPARENT:
        return None
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    return ctx if trace.get_current_span(ctx).get_span_context().is_valid else None


def traced(parent: Context | None, sample_ratio: float, draw: Callable[[], float] = random.random) -> bool:
    """Whether a case is traced: as the gateway decided (its sampled flag), else with
    probability ``sample_ratio``. Decided here, before any span exists, because the SDK
    costs tens of microseconds even for a span it then drops; the provider's own sampler
    only follows this decision (:mod:`sidecar.telemetry.sdk`)."""
    if parent is not None:
        return bool(trace.get_current_span(parent).get_span_context().trace_flags.sampled)
    return sample_ratio >= 1.0 or draw() < sample_ratio


def recording() -> bool:
    """Whether the current span is recorded: a case that is not traced starts no child span."""
    return trace.get_current_span().is_recording()


@contextmanager
def case_span(
    tracer: Tracer | None, *, sample_ratio: float, trial_id: str, case_id: str, kind: str, judge_version: str,
    traceparent: str | None,
) -> Iterator[Span]:
    """The case's span, current for what runs inside (its calls become its children); a
    non-recording span, and nothing current, when the case is not traced."""
    parent = gateway_context(traceparent) if tracer is not None else None
    if tracer is None or not traced(parent, sample_ratio):
        yield NOT_TRACED
        return
    with tracer.start_as_current_span(
        n.CASE_SPAN,
        context=parent,
        kind=SpanKind.INTERNAL,
        attributes={n.TRIAL_ID: trial_id, n.CASE_ID: case_id, n.SUBJECT_KIND: kind, n.JUDGE_VERSION: judge_version},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def end_case(
    span: Span, outcome: str, *, audited: bool | None = None, reserved: int | None = None, charged: int | None = None
) -> None:
    """The case's outcome (a funnel outcome, or ``duplicate``) and spend on its span."""
    if not span.is_recording():
        return
    span.set_attribute(n.CASE_OUTCOME, outcome)
    if audited is not None:
        span.set_attribute(n.CASE_AUDITED, audited)
    if reserved is not None:
        span.set_attribute(n.CASE_RESERVED, reserved)
    if charged is not None:
        span.set_attribute(n.CASE_CHARGED, charged)
    if outcome in FAILED:
        span.set_status(Status(StatusCode.ERROR))
        span.set_attribute(n.ERROR_TYPE, outcome)


def unexpected(span: Span, exc: BaseException) -> None:
    """An error nobody planned for: its type on the span, never its message."""
    if span.is_recording():
        span.set_attribute(n.ERROR_TYPE, type(exc).__name__)


@contextmanager
def judge_span(tracer: Tracer | None, *, order: str, audit: bool, judge_version: str) -> Iterator[Span]:
    """One judgment's span, current for the judge's model calls (none when the case is not traced)."""
    if tracer is None or not recording():
        yield NOT_TRACED
        return
    with tracer.start_as_current_span(
        n.JUDGE_SPAN,
        kind=SpanKind.INTERNAL,
        attributes={n.JUDGE_ORDER: order, n.JUDGE_AUDIT: audit, n.JUDGE_VERSION: judge_version},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def end_judgment(span: Span, *, outcome: str, score: int | None, calls: int) -> None:
    """A judgment's outcome (:data:`~sidecar.telemetry.names.JUDGMENT_OUTCOMES`) and its
    GenAI evaluation event; the judge's rationale is never exported."""
    if not span.is_recording():
        return
    span.set_attribute(n.JUDGE_OUTCOME, outcome)
    span.set_attribute(n.JUDGE_CALLS, calls)
    event: dict[str, str | int] = {n.GEN_AI_EVALUATION_NAME: n.PAIRED_EVALUATION, n.GEN_AI_EVALUATION_SCORE_LABEL: outcome}
    if score is not None:
        event[n.GEN_AI_EVALUATION_SCORE_VALUE] = score
    else:
        event[n.ERROR_TYPE] = outcome
        span.set_attribute(n.ERROR_TYPE, outcome)
        span.set_status(Status(StatusCode.ERROR))
    span.add_event(n.GEN_AI_EVALUATION_RESULT, event)
