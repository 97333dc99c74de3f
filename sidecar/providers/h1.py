"""A lean HTTP/1.1 client for plain-``http`` upstreams: what :meth:`AiohttpTransport.post`
sends through when the URL is ``http://`` (a local model server, a gateway on loopback, the
fake provider), under the same contract (:mod:`sidecar.providers.transport`).

Why: a provider call is one POST of a ready body to one fixed endpoint, and aiohttp's client
spent most of a call's CPU on what such a call never uses (a request and response object
model, a writer task, three timers, cookie and redirect machinery) — about a quarter of the
engine's CPU per judged case. Here a call is one ``write`` of the request head and body on a
kept-alive connection and a parse of the answer as it arrives: status line, headers, a body
framed by ``Content-Length``, chunked, or the connection's end.

Contract (the transport's, restated for this path):

- **Timeouts**: ``connect`` bounds opening the connection (:class:`httpx.ConnectTimeout`);
  ``read`` the longest silence while the answer is awaited (:class:`httpx.ReadTimeout`); the
  whole exchange is cut at the sum of the four (:class:`httpx.WriteTimeout`, the backstop for
  a stalled upload); a ``None`` anywhere lifts that backstop.
- **Errors**: failing to connect is :class:`httpx.ConnectError` (nothing was sent); a
  connection that ends, or an answer that cannot be parsed, once the request was written is
  :class:`httpx.RemoteProtocolError` ("may have reached the provider").
- **Connections** are kept alive ``keepalive_expiry`` seconds (``None``: while the server keeps
  them) and reused one request at a time; one whose answer was not read whole (an error, a
  cancelled caller, ``Connection: close``, a body ended by the connection) is closed. How many
  are open at once is the transport's slot count.
- **Nothing ambient**: no proxy, no cookie, redirects are answers like any other.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from urllib.parse import urlsplit

import httpx

#: The most header bytes an answer may have before it is refused as malformed.
MAX_HEAD = 64 * 1024


class Fields(dict[str, str]):
    """An answer's headers by lower-cased name (a repeated one: its last value), read in any case."""

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        return super().get(key.lower(), default)


