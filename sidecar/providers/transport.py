"""An httpx transport backed by one ``aiohttp.ClientSession``: httpx's shape, aiohttp's speed.

Why: a provider call through httpx's own transport (httpcore over anyio) cost
4-11x the CPU of the same POST through aiohttp on the machine this was measured
on (``bench/provider_calls.py``): httpcore scans every pooled connection's
socket on each request, writes headers and body in two syscalls, and pays
anyio's wrappers on every read. The provider clients keep speaking httpx
(``httpx.Request`` in, ``httpx.Response`` out, httpx's exception classes), so
tests still inject ``httpx.MockTransport`` and :mod:`sidecar.providers.retry`
is unchanged; only the wire is aiohttp's.

Contract of :class:`AiohttpTransport`:

- **Timeouts** come from the request's ``timeout`` extension (httpx's
  ``Timeout.as_dict()``), as with httpx's transport. ``pool``: waiting for one
  of ``max_connections`` slots, then :class:`httpx.PoolTimeout`. ``connect``:
  opening a TCP/TLS connection, then :class:`httpx.ConnectTimeout`. ``read``:
  the longest silence while waiting for or reading the response after the
  request was written, then :class:`httpx.ReadTimeout`. ``write``: aiohttp
  cannot time a write on its own, so the whole exchange is also cut at the sum
  of the four (a stalled upload, or an answer trickling in), then
  :class:`httpx.WriteTimeout`; a ``None`` anywhere lifts that backstop.
- **Errors** are httpx's classes, chosen for what they tell the retry loop:
  failing to connect (refused, DNS, TLS) is :class:`httpx.ConnectError`
  (nothing was sent); a disconnect, reset or unparseable response after the
  connection was up is :class:`httpx.RemoteProtocolError` or
  :class:`httpx.ReadError` — treated as "may have reached the provider", since
  aiohttp does not say whether the request had been fully written.
  Cancellation propagates untouched.
- **Limits**: ``max_connections`` open connections at most (``None``: no cap);
  idle connections are kept ``keepalive_expiry`` seconds. aiohttp has no
  separate cap on idle connections, so ``max_keepalive_connections`` is not
  applied: up to ``max_connections`` may idle.
- **Bodies** are read whole and handed to httpx still encoded, so httpx decodes
  ``Content-Encoding`` as before (a bad gzip body is :class:`httpx.DecodingError`).
- **No ambient state**: no proxy or ``.netrc`` from the environment, no cookie
  jar (nothing of one call leaks into the next), redirects are not followed.
  TLS verifies against certifi's bundle, as httpx does.
- **Lifecycle**: the session is opened on the first request, on that request's
  event loop, and closed by :meth:`aclose` (idempotent). A request after
  ``aclose`` raises :class:`RuntimeError` (a programming error, not a remote one).

:meth:`AiohttpTransport.post` is the provider clients' own way in, with the same contract:
the URL, the header pairs and the body as they are sent (built once per call), and a
:class:`Reply` back (status, headers, body decoded as httpx would) — without an
``httpx.Request`` and ``httpx.Response`` around each attempt, whose header normalising and
stream machinery cost about a fifth of a call's CPU.
"""

from __future__ import annotations

import asyncio
import io
import ssl
from typing import Any

import aiohttp
import httpx

_HTTP11 = {"http_version": b"HTTP/1.1"}
#: Content codings a :class:`Reply`'s body is left as it came in (anything else is decoded by httpx).
_PLAIN = frozenset({"", "identity"})


