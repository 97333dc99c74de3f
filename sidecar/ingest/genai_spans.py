"""GenAI spans to exchanges: what the OTLP receiver hands to intake.

A span is an LLM chat call when it says so in one of the conventions in use:
``gen_ai.operation.name`` = ``chat`` / ``text_completion`` / ``generate_content`` (the
OpenTelemetry GenAI semantic conventions), OpenLLMetry's ``llm.request.type`` = ``chat`` /
``completion`` (LiteLLM's ``otel`` callback: ``acompletion``), or OpenInference's
``openinference.span.kind`` = ``LLM``. Any other span (an HTTP server span, an embeddings
call, a tool) is counted ``not_llm`` and ignored.

Each chat span becomes one :class:`~sidecar.ingest.wire.Exchange`, in two steps so that a
stream of unsampled spans costs little (:func:`read_spans`):

1. **cheap**: the span's attribute keys, its team, gateway, model and whether it carries
   message content at all, give a *skeleton* exchange: enough to match the routing table
   and decide sampling (:func:`policies.sampling.is_sampled`, the same keyed hash intake
   applies). A span without message content (capture off) is ``redacted``: counted
   ``skipped_redacted`` by intake, never sampled.
2. **content**, only for a span some trial samples (or every span, when the retention
   window keeps them all): the messages and parameters of the request, the served answer,
   finish reason, usage, latency from the span's times, ``traceparent`` from its ids.

Messages are read from, in this order: ``gen_ai.input.messages`` / ``gen_ai.output.messages``
(and ``gen_ai.system_instructions``), JSON strings of role + parts; OpenLLMetry's indexed
``gen_ai.prompt.N.*`` / ``gen_ai.completion.N.*``; OpenInference's
``llm.input_messages.N.message.*`` / ``llm.output_messages.N.message.*``; span events
``gen_ai.{system,user,assistant,tool}.message`` / ``gen_ai.choice`` (their body in the
``gen_ai.event.content`` attribute as JSON, or ``content`` / ``role`` attributes), and the
older ``gen_ai.content.prompt`` / ``gen_ai.content.completion`` events.

The team is never a span attribute a caller can set unless the operator names one
(:class:`sidecar.config.otlp.OtlpConfig`). ``exchange_id`` is ``<trace id>-<span id>`` in hex.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import msgspec

from policies.sampling import is_sampled
from sidecar.config.otlp import OtlpConfig
from sidecar.ingest.routing import Routes
from sidecar.ingest.screen import MAX_NESTING, Screened, screen_batch
from sidecar.ingest.wire import DecodeError, Exchange, ExchangeRequest, ExchangeResponse, Usage, encode

#: Outcomes of a span counted here (intake counts the rest per trial: not_sampled, skipped_redacted, ...).
SPAN_OUTCOMES = ("exchange", "not_llm", "skipped_redacted", "unattributed", "invalid")

_CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
#: OpenLLMetry writes chat / completion; LiteLLM's ``otel`` callback its call type (acompletion).
_LEGACY_TYPES = frozenset({"chat", "completion", "acompletion"})
_MESSAGE_EVENTS = {
    "gen_ai.system.message": "system", "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool",
}
_CHOICE_EVENT = "gen_ai.choice"
_LEGACY_PROMPT_EVENT = "gen_ai.content.prompt"
_LEGACY_COMPLETION_EVENT = "gen_ai.content.completion"
_INPUT_KEYS = ("gen_ai.input.messages", "gen_ai.prompt.0.content", "gen_ai.prompt.0.role",
               "llm.input_messages.0.message.content", "llm.input_messages.0.message.role", "gen_ai.prompt")
#: gen_ai.request.* → the exchange's params (OpenAI names).
_PARAMS = {
    "gen_ai.request.temperature": "temperature", "gen_ai.request.top_p": "top_p",
    "gen_ai.request.max_tokens": "max_tokens", "gen_ai.request.frequency_penalty": "frequency_penalty",
    "gen_ai.request.presence_penalty": "presence_penalty", "gen_ai.request.stop_sequences": "stop",
    "gen_ai.request.seed": "seed", "gen_ai.openai.request.seed": "seed",
}
_INT_PARAMS = frozenset({"max_tokens", "seed"})
#: Deepest AnyValue nesting turned into Python values (protobuf's parser allows 100).
_MAX_VALUE_DEPTH = MAX_NESTING


@dataclass
class SpanBatch:
    """What an export request's spans gave: skeletons (not sampled by any trial), full
    exchanges, per-span outcome counts, and the reasons spans were rejected."""

    exchanges: list[Exchange] = field(default_factory=list)
    skeletons: list[Exchange] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    excluded: Counter[str] = field(default_factory=Counter)
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def rejected(self) -> int:
        return self.outcomes["unattributed"] + self.outcomes["invalid"]

    def reject(self, outcome: str, reason: str) -> None:
        self.outcomes[outcome] += 1
        self.reasons.setdefault(outcome, reason)

    def screened(self) -> Screened:
        return Screened(self.exchanges, self.excluded)


def read_spans(
    request: Any, routes: Routes, settings: OtlpConfig, *, jwt_teams: frozenset[str] | None, decode_all: bool = False,
) -> SpanBatch:
    """Turn every chat span of an ``ExportTraceServiceRequest`` into an exchange (see the module docstring).

    ``decode_all``: read every span's content, sampled or not (the retention window keeps them)."""
    out = SpanBatch()
    jwt_team = next(iter(jwt_teams)) if jwt_teams is not None and len(jwt_teams) == 1 else None
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        team = _string(resource, settings.team_resource_attribute) if settings.team_resource_attribute else None
        team = team or jwt_team
        gateway = _string(resource, settings.gateway_resource_attribute) or settings.default_gateway
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                _read_span(span, team, gateway, routes, settings, decode_all, out)
    return out


