"""What the OpenAI and Anthropic clients share: one transport, the key, the retry loop."""

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
from sidecar.providers.transport import AiohttpTransport, Reply

# Extra headers a caller may not set: the provider owns auth and framing.
_RESERVED_HEADERS = frozenset(
    {"authorization", "x-api-key", "host", "content-length", "content-type", "transfer-encoding", "connection"}
)

_encoder = msgspec.json.Encoder()

# Sent unless the caller's extra headers name them (content-type is reserved, always ours).
_BASE_HEADERS = {
    "content-type": "application/json",
    "accept": "application/json",
    "accept-encoding": "gzip, deflate",
    "user-agent": "shadowtrial",
}


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

    Owns exactly one httpx transport per upstream: the injected one (tests pass
    :class:`httpx.MockTransport`), else an :class:`AiohttpTransport` with
    ``limits`` (no proxy or ``.netrc`` read from the environment behind the
    config's back, no cookie jar). ``timeout`` travels on every request as
    httpx's ``timeout`` extension. Redirects are not followed.

    The transport is driven directly, without an :class:`httpx.AsyncClient`
    in front: the client's per-request work (URL parsing, header merging,
    auth and redirect machinery, cookie handling) cost about a third of a
    call's CPU and none of it applies to one fixed POST endpoint
    (``bench/provider_calls.py``).
    """

    _retry_statuses: frozenset[int] = DEFAULT_RETRY_STATUSES
    #: The endpoint below ``base_url`` that ``chat`` posts to.
    _path: str = ""

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
        try:
            self._url = httpx.URL(self.base_url + self._path)  # parsed once, not per call
        except httpx.InvalidURL as exc:
            raise ProviderConfigError(f"base_url is not a valid URL: {exc}") from None
        self._host = self._url.netloc.decode("ascii")
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
        self._transport = transport if transport is not None else AiohttpTransport(limits)
        #: Our own transport is driven through its ``post`` (no httpx request or response per call).
        self._direct = self._transport if isinstance(self._transport, AiohttpTransport) else None
        self._url_text = str(self._url)
        self._extensions = {"timeout": timeout.as_dict()}
        self._closed = False

    def __repr__(self) -> str:
        key = "set" if self._key is not None else "none"
        return f"{type(self).__name__}(base_url={self.base_url!r}, api_key=<{key}>)"

    async def aclose(self) -> None:
        """Close the connection pool. Idempotent; ``chat`` afterwards raises ProviderClosedError."""
        if not self._closed:
            self._closed = True
            await self._transport.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _auth_headers(self, key: str | None) -> dict[str, str]:
        """The provider's own headers (lower-case names); they override any extra header."""
        raise NotImplementedError

    async def _post(self, body: dict[str, Any], extra_headers: dict[str, str], parse: Parse) -> ProviderResult:
        """POST ``body`` as JSON to the endpoint with retries; the result is a value, never an exception."""
        if self._closed:
            raise ProviderClosedError(f"{type(self).__name__} is closed")
        own = self._auth_headers(self._key.reveal() if self._key is not None else None)
        if extra_headers:
            reserved = _RESERVED_HEADERS | own.keys()
            extra = {k: v for k, v in extra_headers.items() if k.lower() not in reserved}
            named = {k.lower() for k in extra}
            headers = {k: v for k, v in _BASE_HEADERS.items() if k not in named}
            headers.update(extra)
        else:
            headers = dict(_BASE_HEADERS)
        headers.update(own)
        content = _encoder.encode(body)
        if self._direct is not None:
            # Our own transport: the URL, header pairs and body go to it as they are sent, built
            # once for every attempt (see AiohttpTransport.post).
            direct, url_text, timeout = self._direct, self._url_text, self._extensions["timeout"]
            pairs = [("host", self._host), *headers.items(), ("content-length", str(len(content)))]

            async def post() -> Reply:
                return await direct.post(url_text, pairs, content, timeout)

            return await send_with_retries(
                post, parse, policy=self._policy, rng=self._rng, sleep=self._sleep, clock=self._clock
            )
        # Host and Content-Length are set here and the body handed over as a ready stream:
        # httpx.Request's own body encoding and header defaults cost as much again as the
        # rest of building a request, for values known here already. Retries reuse both.
        fields = httpx.Headers([("host", self._host), *headers.items(), ("content-length", str(len(content)))])
        stream = httpx.ByteStream(content)
        url = self._url

        async def send() -> httpx.Response:
            request = httpx.Request("POST", url, headers=fields, stream=stream, extensions=self._extensions)
            response = await self._transport.handle_async_request(request)
            try:
                await response.aread()
            finally:
                await response.aclose()
            return response

        return await send_with_retries(
            send, parse, policy=self._policy, rng=self._rng, sleep=self._sleep, clock=self._clock
        )
