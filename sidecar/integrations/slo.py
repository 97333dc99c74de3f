"""LiteLLM's StandardLoggingPayload → a tap exchange: the one mapping both LiteLLM paths use.

The plugin (:mod:`sidecar.integrations.litellm`) finds the payload in the kwargs of its
success hook; the webhook (:mod:`sidecar.integrations.litellm_webhook`) receives it from
LiteLLM's generic API logger. Both call :func:`to_exchange`. Pure (plain data in, plain data
out) and standard library only: it runs inside the gateway's environment too.

What the payload cannot be trusted for — found on a real LiteLLM 1.80.0 proxy — comes in
from the caller as a :class:`Context`, never from the payload:

- **team**: a request body with ``"litellm_metadata": {...}`` *replaces* the payload's whole
  ``metadata`` (team alias and id, key hash, ``model_group``), so no team field of the payload
  is key-derived. The plugin reads the team from ``kwargs["litellm_params"]["metadata"]``,
  which the proxy fills from the key after the body; the webhook takes it from its URL.
- **exchange id**: the payload's ``id`` is the upstream's response id, which repeats after an
  upstream restart (and a repeated id is dropped as a re-delivery). The plugin passes
  LiteLLM's own ``litellm_call_id``; the webhook, which has no call id in the payload, uses
  :func:`webhook_exchange_id`.
- **cost**: see :func:`known_cost` — unknown is never zero.
- **redaction**: LiteLLM 1.80.0 does not act on ``x-litellm-enable-message-redaction`` (its
  check reads an always-empty metadata field), so the header is checked here, as LiteLLM
  records request headers.
"""

from __future__ import annotations

import math
from math import isfinite
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Mapping

from policies.segments import MAX_TAG_VALUE_CHARS, tags_from_labels

#: What LiteLLM puts in place of content it must not log.
REDACTED = "redacted-by-litellm"
#: The header the sidecar sets on its own candidate and judge calls (``engine.shadow_header``).
SHADOW_HEADER = "x-shadowtrial-shadow"
#: The request headers that ask LiteLLM to keep a call's content out of its logs.
REDACTION_HEADERS = ("x-litellm-enable-message-redaction", "litellm-enable-message-redaction")
#: What every name of REDACTION_HEADERS contains (:func:`_header_flags`'s first look).
_REDACTION_PART = "message-redaction"
CHAT_CALL_TYPES = frozenset({"completion", "acompletion"})
#: Request parameters passed on to the tap (the candidate is called with them). An
#: allow-list, so that nothing else a request carried (user ids, metadata, provider
#: credentials, prices) leaves the gateway.
PARAMS = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n",
    "presence_penalty", "frequency_penalty", "logit_bias", "response_format",
    "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort",
})
#: Why an entry is not an exchange: not a chat completion, not a success, the sidecar's own
#: call, a field missing or of the wrong type, a value the tap would refuse.
SKIP_REASONS = ("not_chat", "failed", "shadow_call", "incomplete", "invalid")

# The tap's limits on what a candidate call is built from (sidecar.ingest.screen, which this
# module cannot import: it runs where msgspec is not installed). A test keeps them equal.
MAX_TOKENS_PARAM = 2**31 - 1
MAX_NESTING = 64
_ITEM_LEVEL = 4


@dataclass(frozen=True)
class Context:
    """What the caller of :func:`to_exchange` knows from outside the payload.

    ``exchange_id`` None: derive it from the payload (:func:`webhook_exchange_id`).
    ``model`` None: the payload's ``model_group``, else its ``model``. ``route`` None: the
    payload's ``metadata.user_api_key_request_route``. ``headers`` None: the payload's
    ``metadata.requester_custom_headers`` (the ``x-`` headers of the request).
    ``redacted``: redaction decided outside (LiteLLM's global or per-key switch).
    ``zero_cost_known``: the deployment's own configuration prices the call at zero.
    ``cost_trusted`` False: send no cost whatever the payload says."""

    team: str
    gateway: str
    exchange_id: str | None = None
    model: str | None = None
    route: str | None = None
    headers: Mapping[str, Any] | None = None
    redacted: bool = False
    zero_cost_known: bool = False
    cost_trusted: bool = True
    #: The key's alias, passed as the ``key_alias`` tag (None: the payload's ``user_api_key_alias``).
    key_alias: str | None = None


