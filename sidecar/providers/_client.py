"""What the OpenAI and Anthropic clients share: one httpx client, the key, the retry loop."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, Self
from urllib.parse import urlsplit

import httpx
import msgspec

from sidecar.providers.base import ProviderResult
from sidecar.providers.errors import ProviderClosedError, ProviderConfigError
from sidecar.providers.retry import DEFAULT_RETRY_STATUSES, Clock, Parse, RetryPolicy, Sleep, send_with_retries

# Extra headers a caller may not set: the provider owns auth and framing.
_RESERVED_HEADERS = frozenset(
    {"authorization", "x-api-key", "host", "content-length", "content-type", "transfer-encoding", "connection"}
)

_encoder = msgspec.json.Encoder()


class _Secret:
    """Holds an API key so that no repr, log line or ``vars()`` dump shows it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "'***'"


class HTTPChatClient:
    """Base of the provider clients; see :class:`OpenAIProvider` for the contract.

    Owns exactly one :class:`httpx.AsyncClient` (explicit timeout and limits,
    optional injected transport, ``trust_env=False`` so no proxy or netrc is read
    from the environment behind the config's back). Redirects are not followed.
    """

    _retry_statuses: frozenset[int] = DEFAULT_RETRY_STATUSES

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
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ProviderConfigError(f"base_url must be an http(s) URL, got {base_url!r}")
        if api_key is not None and not api_key:
            raise ProviderConfigError("api_key must be None or non-empty")
        self.base_url = base_url.rstrip("/")
        self._key = _Secret(api_key) if api_key is not None else None
        self._policy = RetryPolicy(
            deadline_s=deadline_s,
            max_retries=max_retries,
            base_delay_s=base_delay_s,
            max_delay_s=max_delay_s,
            retry_statuses=self._retry_statuses,
        )
        self._rng = rng if rng is not None else random.Random()
        self._sleep: Sleep = sleep if sleep is not None else asyncio.sleep
        self._clock: Clock = clock if clock is not None else time.monotonic
        self._client = httpx.AsyncClient(
            timeout=timeout,
            limits=limits,
            transport=transport,
            follow_redirects=False,
            trust_env=False,
        )

    def __repr__(self) -> str:
        key = "set" if self._key is not None else "none"
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key=<{key}>)"

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent; ``chat`` afterwards raises ProviderClosedError."""
        await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _auth_headers(self, key: str | None) -> dict[str, str]:
        """The provider's own headers (lower-case names); they override any extra header."""
        raise NotImplementedError

    async def _post(self, url: str, body: dict[str, Any], extra_headers: dict[str, str], parse: Parse) -> ProviderResult:
        """POST ``body`` as JSON with retries; the result is a value, never an exception."""
        if self._client.is_closed:
            raise ProviderClosedError(f"{type(self).__name__} is closed")
        own = self._auth_headers(self._key.reveal() if self._key is not None else None)
        reserved = _RESERVED_HEADERS | own.keys()
        headers = {k: v for k, v in extra_headers.items() if k.lower() not in reserved}
        headers["content-type"] = "application/json"
        headers.update(own)
        content = _encoder.encode(body)

        async def send() -> httpx.Response:
            return await self._client.post(url, content=content, headers=headers)

        return await send_with_retries(
            send, parse, policy=self._policy, rng=self._rng, sleep=self._sleep, clock=self._clock
        )
