"""Builders of OTLP export requests for the tests: GenAI spans in each convention the tap reads."""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

START_NS = 1_764_633_600_000_000_000  # 2025-12-02T00:00:00Z


def any_value(value: Any) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, (list, tuple)):
        return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))
    return AnyValue(string_value=str(value))


def key_values(attrs: Mapping[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=any_value(v)) for k, v in attrs.items()]


def span(i: int, attrs: Mapping[str, Any], *, events: Sequence[tuple[str, Mapping[str, Any]]] = (),
         latency_ms: int = 250, name: str = "chat inc-model") -> Span:
    return Span(
        trace_id=(i + 1).to_bytes(16, "big"), span_id=(i + 1).to_bytes(8, "big"), name=name, kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=START_NS, end_time_unix_nano=START_NS + latency_ms * 1_000_000,
        attributes=key_values(attrs),
        events=[Span.Event(name=n, time_unix_nano=START_NS, attributes=key_values(a)) for n, a in events],
    )


def export(spans: list[Span], resource: Mapping[str, Any] | None = None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.extend(key_values(resource if resource is not None else
                                             {"service.name": "gw-1", "shadowtrial.team": "team-a"}))
    rs.scope_spans.add().spans.extend(spans)
    return request


def semconv_chat(i: int, *, model: str = "inc-model", content: bool = True, **extra: Any) -> dict[str, Any]:
    """A chat span's attributes in the current GenAI conventions (messages as JSON attributes)."""
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": model, "gen_ai.response.model": model + "-2025",
        "gen_ai.request.max_tokens": 64, "gen_ai.request.temperature": 0.2,
        "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 20,
        "gen_ai.response.finish_reasons": ["stop"],
    }
    if content:
        attrs["gen_ai.input.messages"] = json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": f"question {i}"}]}])
        attrs["gen_ai.output.messages"] = json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": f"answer {i} ⟨q=0.500⟩"}],
              "finish_reason": "stop"}])
    attrs.update(extra)
    return attrs


def openllmetry_chat(i: int, *, model: str = "inc-model") -> dict[str, Any]:
    """OpenLLMetry's indexed attributes."""
    return {
        "llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "be brief",
        "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": f"question {i}",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": f"answer {i} ⟨q=0.500⟩",
        "gen_ai.completion.0.finish_reason": "stop",
        "gen_ai.usage.prompt_tokens": 12, "gen_ai.usage.completion_tokens": 20,
    }


def openinference_chat(i: int, *, model: str = "inc-model") -> dict[str, Any]:
    return {
        "openinference.span.kind": "LLM", "llm.model_name": model,
        "llm.invocation_parameters": json.dumps({"temperature": 0.1, "max_tokens": 32}),
        "llm.input_messages.0.message.role": "user", "llm.input_messages.0.message.content": f"question {i}",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.content": f"answer {i} ⟨q=0.500⟩",
        "llm.token_count.prompt": 12, "llm.token_count.completion": 20,
    }


def event_chat(i: int, *, model: str = "inc-model") -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    """The event form: gen_ai.*.message and gen_ai.choice span events."""
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": model}
    events: list[tuple[str, dict[str, Any]]] = [
        ("gen_ai.system.message", {"gen_ai.event.content": json.dumps({"content": "be brief"})}),
        ("gen_ai.user.message", {"content": f"question {i}"}),
        ("gen_ai.choice", {"gen_ai.event.content": json.dumps(
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant",
                                                               "content": f"answer {i} ⟨q=0.500⟩"}})}),
    ]
    return attrs, events