@dataclass(frozen=True)
class Skip:
    """An entry that is not sent as an exchange, and why (one of :data:`SKIP_REASONS`)."""

    reason: str


def to_exchange(slo: Mapping[str, Any], ctx: Context) -> dict[str, Any] | Skip:
    """The tap exchange for one StandardLoggingPayload, or why there is none.

    Never raises on odd input (any shape of ``slo``): what the tap would refuse is a
    :class:`Skip`, because the tap refuses a whole batch for one bad exchange."""
    # The payload's metadata only for what the caller did not give (the plugin gives it all).
    metadata = _dict(slo.get("metadata")) if ctx.headers is None or ctx.route is None or ctx.key_alias is None else _EMPTY
    return exchange_of(
        slo,
        ctx.team,
        ctx.gateway,
        ctx.exchange_id if ctx.exchange_id is not None else webhook_exchange_id(slo),
        ctx.model,
        ctx.route if ctx.route is not None else _text(metadata.get("user_api_key_request_route")),
        ctx.headers if ctx.headers is not None else _dict(metadata.get("requester_custom_headers")),
        ctx.redacted,
        ctx.zero_cost_known,
        ctx.cost_trusted,
        ctx.key_alias if ctx.key_alias is not None else metadata.get("user_api_key_alias"),
    )


_NOT_CHAT, _FAILED, _SHADOW_CALL = Skip("not_chat"), Skip("failed"), Skip("shadow_call")
_INCOMPLETE, _INVALID = Skip("incomplete"), Skip("invalid")


def exchange_of(
    slo: Mapping[str, Any],
    team: str,
    gateway: str,
    exchange_id: str | None,
    model: str | None,
    route: str | None,
    headers: Mapping[str, Any],
    redacted: bool,
    zero_cost_known: bool,
    cost_trusted: bool,
    key_alias: Any,
) -> dict[str, Any] | Skip:
    """:func:`to_exchange` with the :class:`Context` already resolved (``exchange_id``, ``route``,
    ``headers`` and ``key_alias`` as found; ``model`` None: the payload's ``model_group``, else
    its ``model``).

    The plugin calls this once per call in the gateway's event loop (issue 29): positional
    arguments, no Context, and each payload field looked up once."""
    get = slo.get
    call_type = get("call_type")
    if not isinstance(call_type, str) or call_type not in CHAT_CALL_TYPES:
        return _NOT_CHAT
    if get("status", "success") != "success":
        return _FAILED
    shadow, redaction_asked = _header_flags(headers)
    if shadow:
        return _SHADOW_CALL
    model = model or _text(get("model_group")) or _text(get("model"))
    messages = get("messages")
    response = get("response")
    if not exchange_id or not model or not isinstance(messages, list) or not isinstance(response, dict):
        return _INCOMPLETE
    # One pass over the messages (this runs in the gateway, per call): all objects, any
    # content LiteLLM redacted, any nested value (only then is the nesting walked below).
    nested = redacted_message = False
    for m in messages:
        if not isinstance(m, dict):
            return _INCOMPLETE
        if not nested:
            for v in m.values():
                if isinstance(v, (dict, list)):
                    nested = True
                    break
        if not redacted_message and m.get("content") == REDACTED:
            redacted_message = True
    choices = response.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else _EMPTY
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    finish_reason = choice.get("finish_reason")
    if not isinstance(finish_reason, str):
        finish_reason = None
    redacted = (
        redacted
        or redaction_asked
        or content == REDACTED
        or response.get("text") == REDACTED  # LiteLLM's whole response, redacted
        or redacted_message
    )
    params: dict[str, Any]
    if redacted:
        messages, params, content = [], {}, None
    else:
        if not choice or not (content is None or isinstance(content, str)):
            return _INCOMPLETE
        model_parameters = get("model_parameters")
        params = (
            {k: v for k, v in model_parameters.items() if k in PARAMS} if isinstance(model_parameters, dict) else {}
        )
        # Messages without a nested value cannot nest too deep: only the params are walked then.
        if (nested or params) and not _fit_for_the_tap(messages if nested else [], params):
            return _INVALID
    prompt_tokens, completion_tokens = get("prompt_tokens"), get("completion_tokens")
    usage: dict[str, Any] = {
        "input_tokens": prompt_tokens if type(prompt_tokens) is int and prompt_tokens >= 0 else None,
        "output_tokens": completion_tokens if type(completion_tokens) is int and completion_tokens >= 0 else None,
    }
    cost = known_cost(slo, zero_is_known=zero_cost_known, trusted=cost_trusted) if cost_trusted else None
    if cost is not None:
        usage["cost_usd"] = cost
    start, end = get("startTime"), get("endTime")
    if type(start) is not float or not isfinite(start):
        start = _seconds(start)
    if type(end) is not float or not isfinite(end):
        end = _seconds(end)
    labels = get("request_tags")
    if labels:
        tags, _cut = tags_from_labels(labels if isinstance(labels, list) else [], key_alias)
    else:  # no labels (the usual call): what tags_from_labels makes of the alias alone, without the call
        tags = {"key_alias": key_alias[:MAX_TAG_VALUE_CHARS]} if isinstance(key_alias, str) and key_alias else {}
    return {
        "exchange_id": exchange_id,
        "team": team,
        "gateway": gateway,
        "route": route or None,
        # The model as the gateway's callers name it (the trial's incumbent).
        "model": model,
        "request": {"messages": messages, "params": params},
        "response": {"content": content, "finish_reason": finish_reason, "usage": usage},
        "served_at": _iso(start),
        "latency_ms": (end - start) * 1000.0 if start is not None and end is not None else None,
        "redacted": redacted,
        # The request's metadata tags and the key's alias, for a trial's tag:NAME segments (issue 27).
        "tags": tags,
    }


