"""One HTTP/1.1 client connection, lean: a request written in one piece, the answer read whole.

Why: :class:`~sidecar.providers.transport.AiohttpTransport` made each provider call through
``aiohttp.ClientSession.request``, whose generic machinery (a request object, header merging,
auto headers, cookie filtering, a writer task per request, a response object and stream,
three timers) cost about two thirds of a call's CPU against a fake provider at zero latency
(``bench/provider_calls.py``). A provider call is one POST of a body already in memory and an
answer read whole; that is all this module does.

Contract of :class:`Connection` (the transport owns the pool and the limits):

- :meth:`Connection.exchange` writes the request bytes and reads one response: the status
  line (``HTTP/1.x``), the headers (at most :data:`MAX_HEAD` bytes), the body by
  ``Content-Length``, by ``Transfer-Encoding: chunked`` (trailers skipped), or up to the end
  of the connection; no body for 1xx (skipped, except 101: refused), 204, 304 or a HEAD.
- **Timeouts**: ``read`` is the longest silence once the request is written (time spent
  writing does not count); ``total`` cuts the whole exchange (``None``: no cut). They raise
  :class:`httpx.ReadTimeout` and :class:`httpx.WriteTimeout`, as the transport documents.
- **Errors**: the peer closing before a whole answer, or an answer that is not HTTP/1.x, is
  :class:`httpx.RemoteProtocolError`; a socket error while reading :class:`httpx.ReadError`.
  The connection is then closed; it is never reused after any error or cancellation.
- **Keep-alive**: after an answer, :attr:`Connection.reusable` says whether the connection can
  carry another request (HTTP/1.1, no ``Connection: close``, the body delimited, nothing extra
  received, the peer still there).
"""

from __future__ import annotations

import asyncio

import httpx

#: Largest status line plus headers read from a provider (aiohttp's limits allow about as much).
MAX_HEAD = 64 * 1024
#: Largest chunk-size line (with extensions) of a chunked body.
_MAX_CHUNK_LINE = 4096

_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


