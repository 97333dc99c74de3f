"""A provider client whose calls are counted and, when traced, each a GenAI client span.

:class:`InstrumentedProvider` wraps any :class:`~sidecar.providers.base.Provider` for one
role (the candidate, or the judge). Every call adds one to ``call.<role>.<result>``; with a
tracer, and a recorded span current (the case's, or a judgment's), it is also a span
``chat <model>`` (kind CLIENT) under it, with the GenAI semantic-convention attributes that fit and a
``traceparent`` header on the outgoing request, so a gateway or provider that traces can
join the case's trace.

What a span carries: the configured upstream model name, the provider kind, the role, the
numeric request parameters ``max_tokens`` and ``temperature`` when they are numbers, the
usage the provider reported, the finish reason folded into a fixed set, the number of HTTP
attempts (retries show as ``shadowtrial.call.attempts`` > 1), and the error kind. Never a
message, an answer, a parameter that is text, or a header value.
"""

from __future__ import annotations

from typing import Any, Mapping

import msgspec
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from sidecar.providers.base import ChatRequest, Provider, ProviderResult
from sidecar.telemetry import names as n
from sidecar.telemetry.spans import recording
from sidecar.telemetry.tally import Tally

_PROPAGATOR = TraceContextTextMapPropagator()


class InstrumentedProvider:
    """``provider`` for ``role``: same contract (never raises for a remote outcome), counted,
    traced with ``tracer`` (None: counted only). ``system`` is the provider's kind
    (``openai``, ``anthropic``), the value of ``gen_ai.provider.name``."""

    def __init__(self, provider: Provider, *, role: n.Role, system: str, tally: Tally, tracer: Tracer | None) -> None:
        self._inner = provider
        self._role: n.Role = role
        self._system = system
        self._tally = tally
        self._tracer = tracer

    async def chat(self, request: ChatRequest) -> ProviderResult:
        if self._tracer is None or not recording():  # no tracing, or a case that is not traced
            result = await self._inner.chat(request)
            self._tally.call(self._role, result.error)
            return result
        with self._tracer.start_as_current_span(
            f"{n.CHAT_OPERATION} {request.model}",
            kind=SpanKind.CLIENT,
            attributes=self._request_attributes(request),
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            if span.is_recording():
                carrier: dict[str, str] = {}
                _PROPAGATOR.inject(carrier)
                request = msgspec.structs.replace(request, headers={**request.headers, **carrier})
            result = await self._inner.chat(request)
            self._tally.call(self._role, result.error)
            if span.is_recording():
                span.set_attributes(_result_attributes(result))
                if not result.ok:
                    span.set_status(Status(StatusCode.ERROR))
        return result

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _request_attributes(self, request: ChatRequest) -> dict[str, Any]:
        attrs: dict[str, Any] = {
            n.GEN_AI_OPERATION_NAME: n.CHAT_OPERATION,
            n.GEN_AI_REQUEST_MODEL: request.model,
            n.GEN_AI_PROVIDER_NAME: self._system,
            n.GEN_AI_SYSTEM: self._system,
            n.CALL_ROLE: self._role,
        }
        _number(attrs, n.GEN_AI_REQUEST_MAX_TOKENS, request.params, "max_tokens")
        _number(attrs, n.GEN_AI_REQUEST_TEMPERATURE, request.params, "temperature")
        return attrs


def _number(attrs: dict[str, Any], key: str, params: Mapping[str, Any], name: str) -> None:
    """Copy a numeric request parameter; anything else (a string, a list) is left out."""
    value = params.get(name)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        attrs[key] = value


def _result_attributes(result: ProviderResult) -> dict[str, Any]:
    attrs: dict[str, Any] = {n.CALL_ATTEMPTS: result.attempts}
    if result.finish_reason is not None:
        attrs[n.GEN_AI_RESPONSE_FINISH_REASONS] = (n.finish_reason(result.finish_reason),)
    if result.input_tokens is not None:
        attrs[n.GEN_AI_USAGE_INPUT_TOKENS] = result.input_tokens
    if result.output_tokens is not None:
        attrs[n.GEN_AI_USAGE_OUTPUT_TOKENS] = result.output_tokens
    if result.error is not None:
        attrs[n.ERROR_TYPE] = result.error
    return attrs