def exchange_tags(slo: Mapping[str, Any], ctx: Context) -> dict[str, str]:
    """The exchange's ``tags``: LiteLLM's ``request_tags`` (the request's ``metadata.tags``) and
    the key's alias, within the tap's bounds (:func:`policies.segments.tags_from_labels`)."""
    labels = slo.get("request_tags")
    metadata = _dict(slo.get("metadata"))
    alias = ctx.key_alias if ctx.key_alias is not None else metadata.get("user_api_key_alias")
    tags, _cut = tags_from_labels(labels if isinstance(labels, list) else [], alias)
    return tags


def _tags(slo: Mapping[str, Any], ctx: Context, metadata: Mapping[str, Any]) -> dict[str, str]:
    """:func:`exchange_tags`, given the payload's metadata when the context has no alias."""
    labels = slo.get("request_tags")
    alias = ctx.key_alias if ctx.key_alias is not None else metadata.get("user_api_key_alias")
    if labels:
        tags, _cut = tags_from_labels(labels if isinstance(labels, list) else [], alias)
        return tags
    # No labels (the usual call): what tags_from_labels makes of the alias alone, without the call.
    return {"key_alias": alias[:MAX_TAG_VALUE_CHARS]} if isinstance(alias, str) and alias else {}


def known_cost(slo: Mapping[str, Any], *, zero_is_known: bool, trusted: bool = True) -> float | None:
    """The call's cost in US dollars as LiteLLM computed it, or None when it is not known.

    LiteLLM logs ``response_cost: 0.0`` with no failure information for a deployment missing
    from its price map, exactly as for one priced at zero, so a zero is a known cost only
    when ``zero_is_known`` (the deployment's own configuration says zero: the plugin can see
    it, the webhook cannot). Unknown as well: a call LiteLLM says it failed to price
    (``response_cost_failure_debug_info``), a cache hit (its zero is not the model's
    price), anything but a finite non-negative number, and everything when not ``trusted``."""
    if not trusted or slo.get("cache_hit") is True or slo.get("response_cost_failure_debug_info"):
        return None
    cost = _seconds(slo.get("response_cost"))  # a finite int or float, as a float
    if cost is None or cost < 0:
        return None
    if cost > 0:
        return cost
    return 0.0 if zero_is_known else None