def _read_span(
    span: Any, team: str | None, gateway: str, routes: Routes, settings: OtlpConfig, decode_all: bool, out: SpanBatch,
) -> None:
    attrs = _attributes(span.attributes)
    if not _is_chat(attrs):
        out.outcomes["not_llm"] += 1
        return
    if team is None and settings.team_span_attribute:
        team = _string(attrs, settings.team_span_attribute)
    if not team:
        out.reject("unattributed", "no team: set the resource attribute "
                   f"{settings.team_resource_attribute or '(otlp.team_resource_attribute)'} or send a gateway JWT "
                   "with one team")
        return
    model = _string(attrs, "gen_ai.request.model") or _string(attrs, "llm.model_name") or _string(
        attrs, "gen_ai.response.model")
    if not model:
        out.reject("invalid", "a chat span without gen_ai.request.model")
        return
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        out.reject("invalid", "a span without a 16-byte trace id and an 8-byte span id")
        return
    exchange_id = f"{span.trace_id.hex()}-{span.span_id.hex()}"
    redacted = not _has_content(attrs, span.events)
    skeleton = Exchange(exchange_id=exchange_id, team=team, model=model, request=_NO_REQUEST,
                        response=_NO_RESPONSE, gateway=gateway, redacted=redacted)
    if redacted:
        out.outcomes["skipped_redacted"] += 1
        out.skeletons.append(skeleton)
        return
    if not decode_all and not any(is_sampled(r.trial_id, exchange_id, r.sample_rate) for r in routes.match(skeleton)):
        out.outcomes["exchange"] += 1
        out.skeletons.append(skeleton)
        return
    try:
        exchange = _full(span, attrs, skeleton)
        screened = screen_batch([("$", exchange)])
    except (DecodeError, _Unreadable) as exc:
        out.reject("invalid", f"a chat span whose content cannot be used ({exc})")
        return
    except RecursionError:
        out.reject("invalid", "a chat span whose content is nested too deeply")
        return
    out.outcomes["exchange"] += 1
    out.exchanges.extend(screened.exchanges)
    out.excluded.update(screened.excluded)


_NO_REQUEST = ExchangeRequest(messages=[])
_NO_RESPONSE = ExchangeResponse()


class _Unreadable(ValueError):
    """A span's content attribute that is not what its convention says (the message names it, never its value)."""


