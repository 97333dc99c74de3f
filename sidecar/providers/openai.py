"""Client for OpenAI-compatible ``/chat/completions`` upstreams."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from sidecar.providers._client import HTTPChatClient
from sidecar.providers.base import ChatRequest, ProviderResult
from sidecar.providers.retry import Completion
from sidecar.providers.usage import decode_leniently, read_usage

# Never sent: we always read a whole answer, and the model/messages come from the request.
_DROPPED_PARAMS = frozenset({"stream", "stream_options", "model", "messages"})


class _Function(msgspec.Struct):
    name: str = ""
    arguments: str | dict[str, Any] | None = None


class _ToolCall(msgspec.Struct):
    function: _Function | None = None


class _Part(msgspec.Struct):
    type: str = ""
    text: str | None = None


class _Message(msgspec.Struct):
    content: str | list[_Part] | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None
    function_call: _Function | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _ChatCompletion(msgspec.Struct):
    choices: list[_Choice]
    #: Read by :func:`sidecar.providers.usage.read_usage`: a quirky meter never costs the answer.
    usage: Any = None


_decoder = msgspec.json.Decoder(_ChatCompletion)


def render_tool_call(name: str, arguments: str | dict[str, Any] | None) -> str:
    """``[tool_call name(arguments)]``: a tool call shown as text, never executed.

    String arguments are shown verbatim (as the model wrote them); objects are
    dumped as compact JSON.
    """
    if arguments is None:
        args = ""
    elif isinstance(arguments, str):
        args = arguments
    else:
        args = json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    return f"[tool_call {name}({args})]"


def parse_chat_completion(body: bytes) -> Completion | None:
    """Read the first choice of a chat completion; None when the body is not one.

    Its usage is read apart (:mod:`sidecar.providers.usage`): figures that are not counts
    are disputed, never a reason to throw the answer away."""
    data = decode_leniently(body, _decoder)
    if data is None or not data.choices:
        return None
    choice = data.choices[0]
    message = choice.message
    pieces: list[str] = []
    if isinstance(message.content, str):
        pieces.append(message.content)
    elif message.content is not None:
        pieces.append("".join(p.text or "" for p in message.content if p.type in ("text", "output_text")))
    elif message.refusal:
        pieces.append(message.refusal)
    for call in message.tool_calls or ():
        if call.function is not None:
            pieces.append(render_tool_call(call.function.name, call.function.arguments))
    if message.function_call is not None:
        pieces.append(render_tool_call(message.function_call.name, message.function_call.arguments))
    usage = read_usage(data.usage, "prompt_tokens", "completion_tokens")
    return Completion(
        content="\n".join(p for p in pieces if p),
        finish_reason=choice.finish_reason,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        usage_disputed=usage.disputed,
    )


def build_chat_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body: the request's params passed through, model and messages set, no streaming."""
    body = {k: v for k, v in request.params.items() if k not in _DROPPED_PARAMS}
    body["model"] = request.model
    body["messages"] = request.messages
    return body


class OpenAIProvider(HTTPChatClient):
    """One OpenAI-compatible upstream: ``POST {base_url}/chat/completions``.

    ``base_url`` includes the version prefix (``http://127.0.0.1:1234/v1``).
    ``Authorization: Bearer`` is sent when ``api_key`` is given; the key never
    appears in a repr or log line. ``request.headers`` are sent as extra headers
    (auth and framing headers among them are ignored).

    ``chat`` never raises for a remote outcome: 429/502/503/504 and connection
    errors are retried with jittered backoff under ``deadline_s`` (see
    :mod:`sidecar.providers.retry`); a timeout is returned at once as
    ``error="timeout", may_have_billed=True``. Tool calls in the answer are
    appended to ``content`` as ``[tool_call name(arguments)]``. ``sleep``,
    ``clock`` and ``rng`` are injectable so tests need not wait for backoff.
    """

    _path = "/chat/completions"

    def _auth_headers(self, key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"} if key is not None else {}

    async def chat(self, request: ChatRequest) -> ProviderResult:
        """Send one chat call (with retries); the outcome is a value."""
        return await self._post(build_chat_body(request), request.headers, parse_chat_completion)
