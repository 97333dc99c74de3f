"""An httpx transport over a lean HTTP/1.1 client (our pool, llhttp's parser): httpx's shape, fast.

Why: a provider call through httpx's own transport (httpcore over anyio) cost
4-11x the CPU of the same POST through aiohttp, and aiohttp's
``ClientSession.request`` itself about three times that of writing the request
in one piece and reading the answer whole on an asyncio protocol
(``bench/provider_calls.py``): its request and response objects, header merging,
auto headers, cookie filtering, a writer task and three timers per call are
generic machinery a fixed POST to one endpoint does not use. The wire is
:mod:`sidecar.providers.wire` (the request written by us, the answer parsed by
``httptools``, i.e. llhttp in C); the provider clients keep speaking httpx
(``httpx.Request`` in, ``httpx.Response`` out, httpx's exception classes), so
tests still inject ``httpx.MockTransport`` and :mod:`sidecar.providers.retry`
is unchanged. (The class keeps its name from when the wire was aiohttp's.)

Contract of :class:`AiohttpTransport`:

- **Timeouts** come from the request's ``timeout`` extension (httpx's
  ``Timeout.as_dict()``), as with httpx's transport. ``pool``: waiting for one
  of ``max_connections`` slots, then :class:`httpx.PoolTimeout`. ``connect``:
  opening a TCP/TLS connection, then :class:`httpx.ConnectTimeout`. ``read``:
  the longest silence while waiting for or reading the response after the
  request was written, then :class:`httpx.ReadTimeout`. ``write``: a write is
  not timed on its own, so the whole exchange is also cut at the sum of the
  four (a stalled upload, or an answer trickling in), then
  :class:`httpx.WriteTimeout`; a ``None`` anywhere lifts that backstop.
- **Errors** are httpx's classes, chosen for what they tell the retry loop:
  failing to connect (refused, DNS, TLS) is :class:`httpx.ConnectError`
  (nothing was sent); a disconnect, reset or unparseable response after the
  connection was up is :class:`httpx.RemoteProtocolError` or
  :class:`httpx.ReadError` — treated as "may have reached the provider", since
  the transport does not know whether the request had been fully read.
  Cancellation propagates untouched (the connection is closed, never reused).
- **Limits**: ``max_connections`` open connections at most (``None``: no cap);
  idle connections are kept ``keepalive_expiry`` seconds (checked when one is
  taken again). There is no separate cap on idle connections, so
  ``max_keepalive_connections`` is not applied: up to ``max_connections`` may idle.
- **Bodies** are read whole and handed to httpx still encoded, so httpx decodes
  ``Content-Encoding`` as before (a bad gzip body is :class:`httpx.DecodingError`).
- **No ambient state**: no proxy or ``.netrc`` from the environment, no cookie
  jar (nothing of one call leaks into the next), redirects are not followed.
  TLS verifies against certifi's bundle, as httpx does. ``Host`` and
  ``Content-Length`` are added when the caller did not set them; nothing else is.
- **Lifecycle**: connections are opened on first use, on that request's event
  loop, and closed by :meth:`aclose` (idempotent). A request after ``aclose``
  raises :class:`RuntimeError` (a programming error, not a remote one).

:meth:`AiohttpTransport.post` is the provider clients' own way in, with the same contract:
the URL, the header pairs and the body as they are sent (built once per call), and a
:class:`Reply` back (status, headers, body decoded as httpx would) — without an
``httpx.Request`` and ``httpx.Response`` around each attempt, whose header normalising and
stream machinery cost about a fifth of a call's CPU.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any
from urllib.parse import urlsplit

import httpx
from multidict import CIMultiDict

from sidecar.providers.wire import Connection, encode_request

_HTTP11 = {"http_version": b"HTTP/1.1"}
#: Content codings a :class:`Reply`'s body is left as it came in (anything else is decoded by httpx).
_PLAIN = frozenset({"", "identity"})
#: Distinct URLs whose parsed form is kept (one per client's endpoint; a bound all the same).
_URL_CACHE = 64


class Reply:
    """A response read whole, for :meth:`AiohttpTransport.post`: status, headers
    (case-insensitive), body with its ``Content-Encoding`` undone."""

    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: Any, content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content


class _Target:
    """A URL as the wire needs it, parsed once."""

    __slots__ = ("origin", "https", "host", "port", "path", "authority")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise httpx.UnsupportedProtocol(f"not an http(s) URL: {url!r}")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.origin = (self.https, self.host, self.port)
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.authority = parts.netloc.rpartition("@")[2]


class AiohttpTransport(httpx.AsyncBaseTransport):
    """See the module docstring. One instance per upstream; not shared across event loops."""

    def __init__(self, limits: httpx.Limits) -> None:
        self._max_connections = limits.max_connections
        self._keepalive_expiry = limits.keepalive_expiry
        # A wait for a slot is told apart from a slow connect (PoolTimeout is not retried,
        # ConnectTimeout is).
        self._slots = asyncio.Semaphore(limits.max_connections) if limits.max_connections else None
        self._idle: dict[tuple[bool, str, int], list[Connection]] = {}
        self._open: set[Connection] = set()
        self._targets: dict[str, _Target] = {}
        self._ssl: ssl.SSLContext | None = None
        self._timeout_seen: dict[str, float | None] | None = None
        self._timeout_parts: tuple[tuple[float | None, ...], float | None] = ((), None)
        self._closed = False

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = httpx.create_ssl_context(trust_env=False)
        return self._ssl

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = _Target(url)
            if len(self._targets) < _URL_CACHE:
                self._targets[url] = target
        return target

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        timeout: dict[str, float | None] = request.extensions.get("timeout") or {}
        content = await request.aread()
        target = request.url.raw_path.decode("ascii")
        origin = _Target(str(request.url))
        status, raw, body = await self._slot(
            request.method, origin, target,
            # raw: the names as the caller spelled them (httpx's accessors lower-case them)
            [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw], content, timeout, request,
        )
        return httpx.Response(status, headers=raw, stream=httpx.ByteStream(body), request=request, extensions=_HTTP11)

    async def post(
        self, url: str, headers: list[tuple[str, str]], content: bytes, timeout: dict[str, float | None]
    ) -> Reply:
        """POST ``content`` with ``headers`` (sent as given) to ``url``; see the module's docs.
        Raises what :meth:`handle_async_request` raises (the errors carry no request)."""
        target = self._target(url)
        status, raw, body = await self._slot("POST", target, target.path, headers, content, timeout, None)
        fields = CIMultiDict(raw)
        if fields.get("Content-Encoding", "").strip().lower() not in _PLAIN:
            # Decoded (and refused: httpx.DecodingError) exactly as an httpx.Response would.
            decoded = httpx.Response(status, headers=raw, stream=httpx.ByteStream(body), extensions=_HTTP11)
            body = await decoded.aread()
        return Reply(status, fields, body)

    async def _slot(
        self, method: str, origin: _Target, target: str, headers: list[tuple[str, str]], content: bytes,
        timeout: dict[str, float | None], request: httpx.Request | None,
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """One exchange within the connection limit (status, header pairs, body)."""
        if self._closed:
            raise RuntimeError("AiohttpTransport is closed")
        if self._slots is None:
            return await self._send(method, origin, target, headers, content, timeout, request)
        if self._slots.locked():
            try:
                async with asyncio.timeout(timeout.get("pool")):
                    await self._slots.acquire()
            except TimeoutError as exc:
                raise httpx.PoolTimeout("no free connection within the pool timeout", request=request) from exc
        else:
            await self._slots.acquire()
        try:
            return await self._send(method, origin, target, headers, content, timeout, request)
        finally:
            self._slots.release()

    async def _send(
        self, method: str, origin: _Target, target: str, headers: list[tuple[str, str]], content: bytes,
        timeout: dict[str, float | None], request: httpx.Request | None,
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        if timeout is self._timeout_seen:  # a client's own settings: the same dict every call
            parts, total = self._timeout_parts
        else:
            parts = (timeout.get("pool"), timeout.get("connect"), timeout.get("write"), timeout.get("read"))
            total = None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
            self._timeout_seen, self._timeout_parts = timeout, (parts, total)
        data = encode_request(method, target, _framed(headers, origin.authority, method, content), content)
        loop = asyncio.get_running_loop()
        start = loop.time()
        conn = self._reuse(origin.origin, start)
        if conn is None:
            connect = parts[1] if total is None or parts[1] is None else min(parts[1], total)
            conn = await self._connect(origin, connect, request)
            if total is not None:
                total -= loop.time() - start
        try:
            status, raw, body = await conn.exchange(
                data, head_only=method == "HEAD", read_s=parts[3], total_s=total,
            )
        except httpx.TransportError as exc:
            self._open.discard(conn)
            if request is not None:
                exc.request = request
            raise
        except BaseException:
            self._open.discard(conn)
            raise
        if conn.reusable and not self._closed:
            conn.idle_since = loop.time()
            self._idle.setdefault(origin.origin, []).append(conn)
        else:
            conn.close()
            self._open.discard(conn)
        return status, raw, body

    def _reuse(self, origin: tuple[bool, str, int], now: float) -> Connection | None:
        """The most recently used idle connection to ``origin`` still fit to carry a request;
        the expired and closed ones met on the way are closed."""
        idle = self._idle.get(origin)
        expiry = self._keepalive_expiry
        while idle:
            conn = idle.pop()
            if conn.reusable and (expiry is None or now - conn.idle_since < expiry):
                return conn
            conn.close()
            self._open.discard(conn)
        return None

    async def _connect(self, origin: _Target, timeout: float | None, request: httpx.Request | None) -> Connection:
        loop = asyncio.get_running_loop()
        tls = self._ssl_context() if origin.https else None
        try:
            async with asyncio.timeout(timeout):
                _, conn = await loop.create_connection(
                    lambda: Connection(loop), origin.host, origin.port, ssl=tls,
                    server_hostname=origin.host if tls is not None else None,
                )
        except TimeoutError as exc:
            raise httpx.ConnectTimeout(f"connecting to {origin.host}:{origin.port} timed out", request=request) from exc
        except OSError as exc:  # refused, unreachable, DNS, TLS (ssl.SSLError is an OSError)
            raise httpx.ConnectError(str(exc) or type(exc).__name__, request=request) from exc
        if self._closed:
            conn.close()
            raise RuntimeError("AiohttpTransport is closed")
        self._open.add(conn)
        return conn

    async def aclose(self) -> None:
        """Close every connection. Idempotent."""
        self._closed = True
        for conn in self._open:
            conn.close()
        self._open.clear()
        self._idle.clear()


def _framed(headers: list[tuple[str, str]], authority: str, method: str, content: bytes) -> list[tuple[str, str]]:
    """``headers`` with ``Host`` and ``Content-Length`` added when the caller did not set them."""
    if headers and headers[0][0] == "host" and headers[-1][0] == "content-length":
        return headers  # as the provider clients frame them
    host = length = False
    for name, _ in headers:
        lower = name.lower()
        if lower == "host":
            host = True
        elif lower == "content-length" or lower == "transfer-encoding":
            length = True
    if host and (length or (not content and method in ("GET", "HEAD"))):
        return headers
    out = list(headers)
    if not host:
        out.insert(0, ("Host", authority))
    if not length and (content or method not in ("GET", "HEAD")):
        out.append(("Content-Length", str(len(content))))
    return out