# --- the cheap step -------------------------------------------------------------------------------


def _attributes(key_values: Iterable[Any]) -> dict[str, Any]:
    """Attribute key → its ``KeyValue`` message, unconverted (the last of a repeated key wins).

    The value is read only when used (:func:`_get`): each message the protobuf runtime hands
    to Python costs about a microsecond, and most of a span's values are never looked at."""
    return {kv.key: kv for kv in key_values}


def _get(attrs: Mapping[str, Any], key: str) -> Any:
    """The ``AnyValue`` of attribute ``key``, or None."""
    kv = attrs.get(key)
    return None if kv is None else kv.value


def _string(attrs: Mapping[str, Any], key: str) -> str | None:
    value = _get(attrs, key)
    if value is None or value.WhichOneof("value") != "string_value":
        return None
    text: str = value.string_value
    return text or None


def _is_chat(attrs: Mapping[str, Any]) -> bool:
    operation = _string(attrs, "gen_ai.operation.name")
    if operation is not None:
        return operation in _CHAT_OPERATIONS
    legacy = _string(attrs, "llm.request.type")
    if legacy is not None:
        return legacy in _LEGACY_TYPES
    kind = _string(attrs, "openinference.span.kind")
    return kind is not None and kind.upper() == "LLM"


def _has_content(attrs: Mapping[str, Any], events: Any) -> bool:
    if any(key in attrs for key in _INPUT_KEYS):
        return True
    return any(e.name in _MESSAGE_EVENTS or e.name == _LEGACY_PROMPT_EVENT for e in events)


# --- the content step -----------------------------------------------------------------------------


def _full(span: Any, attrs: Mapping[str, Any], skeleton: Exchange) -> Exchange:
    events = [(e.name, _attributes(e.attributes)) for e in span.events]
    messages = _input_messages(attrs, events)
    if not messages:
        raise _Unreadable("no input message could be read")
    content, finish = _output(attrs, events)
    finishes = _plain(_get(attrs, "gen_ai.response.finish_reasons"))
    if isinstance(finishes, list) and finishes and isinstance(finishes[0], str):
        finish = finishes[0]
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    latency = (end - start) / 1e6 if start and end >= start else None
    served_at = _rfc3339(end) if end else None
    usage = Usage(
        input_tokens=_int(attrs, "gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"),
        output_tokens=_int(attrs, "gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens",
                           "llm.token_count.completion"),
    )
    return msgspec.structs.replace(
        skeleton,
        request=ExchangeRequest(messages=messages, params=_params(attrs)),
        response=ExchangeResponse(content=content, finish_reason=finish, usage=usage),
        served_at=served_at, latency_ms=latency,
        traceparent=f"00-{span.trace_id.hex()}-{span.span_id.hex()}-01",
    )


def _plain(value: Any, depth: int = 0) -> Any:
    """An ``AnyValue`` as a Python value (None when absent or empty).

    Raises :class:`_Unreadable` past the depth bound."""
    if value is None:
        return None
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind in ("array_value", "kvlist_value"):
        if depth >= _MAX_VALUE_DEPTH:
            raise _Unreadable(f"an attribute nested more than {_MAX_VALUE_DEPTH} levels")
        if kind == "array_value":
            return [_plain(v, depth + 1) for v in value.array_value.values]
        return {kv.key: _plain(kv.value, depth + 1) for kv in value.kvlist_value.values}
    if kind == "bytes_value":
        return None
    return getattr(value, kind)


