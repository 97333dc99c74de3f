"""Client for Anthropic's ``/v1/messages``, fed OpenAI-shape requests.

The conversion, both ways:

- ``system`` (and ``developer``) messages → the top-level ``system`` string,
  joined by blank lines, wherever they occur;
- user/assistant text (string or OpenAI text parts) → text blocks; image parts
  → image blocks (data URLs become base64 sources);
- an assistant's ``tool_calls`` → ``tool_use`` blocks; ``tool`` messages →
  ``tool_result`` blocks in a user turn; consecutive turns of one role merge;
- ``max_tokens`` (or ``max_completion_tokens``) else the constructor's
  ``default_max_tokens``; ``temperature``, ``top_p`` pass; ``stop`` →
  ``stop_sequences``; OpenAI function ``tools`` → ``{name, description,
  input_schema}``; ``tool_choice`` auto/required/none/named → auto/any/none/tool;
  Anthropic-native ``top_k``, ``metadata``, ``stop_sequences``, ``thinking``
  pass; every other OpenAI-only parameter is dropped (the API rejects them);
- the answer: text blocks joined, ``tool_use`` blocks rendered as
  ``[tool_call name({...})]``; ``usage.input_tokens``/``output_tokens``;
  ``stop_reason`` mapped to OpenAI's ``finish_reason`` vocabulary.
"""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import msgspec

from sidecar.providers._client import HTTPChatClient
from sidecar.providers.base import ChatRequest, ProviderResult
from sidecar.providers.errors import ProviderConfigError
from sidecar.providers.openai import render_tool_call
from sidecar.providers.retry import DEFAULT_RETRY_STATUSES, Clock, Completion, Sleep
from sidecar.providers.usage import decode_leniently, read_usage

ANTHROPIC_VERSION = "2023-06-01"

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_NATIVE_PARAMS = ("temperature", "top_p", "top_k", "metadata", "stop_sequences", "thinking")


class _Block(msgspec.Struct):
    type: str
    text: str | None = None
    name: str | None = None
    input: Any = None


class _Message(msgspec.Struct):
    content: list[_Block]
    stop_reason: str | None = None
    #: Read by :func:`sidecar.providers.usage.read_usage`: a quirky meter never costs the answer.
    usage: Any = None


_decoder = msgspec.json.Decoder(_Message)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


def _image_block(part: dict[str, Any]) -> dict[str, Any]:
    url = part.get("image_url", {})
    url = url.get("url", "") if isinstance(url, dict) else str(url)
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _content_blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            blocks.append({"type": "text", "text": part.get("text", "")})
        elif kind == "image_url":
            blocks.append(_image_block(part))
    return blocks


def _tool_use_block(call: dict[str, Any]) -> dict[str, Any]:
    function = call.get("function", {})
    raw = function.get("arguments") or "{}"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        arguments = {"_raw": raw}
    return {"type": "tool_use", "id": call.get("id", ""), "name": function.get("name", ""), "input": arguments}