class _Conn(asyncio.Protocol):
    """One connection: bytes in a buffer, a future woken on each arrival and at the end."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.ended = False
        self.error: BaseException | None = None
        self.waiter: asyncio.Future[None] | None = None
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        self._wake()

    def eof_received(self) -> bool:
        self.ended = True
        self._wake()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended = True
        self.error = exc
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    @property
    def usable(self) -> bool:
        return not self.ended and self.transport is not None and not self.transport.is_closing()

    def close(self) -> None:
        self.ended = True
        if self.transport is not None:
            self.transport.close()


class H1Pool:
    """Kept-alive connections to the ``http`` upstreams of one transport (one event loop)."""

    def __init__(self, keepalive_expiry: float | None) -> None:
        self._expiry = keepalive_expiry
        self._idle: dict[tuple[str, int], deque[_Conn]] = {}
        self._targets: dict[str, tuple[str, int, bytes]] = {}
        self._closed = False

    def _target(self, url: str) -> tuple[str, int, bytes]:
        known = self._targets.get(url)
        if known is None:
            parts = urlsplit(url)
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            known = (parts.hostname or "", parts.port or 80, path.encode("ascii"))
            if len(self._targets) < 256:
                self._targets[url] = known
        return known

    async def post(
        self, url: str, headers: list[tuple[str, str]], content: bytes, timeout: dict[str, float | None]
    ) -> tuple[int, list[tuple[bytes, bytes]], Fields, bytes]:
        """(status, raw headers, headers, body as sent); raises httpx's errors (see the module)."""
        if self._closed:
            raise RuntimeError("AiohttpTransport is closed")
        host, port, path = self._target(url)
        parts = (timeout.get("pool"), timeout.get("connect"), timeout.get("write"), timeout.get("read"))
        total = None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
        loop = asyncio.get_running_loop()
        deadline = None if total is None else loop.time() + total
        head = [b"POST ", path, b" HTTP/1.1\r\n"]
        named = set()
        for name, value in headers:
            if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                raise ValueError(f"header {name!r} has a line break")
            named.add(name.lower())
            head.append(f"{name}: {value}\r\n".encode("utf-8"))
        if "host" not in named:  # the clients send both; a caller that does not gets them
            head.append(f"Host: {host}:{port}\r\n".encode("ascii"))
        if "content-length" not in named:
            head.append(b"Content-Length: %d\r\n" % len(content))
        head.append(b"\r\n")
        request = b"".join(head) + content
        conn = await self._connect(host, port, parts[1])
        reusable = False
        try:
            assert conn.transport is not None
            conn.transport.write(request)
            status, raw, fields, body, reusable = await self._answer(conn, loop, deadline, parts[3])
            return status, raw, fields, body
        finally:
            if reusable and not self._closed and conn.usable:
                conn.idle_since = time.monotonic()
                self._idle.setdefault((host, port), deque()).append(conn)
            else:
                conn.close()

    async def _connect(self, host: str, port: int, connect_timeout: float | None) -> _Conn:
        idle = self._idle.get((host, port))
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.usable and not conn.buf and (self._expiry is None or now - conn.idle_since < self._expiry):
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(connect_timeout):
                _, protocol = await loop.create_connection(_Conn, host, port)
        except TimeoutError as exc:
            raise httpx.ConnectTimeout("connect timed out") from exc
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return protocol

    async def _wait(self, conn: _Conn, loop: asyncio.AbstractEventLoop, deadline: float | None,
                    read: float | None) -> None:
        """Until more bytes arrive or the connection ends; the read and total timeouts."""
        if conn.ended:
            raise httpx.RemoteProtocolError("the server ended the connection before its answer was whole")
        waiter = conn.waiter = loop.create_future()
        limit = read
        if deadline is not None:
            left = deadline - loop.time()
            limit = left if limit is None else min(limit, left)
        try:
            async with asyncio.timeout(None if limit is None else max(limit, 0.0)):
                await waiter
        except TimeoutError as exc:
            if deadline is not None and loop.time() >= deadline:
                raise httpx.WriteTimeout("no complete answer within the summed timeouts") from exc
            raise httpx.ReadTimeout("read timed out") from exc
        finally:
            conn.waiter = None

    async def _answer(
        self, conn: _Conn, loop: asyncio.AbstractEventLoop, deadline: float | None, read: float | None
    ) -> tuple[int, list[tuple[bytes, bytes]], Fields, bytes, bool]:
        buf = conn.buf
        while True:  # the head; 1xx interim answers are skipped
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    raise httpx.RemoteProtocolError("the answer's head is too long")
                await self._wait(conn, loop, deadline, read)
                continue
            status, version, raw = _head(bytes(buf[:end]))
            del buf[:end + 4]
            if 100 <= status < 200:
                continue
            break
        fields = Fields((k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw)
        keep = version == "HTTP/1.1" and "close" not in (fields.get("Connection") or "").lower()
        if status in (204, 304):
            return status, raw, fields, b"", keep
        if "chunked" in (fields.get("Transfer-Encoding") or "").lower():
            body = await self._chunked(conn, loop, deadline, read)
            return status, raw, fields, body, keep
        length = fields.get("Content-Length")
        if length is not None:
            try:
                n = int(length)
            except ValueError:
                raise httpx.RemoteProtocolError(f"bad Content-Length {length!r}") from None
            if n < 0:
                raise httpx.RemoteProtocolError(f"bad Content-Length {length!r}")
            while len(buf) < n:
                await self._wait(conn, loop, deadline, read)
            body = bytes(buf[:n])
            del buf[:n]
            return status, raw, fields, body, keep and not buf
        while not conn.ended:  # framed by the connection's end
            await self._wait(conn, loop, deadline, read)
        if conn.error is not None:
            raise httpx.RemoteProtocolError(str(conn.error) or type(conn.error).__name__)
        body = bytes(buf)
        buf.clear()
        return status, raw, fields, body, False

    async def _chunked(self, conn: _Conn, loop: asyncio.AbstractEventLoop, deadline: float | None,
                       read: float | None) -> bytes:
        buf = conn.buf
        out = bytearray()
        while True:
            line_end = buf.find(b"\r\n")
            if line_end < 0:
                await self._wait(conn, loop, deadline, read)
                continue
            size_text = bytes(buf[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise httpx.RemoteProtocolError(f"bad chunk size {size_text!r}") from None
            if size == 0:  # the last chunk: then trailers, if any, and an empty line
                rest = line_end + 2
                while True:
                    if buf[rest:rest + 2] == b"\r\n":
                        del buf[:rest + 2]
                        return bytes(out)
                    end = buf.find(b"\r\n\r\n", rest)
                    if end >= 0:
                        del buf[:end + 4]
                        return bytes(out)
                    await self._wait(conn, loop, deadline, read)
            while len(buf) < line_end + 2 + size + 2:
                await self._wait(conn, loop, deadline, read)
            start = line_end + 2
            out += buf[start:start + size]
            if buf[start + size:start + size + 2] != b"\r\n":
                raise httpx.RemoteProtocolError("a chunk is not followed by its line end")
            del buf[:start + size + 2]

    def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            while idle:
                idle.pop().close()
        self._idle.clear()


def _head(data: bytes) -> tuple[int, str, list[tuple[bytes, bytes]]]:
    lines = data.split(b"\r\n")
    first = lines[0].split(b" ", 2)
    if len(first) < 2 or not first[0].startswith(b"HTTP/"):
        raise httpx.RemoteProtocolError(f"not an HTTP status line: {lines[0][:80]!r}")
    try:
        status = int(first[1])
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad status {first[1][:20]!r}") from None
    raw: list[tuple[bytes, bytes]] = []
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep or not name or name != name.strip():
            raise httpx.RemoteProtocolError(f"bad header line {line[:80]!r}")
        raw.append((name, value.strip()))
    return status, first[0].decode("latin-1"), raw