def _int(attrs: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = _plain(_get(attrs, key))
        if type(value) is int:
            return value
        if type(value) is float and value.is_integer():
            return int(value)
    return None


def _params(attrs: Mapping[str, Any]) -> dict[str, Any]:
    params: dict[str, Any] = {}
    invocation = _json(attrs, "llm.invocation_parameters")  # OpenInference: the request's own parameters
    if isinstance(invocation, dict):
        for name in ("temperature", "top_p", "max_tokens", "max_completion_tokens", "frequency_penalty",
                     "presence_penalty", "stop", "seed"):
            if name in invocation:
                params[name] = invocation[name]
    for key, name in _PARAMS.items():
        value = _plain(_get(attrs, key))
        if value is None:
            continue
        if name in _INT_PARAMS and type(value) is float and value.is_integer():
            value = int(value)
        params[name] = value
    return params


def _json(attrs: Mapping[str, Any], key: str) -> Any:
    value = _get(attrs, key)
    if value is None:
        return None
    kind = value.WhichOneof("value")
    if kind != "string_value":  # some SDKs write the structure itself
        return _plain(value)
    try:
        return msgspec.json.decode(value.string_value)
    except msgspec.DecodeError:
        raise _Unreadable(f"{key} is not JSON") from None


def _text_of_parts(parts: Any) -> tuple[str | None, list[dict[str, Any]], list[tuple[str, str]]]:
    """(text, tool calls, tool responses) of a GenAI message's ``parts``."""
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    responses: list[tuple[str, str]] = []
    if not isinstance(parts, list):
        raise _Unreadable("a message's parts must be an array")
    for part in parts:
        if not isinstance(part, dict):
            raise _Unreadable("a message part must be an object")
        kind = part.get("type")
        if kind == "text" or (kind is None and "content" in part):
            if isinstance(part.get("content"), str):
                texts.append(part["content"])
        elif kind == "tool_call":
            arguments = part.get("arguments")
            calls.append({"id": str(part.get("id") or ""), "type": "function", "function": {
                "name": str(part.get("name") or ""),
                "arguments": arguments if isinstance(arguments, str) else encode(arguments).decode()}})
        elif kind == "tool_call_response":
            response = part.get("response")
            responses.append((str(part.get("id") or ""),
                              response if isinstance(response, str) else encode(response).decode()))
    return ("".join(texts) if texts else None), calls, responses


def _semconv_messages(raw: Any, key: str) -> list[dict[str, Any]]:
    """``gen_ai.input.messages`` (role + parts) as OpenAI chat messages (already-OpenAI messages pass)."""
    if not isinstance(raw, list):
        raise _Unreadable(f"{key} must be an array of messages")
    out: list[dict[str, Any]] = []
    for message in raw:
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _Unreadable(f"{key}: a message must be an object with a role")
        if "parts" not in message:
            out.append(message)
            continue
        text, calls, responses = _text_of_parts(message["parts"])
        for call_id, content in responses:
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        if responses and text is None and not calls:
            continue
        converted: dict[str, Any] = {"role": message["role"], "content": text}
        if calls:
            converted["tool_calls"] = calls
        out.append(converted)
    return out


def _input_messages(attrs: Mapping[str, Any], events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    raw = _json(attrs, "gen_ai.input.messages")
    if raw is not None:
        semconv = _semconv_messages(raw, "gen_ai.input.messages")
        system = _json(attrs, "gen_ai.system_instructions")
        if system is not None:
            text, _, _ = _text_of_parts(system if isinstance(system, list) else [system])
            if text is not None:
                semconv.insert(0, {"role": "system", "content": text})
        return semconv
    indexed = _indexed(attrs, "gen_ai.prompt.{}.", "")
    if indexed:
        return indexed
    indexed = _indexed(attrs, "llm.input_messages.{}.", "message.")
    if indexed:
        return indexed
    messages: list[dict[str, Any]] = []
    for name, event_attrs in events:
        role = _MESSAGE_EVENTS.get(name)
        if role is not None:
            messages.append(_event_message(event_attrs, role))
        elif name == _LEGACY_PROMPT_EVENT:
            raw = _json(event_attrs, "gen_ai.prompt")
            if raw is not None:
                return _semconv_messages(raw, "gen_ai.prompt")
    if not messages:
        raw = _json(attrs, "gen_ai.prompt")
        if raw is not None:
            return _semconv_messages(raw, "gen_ai.prompt")
    return messages


def _indexed(attrs: Mapping[str, Any], prefix: str, inner: str) -> list[dict[str, Any]]:
    """OpenLLMetry's ``gen_ai.prompt.N.role`` / ``.content`` / ``.tool_calls.M.*`` / ``.tool_call_id``
    (OpenInference's ``llm.input_messages.N.message.*`` with ``inner`` = ``message.``)."""
    messages: list[dict[str, Any]] = []
    n = 0
    while True:
        head = prefix.format(n) + inner
        role = _plain(_get(attrs, head + "role"))
        content = _plain(_get(attrs, head + "content"))
        if role is None and content is None:
            return messages
        message: dict[str, Any] = {"role": role if isinstance(role, str) else "user",
                                   "content": content if isinstance(content, str) or content is None
                                   else encode(content).decode()}
        calls = []
        m = 0
        while (name := _plain(_get(attrs, f"{head}tool_calls.{m}.name"))) is not None:
            arguments = _plain(_get(attrs, f"{head}tool_calls.{m}.arguments"))
            calls.append({"id": str(_plain(_get(attrs, f"{head}tool_calls.{m}.id")) or ""), "type": "function",
                          "function": {"name": str(name), "arguments": arguments if isinstance(arguments, str)
                                       else encode(arguments).decode()}})
            m += 1
        if calls:
            message["tool_calls"] = calls
        call_id = _plain(_get(attrs, head + "tool_call_id"))
        if isinstance(call_id, str):
            message["tool_call_id"] = call_id
        messages.append(message)
        n += 1


def _event_body(event_attrs: Mapping[str, Any]) -> dict[str, Any]:
    body = _json(event_attrs, "gen_ai.event.content")
    if body is None:
        body = {key: _plain(kv.value) for key, kv in event_attrs.items()}
    if not isinstance(body, dict):
        raise _Unreadable("a GenAI event's body must be an object")
    return body


def _event_message(event_attrs: Mapping[str, Any], role: str) -> dict[str, Any]:
    body = _event_body(event_attrs)
    content = body.get("content")
    message: dict[str, Any] = {"role": body.get("role") if isinstance(body.get("role"), str) else role,
                               "content": content if isinstance(content, str) or content is None
                               else encode(content).decode()}
    if isinstance(body.get("tool_calls"), list):
        message["tool_calls"] = body["tool_calls"]
    if isinstance(body.get("id"), str) and role == "tool":
        message["tool_call_id"] = body["id"]
    return message


def _output(attrs: Mapping[str, Any], events: list[tuple[str, dict[str, Any]]]) -> tuple[str | None, str | None]:
    """(served answer, finish reason) from the first output message, in the module's order of conventions."""
    raw = _json(attrs, "gen_ai.output.messages")
    if raw is not None:
        if not isinstance(raw, list):
            raise _Unreadable("gen_ai.output.messages must be an array of messages")
        if raw:
            first = raw[0]
            if not isinstance(first, dict):
                raise _Unreadable("gen_ai.output.messages: a message must be an object")
            if "parts" in first:
                text, _, _ = _text_of_parts(first["parts"])
            else:
                text = first.get("content") if isinstance(first.get("content"), str) else None
            finish = first.get("finish_reason")
            return text, finish if isinstance(finish, str) else None
        return None, None
    for head in ("gen_ai.completion.0.", "llm.output_messages.0.message."):
        content = _plain(_get(attrs, head + "content"))
        if content is not None or head + "role" in attrs:
            finish = _plain(_get(attrs, head + "finish_reason"))
            return (content if isinstance(content, str) else None), (finish if isinstance(finish, str) else None)
    for name, event_attrs in events:
        if name == _CHOICE_EVENT:
            body = _event_body(event_attrs)
            message = body.get("message")
            content = message.get("content") if isinstance(message, dict) else body.get("content")
            finish = body.get("finish_reason")
            return (content if isinstance(content, str) else None), (finish if isinstance(finish, str) else None)
        if name == _LEGACY_COMPLETION_EVENT:
            raw = _json(event_attrs, "gen_ai.completion")
            if isinstance(raw, list) and raw and isinstance(raw[0], dict):
                content = raw[0].get("content")
                return (content if isinstance(content, str) else None), None
    return None, None


def _rfc3339(unix_nano: int) -> str | None:
    try:
        moment = dt.datetime.fromtimestamp(unix_nano / 1e9, dt.timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