def convert_messages(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """OpenAI chat messages → (Anthropic ``system``, Anthropic ``messages``)."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(message.get("content")))
            continue
        if role == "tool":
            role = "user"
            blocks = [
                {
                    "type": "tool_result",
                    "tool_use_id": message.get("tool_call_id", ""),
                    "content": _text_of(message.get("content")),
                }
            ]
        else:
            role = "assistant" if role == "assistant" else "user"
            blocks = _content_blocks(message.get("content"))
            blocks += [_tool_use_block(c) for c in message.get("tool_calls") or ()]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        # A lone text block reads better (and logs smaller) as a plain string.
        blocks = turn["content"]
        if len(blocks) == 1 and blocks[0]["type"] == "text":
            turn["content"] = blocks[0]["text"]
    return ("\n\n".join(s for s in system if s) or None), turns


def convert_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI ``{"type": "function", "function": {...}}`` tools → Anthropic tools."""
    converted = []
    for tool in tools:
        function = tool.get("function", tool)
        entry = {
            "name": function.get("name", ""),
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if function.get("description"):
            entry["description"] = function["description"]
        converted.append(entry)
    return converted


def convert_tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    """OpenAI ``tool_choice`` (+ ``parallel_tool_calls``) → Anthropic ``tool_choice``."""
    result: dict[str, Any] | None
    if choice == "auto":
        result = {"type": "auto"}
    elif choice == "required":
        result = {"type": "any"}
    elif choice == "none":
        result = {"type": "none"}
    elif isinstance(choice, dict) and "function" in choice:
        result = {"type": "tool", "name": choice["function"].get("name", "")}
    elif choice is None:
        result = {"type": "auto"} if parallel is False else None
    else:
        result = None
    if result is not None and parallel is False and result["type"] != "none":
        result["disable_parallel_tool_use"] = True
    return result


def build_messages_body(request: ChatRequest, default_max_tokens: int) -> dict[str, Any]:
    """The ``/v1/messages`` body for an OpenAI-shape request (see the module docstring)."""
    params = request.params
    system, messages = convert_messages(request.messages)
    max_tokens = params.get("max_tokens", params.get("max_completion_tokens")) or default_max_tokens
    body: dict[str, Any] = {"model": request.model, "messages": messages, "max_tokens": max_tokens}
    if system is not None:
        body["system"] = system
    for key in _NATIVE_PARAMS:
        if params.get(key) is not None:
            body[key] = params[key]
    stop = params.get("stop")
    if stop is not None and "stop_sequences" not in body:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    if params.get("tools"):
        body["tools"] = convert_tools(params["tools"])
    choice = convert_tool_choice(params.get("tool_choice"), params.get("parallel_tool_calls"))
    if choice is not None and "tools" in body:
        body["tool_choice"] = choice
    return body


def parse_message(body: bytes) -> Completion | None:
    """Read an Anthropic message; None when the body is not one (usage as in
    :func:`sidecar.providers.openai.parse_chat_completion`)."""
    message = decode_leniently(body, _decoder)
    if message is None:
        return None
    texts = [b.text or "" for b in message.content if b.type == "text"]
    calls = [render_tool_call(b.name or "", b.input or {}) for b in message.content if b.type == "tool_use"]
    pieces = ["".join(texts)] + calls
    usage = read_usage(message.usage, "input_tokens", "output_tokens")
    reason = message.stop_reason
    return Completion(
        content="\n".join(p for p in pieces if p),
        finish_reason=_STOP_REASONS.get(reason, reason) if reason is not None else None,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        usage_disputed=usage.disputed,
    )


class AnthropicProvider(HTTPChatClient):
    """One Anthropic upstream: ``POST {base_url}/v1/messages``.

    ``base_url`` is the root (``https://api.anthropic.com``). Sends ``x-api-key``
    (when given) and ``anthropic-version``. Takes OpenAI-shape requests and
    returns the same :class:`ProviderResult` as :class:`OpenAIProvider`, with
    the same retry, deadline and never-raise contract; besides 429/502/503/504
    it also retries 529 (Anthropic's "overloaded", a 503 by another number).
    """

    _retry_statuses = DEFAULT_RETRY_STATUSES | {529}
    _path = "/v1/messages"

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        timeout: httpx.Timeout,
        limits: httpx.Limits,
        deadline_s: float,
        max_retries: int,
        transport: httpx.AsyncBaseTransport | None = None,
        rng: random.Random | None = None,
        sleep: Sleep | None = None,
        clock: Clock | None = None,
        base_delay_s: float = 0.5,
        max_delay_s: float = 8.0,
        default_max_tokens: int = 4096,
        anthropic_version: str = ANTHROPIC_VERSION,
    ) -> None:
        if default_max_tokens <= 0:
            raise ProviderConfigError(f"default_max_tokens must be > 0, got {default_max_tokens!r}")
        super().__init__(
            base_url,
            api_key,
            timeout=timeout,
            limits=limits,
            deadline_s=deadline_s,
            max_retries=max_retries,
            transport=transport,
            rng=rng,
            sleep=sleep,
            clock=clock,
            base_delay_s=base_delay_s,
            max_delay_s=max_delay_s,
        )
        self._default_max_tokens = default_max_tokens
        self._version = anthropic_version

    def _auth_headers(self, key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self._version}
        if key is not None:
            headers["x-api-key"] = key
        return headers

    async def chat(self, request: ChatRequest) -> ProviderResult:
        """Send one chat call (with retries); the outcome is a value."""
        body = build_messages_body(request, self._default_max_tokens)
        return await self._post(body, request.headers, parse_message)