def webhook_exchange_id(slo: Mapping[str, Any]) -> str | None:
    """An exchange id for a payload that arrived without LiteLLM's call id (the webhook).

    ``<trace_id>:<id>:<startTime>``: ``trace_id`` is LiteLLM's per-request id (but the
    caller's ``litellm_session_id`` when one was sent, shared by a session's calls), ``id``
    the upstream's response id (repeats after an upstream restart), ``startTime`` the call's
    start to the microsecond. Together they are distinct per call, and the same for a
    re-delivered payload. None without an ``id``."""
    response_id = _text(slo.get("id"))
    if not response_id:
        return None
    start = _seconds(slo.get("startTime"))
    trace = _text(slo.get("trace_id")) or ""
    return f"{trace}:{response_id}:{start:.6f}" if start is not None else f"{trace}:{response_id}"


def has_header(headers: Mapping[str, Any], names: tuple[str, ...]) -> bool:
    """Whether any of ``names`` (lower case) is among ``headers``, compared case-insensitively."""
    return any(str(k).lower() in names for k in headers)


def has_shadow_header(headers: Mapping[str, Any]) -> bool:
    """``has_header(headers, (SHADOW_HEADER,))``, looking name by name only when the names,
    lower-cased together, mention it (see :func:`_header_flags`)."""
    if SHADOW_HEADER not in "\n".join(map(str, headers)).lower():
        return False
    return any((k.lower() if type(k) is str else str(k).lower()) == SHADOW_HEADER for k in headers)


def _header_flags(headers: Mapping[str, Any]) -> tuple[bool, bool]:
    """:func:`has_header` for :data:`SHADOW_HEADER` and :func:`requests_redaction`, in one pass.

    Most requests carry neither header: one lower-cased string of all the names tells so in
    a few C calls (issue 29); only a request naming one of them is looked at name by name."""
    names = "\n".join(map(str, headers)).lower()
    if SHADOW_HEADER not in names and _REDACTION_PART not in names:
        return False, False
    shadow = redaction = False
    for k, v in headers.items():
        name = k.lower() if type(k) is str else str(k).lower()
        if name == SHADOW_HEADER:
            shadow = True
        elif name in REDACTION_HEADERS and bool(v):
            redaction = True
    return shadow, redaction


def requests_redaction(headers: Mapping[str, Any]) -> bool:
    """Whether the request asked LiteLLM to keep its content out of logs.

    As LiteLLM reads the header: present with any non-empty value (``false`` included)."""
    return any(str(k).lower() in REDACTION_HEADERS and bool(v) for k, v in headers.items())


def _fit_for_the_tap(messages: list[Any], params: Mapping[str, Any]) -> bool:
    """What the tap's screen refuses a whole batch for: a token limit out of range, nesting too deep."""
    for name in ("max_tokens", "max_completion_tokens"):
        value = params.get(name)
        if value is not None and not (type(value) is int and 1 <= value <= MAX_TOKENS_PARAM):
            return False
    room = MAX_NESTING - _ITEM_LEVEL
    for nodes in (messages, params.values()):
        for node in nodes:
            if isinstance(node, (dict, list)) and _deeper_than(node, room):
                return False
    return True


def _deeper_than(node: dict[str, Any] | list[Any], room: int) -> bool:
    """Whether ``node`` nests more than ``room`` levels below itself (iterative: any depth is safe)."""
    stack: list[tuple[Any, int]] = [(node, room)]
    while stack:
        current, left = stack.pop()
        for child in current.values() if isinstance(current, dict) else current:
            if isinstance(child, (dict, list)):
                if left == 0:
                    return True
                stack.append((child, left - 1))
    return False


_EMPTY: Mapping[str, Any] = {}


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else _EMPTY


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 0 else None


def _seconds(value: Any) -> float | None:
    """A finite JSON number as a float (not a bool, a string or NaN), else None."""
    if type(value) is not int and type(value) is not float:
        return None
    try:
        number = float(value)
    except OverflowError:  # an int beyond a float's range
        return None
    return number if math.isfinite(number) else None


def _iso(epoch: float | None) -> str | None:
    if epoch is None:
        return None
    try:
        return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat().replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return None