class Connection(asyncio.Protocol):
    """One client connection; see the module docstring. Made by ``loop.create_connection``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._state = _DONE
        self._waiter: asyncio.Future[None] | None = None
        self._lost = False
        self._head_only = False
        self._keep = False
        self._left = 0  # bytes of the body (or of the current chunk) still to come
        self._body: list[bytes] = []
        self._status = 0
        self._headers: list[tuple[str, str]] = []
        self._last_read = 0.0
        self._read_s: float | None = None
        self._end: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        #: When the connection was last given back to the pool (the pool's keep-alive clock).
        self.idle_since = 0.0

    # --- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._state == _DONE:  # nothing asked: a peer talking out of turn is not reused
            self._keep = False
            self._lost = True
            self.close()
            return
        self._last_read = self._loop.time()
        self._buf += data
        try:
            self._parse()
        except httpx.RemoteProtocolError as exc:
            self._fail(exc)

    def eof_received(self) -> bool | None:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._state == _UNTIL_CLOSE and exc is None:
            self._finish()
            return
        if self._waiter is not None and not self._waiter.done():
            if exc is None:
                self._fail(httpx.RemoteProtocolError("server disconnected before a complete answer"))
            else:
                self._fail(httpx.ReadError(str(exc) or type(exc).__name__))

    # --- the exchange ------------------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        """True when another request may be sent on this connection."""
        transport = self._transport
        # An answer that came before the whole request was written (an early 413) leaves the
        # rest of that request in the buffer: such a connection is not reused either.
        return (self._keep and not self._lost and not self._buf and transport is not None
                and not transport.is_closing() and not transport.get_write_buffer_size())

    async def exchange(
        self, request: bytes, *, head_only: bool, read_s: float | None, total_s: float | None,
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Write ``request`` (request line, headers and body, encoded) and read the answer:
        (status, header pairs as received, body as received)."""
        transport = self._transport
        if transport is None or self._lost or transport.is_closing():
            raise httpx.RemoteProtocolError("connection closed before the request was sent")
        loop = self._loop
        self._state, self._head_only, self._keep = _HEAD, head_only, False
        self._body, self._headers, self._status = [], [], 0
        self._waiter = loop.create_future()
        now = loop.time()
        self._last_read = now
        self._read_s = read_s
        self._end = None if total_s is None else now + total_s
        self._arm(now)
        try:
            transport.write(request)
            await self._waiter
        except BaseException:
            self._keep = False
            self.close()
            raise
        finally:
            self._waiter = None
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body = []
        return self._status, self._headers, body

    # One timer per connection, not per exchange: it is left to fire when it is due no later than
    # the current exchange needs (it then checks and sets itself again), so an exchange that ends
    # early schedules and cancels nothing; a timer on a heap is paid for by every later call.

    def _due(self, now: float) -> float | None:
        due = None if self._read_s is None else self._last_read + self._read_s
        end = self._end
        return end if due is None else due if end is None else min(due, end)

    def _arm(self, now: float) -> None:
        due = self._due(now)
        if due is None:
            return
        timer = self._timer
        if timer is not None:
            if timer.when() <= due:
                return
            timer.cancel()
        self._timer = self._loop.call_at(due, self._expire)

    def _expire(self) -> None:
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done():
            return  # idle: the next exchange sets it again
        at = self._loop.time()
        if self._end is not None and at >= self._end:
            self._fail(httpx.WriteTimeout("no complete answer within the summed timeouts"))
            return
        if self._read_s is not None:
            transport = self._transport
            if transport is not None and transport.get_write_buffer_size():
                self._last_read = at  # still writing: the silence has not started
            elif at - self._last_read >= self._read_s:
                self._fail(httpx.ReadTimeout("read timed out"))
                return
        self._arm(at)

    def close(self) -> None:
        """Close the connection now (nothing more will be read from it)."""
        self._keep = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None and not self._transport.is_closing():
            self._transport.abort()

    def _fail(self, exc: Exception) -> None:
        self._keep = False
        self._state = _DONE
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()

    def _finish(self) -> None:
        self._state = _DONE
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # --- parsing -----------------------------------------------------------------------------

    def _parse(self) -> None:
        buf = self._buf
        while True:
            state = self._state
            if state == _HEAD:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        raise httpx.RemoteProtocolError("response head too large")
                    return
                if end > MAX_HEAD:
                    raise httpx.RemoteProtocolError("response head too large")
                head = bytes(buf[:end])
                del buf[: end + 4]
                self._read_head(head)
            elif state == _LENGTH:
                if len(buf) < self._left:
                    if buf:
                        self._body.append(bytes(buf))
                        self._left -= len(buf)
                        buf.clear()
                    return
                self._body.append(bytes(buf[: self._left]))
                del buf[: self._left]
                self._left = 0
                self._done_body()
                return
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > _MAX_CHUNK_LINE:
                        raise httpx.RemoteProtocolError("chunk size line too long")
                    return
                line = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    size = int(line, 16)
                except ValueError:
                    raise httpx.RemoteProtocolError("bad chunk size") from None
                if size < 0 or not line.isalnum():
                    raise httpx.RemoteProtocolError("bad chunk size")
                if size == 0:
                    self._state = _TRAILER
                else:
                    self._left, self._state = size, _CHUNK_DATA
            elif state == _CHUNK_DATA:
                take = min(self._left, len(buf))
                if take:
                    self._body.append(bytes(buf[:take]))
                    del buf[:take]
                    self._left -= take
                if self._left:
                    return
                self._state = _CHUNK_END
            elif state == _CHUNK_END:
                if len(buf) < 2:
                    return
                if buf[:2] != b"\r\n":
                    raise httpx.RemoteProtocolError("chunk not followed by CRLF")
                del buf[:2]
                self._state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = buf.find(b"\r\n")
                if end < 0:
                    if len(buf) > MAX_HEAD:
                        raise httpx.RemoteProtocolError("trailers too large")
                    return
                del buf[: end + 2]
                if end == 0:
                    self._done_body()
                    return
            elif state == _UNTIL_CLOSE:
                if buf:
                    self._body.append(bytes(buf))
                    buf.clear()
                return
            else:
                return

    def _read_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or len(parts[1]) != 3 or not parts[1].isdigit():
            raise httpx.RemoteProtocolError("not an HTTP/1.x response")
        status = int(parts[1])
        headers: list[tuple[str, str]] = []
        length: int | None = None
        chunked = False
        until_close = False
        close = parts[0] != "HTTP/1.1"
        for line in lines[1:]:
            key, sep, value = line.partition(":")
            if not sep or not key or key != key.strip():  # also a folded line (leading whitespace)
                raise httpx.RemoteProtocolError("malformed response header")
            text = value.strip()
            headers.append((key, text))
            if key[0] not in "cCtT":  # none of the three names read here
                continue
            lower = key.lower()
            if lower == "content-length":
                if not text.isdigit() or (length is not None and int(text) != length):
                    raise httpx.RemoteProtocolError("bad Content-Length")
                length = int(text)
            elif lower == "transfer-encoding":
                codings = [c.strip().lower() for c in text.split(",")]
                chunked = codings[-1] == "chunked"
                until_close = not chunked
            elif lower == "connection":
                tokens = {c.strip().lower() for c in text.split(",")}
                if "close" in tokens:
                    close = True
                elif "keep-alive" in tokens and parts[0] == "HTTP/1.0":
                    close = False
        if 100 <= status < 200:
            if status == 101:
                raise httpx.RemoteProtocolError("unexpected protocol switch")
            return  # an interim answer: the final one follows (state stays _HEAD)
        self._status, self._headers = status, headers
        self._keep = not close
        if self._head_only or status in (204, 304):
            self._done_body()
        elif chunked:
            self._state = _CHUNK_SIZE
        elif until_close or length is None:
            self._keep = False
            self._state = _UNTIL_CLOSE
        elif length == 0:
            self._done_body()
        else:
            self._left, self._state = length, _LENGTH

    def _done_body(self) -> None:
        if self._buf:  # more than one answer to one request: do not trust this connection again
            self._keep = False
            self._buf.clear()
        self._finish()


def encode_request(method: str, target: str, headers: list[tuple[str, str]], body: bytes) -> bytes:
    """The request's bytes: request line, ``headers`` as given, blank line, ``body``.
    A name or value with a CR or LF in it is refused (``ValueError``), never sent."""
    lines = [f"{method} {target} HTTP/1.1"]
    for name, value in headers:
        if "\r" in name or "\n" in name or "\r" in value or "\n" in value or ":" in name or not name:
            raise ValueError("a header name or value holds a newline or is not a token")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("utf-8") + body
