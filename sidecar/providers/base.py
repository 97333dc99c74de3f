"""What every provider client takes and gives back.

Expected remote outcomes (429, 5xx, timeouts, resets, malformed bodies) are
values in :class:`ProviderResult`, never exceptions. Only programming errors
raise.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

import msgspec

ErrorKind = Literal[
    "timeout",       # no complete answer within the deadline (the call may have been billed)
    "connection",    # could not connect / reset before an answer
    "http_429",      # rate limited, retries exhausted
    "http_5xx",      # server error, retries exhausted
    "http_4xx",      # refused (bad request, auth); not retried
    "malformed",     # 2xx but the body is not a chat completion we can read
]


class ChatRequest(msgspec.Struct, frozen=True, kw_only=True):
    """A chat call in the OpenAI shape, whatever the provider kind.

    ``params`` carries the served request's parameters (temperature, max_tokens,
    tools, tool_choice, top_p, stop, ...), passed through; ``headers`` are extra
    request headers (the shadow-traffic tag).
    """

    model: str
    messages: list[dict[str, Any]]
    params: dict[str, Any] = {}
    headers: dict[str, str] = {}


class ProviderResult(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of a chat call after retries.

    ``content`` is the answer text; tool calls in the answer are rendered as
    text (``[tool_call name(arguments)]``) and never executed. ``may_have_billed``
    is True when an attempt reached the provider and its fate is unknown (a read
    timeout): the spend ledger must then hold the worst case, not zero.
    ``unknown_fate_attempts`` counts such attempts (a retried reset followed by
    a success is ``ok`` yet one attempt's fate is unknown), so a ledger can hold
    one worst case per unknown attempt on top of the reported usage.
    ``usage_disputed`` is True when the answer came with usage figures that are
    not token counts (a fraction, a negative, NaN, a string, ...; see
    :mod:`sidecar.providers.usage`): the answer stands, the unreadable counts
    are None, and the ledger charges the call's worst case.
    """

    ok: bool
    content: str | None = None
    finish_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    usage_disputed: bool = False
    error: ErrorKind | None = None
    status: int | None = None
    attempts: int = 1
    latency_ms: float = 0.0
    may_have_billed: bool = False
    unknown_fate_attempts: int = 0


class Provider(Protocol):
    """One upstream. ``chat`` never raises for remote failures."""

    async def chat(self, request: ChatRequest) -> ProviderResult: ...

    async def aclose(self) -> None: ...