class Reply:
    """A response read whole, for :meth:`AiohttpTransport.post`: status, headers (aiohttp's,
    case-insensitive), body with its ``Content-Encoding`` undone."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: Any, content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content
# aiohttp warns above this size for a bytes body and writes a BytesIO in chunks, draining between them.
_LARGE_BODY = 1 << 20


class AiohttpTransport(httpx.AsyncBaseTransport):
    """See the module docstring. One instance per upstream; not shared across event loops."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._max_connections = limits.max_connections
        self._keepalive_expiry = limits.keepalive_expiry
        # Our own slot count, not aiohttp's connector limit: a wait for a slot must be told
        # apart from a slow connect (PoolTimeout is not retried, ConnectTimeout is).
        self._slots = asyncio.Semaphore(limits.max_connections) if limits.max_connections else None
        self._session: aiohttp.ClientSession | None = None
        self._ssl: ssl.SSLContext | None = None
        self._timeouts: dict[tuple[float | None, ...], aiohttp.ClientTimeout] = {}
        self._closed = False

    def _open(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RuntimeError("AiohttpTransport is closed")
        connector = aiohttp.TCPConnector(
            limit=0,  # the semaphore is the limit
            keepalive_timeout=self._keepalive_expiry if self._keepalive_expiry is not None else None,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,
            trust_env=False,
            # httpx.Request already carries Host, Content-Length and whatever else we mean to send.
            skip_auto_headers=("Accept", "Accept-Encoding", "User-Agent", "Content-Type"),
        )
        return self._session

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context(trust_env=False)
        return self._ssl

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout: dict[str, float | None] = request.extensions.get("timeout") or {}
        content = await request.aread()
        status, raw, _, body = await self._slot(
            request.method, str(request.url), request.url.scheme == "https",
            # raw: the names as the caller spelled them (httpx's accessors lower-case them)
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw], content, timeout, request,
        )
        return httpx.Response(status, headers=raw, stream=httpx.ByteStream(body), request=request, extensions=_HTTP11)

    async def post(
        self, url: str, headers: list[tuple[str, str]], content: bytes, timeout: dict[str, float | None]
    ) -> Reply:
        """POST ``content`` with ``headers`` (sent as given) to ``url``; see the module's docs.
        Raises what :meth:`handle_async_request` raises (the errors carry no request)."""
        status, raw, fields, body = await self._slot("POST", url, url.startswith("https:"), headers, content, timeout,
                                                     None)
        if fields.get("Content-Encoding", "").strip().lower() not in _PLAIN:
            # Decoded (and refused: httpx.DecodingError) exactly as an httpx.Response would.
            decoded = httpx.Response(status, headers=raw, stream=httpx.ByteStream(body), extensions=_HTTP11)
            body = await decoded.aread()
        return Reply(status, fields, body)

    async def _slot(
        self, method: str, url: str, https: bool, headers: list[tuple[str, str]], content: bytes,
        timeout: dict[str, float | None], request: httpx.Request | None,
    ) -> tuple[int, Any, Any, bytes]:
        """One exchange within the connection limit (status, raw headers, headers, body)."""
        session = self._session if self._session is not None else self._open()
        if self._slots is None:
            return await self._send(session, method, url, https, headers, content, timeout, request)
        if self._slots.locked():
            try:
                async with asyncio.timeout(timeout.get("pool")):
                    await self._slots.acquire()
            except TimeoutError as exc:
                raise httpx.PoolTimeout("no free connection within the pool timeout", request=request) from exc
        else:
            await self._slots.acquire()
        try:
            return await self._send(session, method, url, https, headers, content, timeout, request)
        finally:
            self._slots.release()

    def _client_timeout(self, timeout: dict[str, float | None]) -> aiohttp.ClientTimeout:
        parts = (timeout.get("pool"), timeout.get("connect"), timeout.get("write"), timeout.get("read"))
        known = self._timeouts.get(parts)
        if known is None:
            total = None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
            known = aiohttp.ClientTimeout(total=total, sock_connect=parts[1], sock_read=parts[3])
            if len(self._timeouts) < 64:  # one per client's settings; a bound all the same
                self._timeouts[parts] = known
        return known

    async def _send(
        self, session: aiohttp.ClientSession, method: str, url: str, https: bool, headers: list[tuple[str, str]],
        content: bytes, timeout: dict[str, float | None], request: httpx.Request | None,
    ) -> tuple[int, Any, Any, bytes]:
        data: bytes | io.BytesIO = io.BytesIO(content) if len(content) > _LARGE_BODY else content
        options: dict[str, Any] = {}
        if https:
            options["ssl"] = self._ssl_context()
        try:
            async with session.request(
                method, url, data=data, headers=headers, timeout=self._client_timeout(timeout),
                allow_redirects=False, **options,
            ) as response:
                body = await response.read()
        except aiohttp.ConnectionTimeoutError as exc:
            raise httpx.ConnectTimeout(str(exc) or "connect timed out", request=request) from exc
        except aiohttp.SocketTimeoutError as exc:
            raise httpx.ReadTimeout(str(exc) or "read timed out", request=request) from exc
        except aiohttp.ClientConnectorError as exc:
            raise httpx.ConnectError(str(exc), request=request) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError) as exc:
            raise httpx.RemoteProtocolError(str(exc) or type(exc).__name__, request=request) from exc
        except TimeoutError as exc:
            # aiohttp's total timeout, our write backstop (cancellation of the caller is not this).
            raise httpx.WriteTimeout("no complete answer within the summed timeouts", request=request) from exc
        except (aiohttp.ClientError, OSError) as exc:
            raise httpx.ReadError(str(exc) or type(exc).__name__, request=request) from exc
        return response.status, response.raw_headers, response.headers, body

    async def aclose(self) -> None:
        """Close the session and its connections. Idempotent."""
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
