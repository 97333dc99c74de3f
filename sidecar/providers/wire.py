"""One HTTP/1.1 client connection, lean: a request written in one piece, the answer read whole.

Why: :class:`~sidecar.providers.transport.AiohttpTransport` made each provider call through
``aiohttp.ClientSession.request``, whose generic machinery (a request object, header merging,
auto headers, cookie filtering, a writer task per request, a response object and stream,
three timers) cost about two thirds of a call's CPU against a fake provider at zero latency
(``bench/provider_calls.py``). A provider call is one POST of a body already in memory and an
answer read whole; that is all this module does. The answer is parsed by ``httptools``
(llhttp, in C: framing, chunked bodies, keep-alive rules are its own, not ours); this module
only writes the request, keeps the timer, and applies the limits below.

Contract of :class:`Connection` (the transport owns the pool and the limits):

- :meth:`Connection.exchange` writes the request bytes and reads one response: HTTP/1.x,
  a status line plus headers of at most about :data:`MAX_HEAD` bytes, the body by
  ``Content-Length``, by ``Transfer-Encoding: chunked`` (trailers ignored), or up to the end
  of the connection (complete when the peer closes cleanly; never reused). Interim answers
  100, 102 and 103 are skipped; 101 and any other 1xx are refused. 204 and 304 have no body
  (llhttp knows). A response to ``HEAD`` is taken as complete at the end of its head and its
  connection is not reused (llhttp is not told the method; the transport only POSTs).
- One parser per connection: llhttp starts the next message itself after a kept-alive one.
- **Timeouts**: ``read`` is the longest silence once the request is written (time spent
  writing does not count); ``total`` cuts the whole exchange (``None``: no cut). They raise
  :class:`httpx.ReadTimeout` and :class:`httpx.WriteTimeout`, as the transport documents.
- **Errors**: the peer closing before a whole answer, or an answer llhttp refuses (not
  HTTP/1.x, a bad length or chunk, a folded header, a protocol switch) is
  :class:`httpx.RemoteProtocolError`; a socket error while reading :class:`httpx.ReadError`.
  The connection is then closed; it is never reused after any error or cancellation.
- **Keep-alive**: after an answer, :attr:`Connection.reusable` says whether the connection can
  carry another request (llhttp's ``should_keep_alive``: HTTP/1.1 or a 1.0 keep-alive, no
  ``Connection: close``, the body delimited; nothing extra received; the peer still there).
"""

from __future__ import annotations

import asyncio

import httpx
import httptools

#: Largest status line plus headers read from a provider (aiohttp's limits allow about as much).
MAX_HEAD = 64 * 1024

#: Interim answers llhttp ends at their head (no body); any other 1xx is refused.
_INTERIM = (100, 102, 103)

_IDLE, _HEAD, _BODY = range(3)


class Connection(asyncio.Protocol):
    """One client connection; see the module docstring. Made by ``loop.create_connection``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._state = _IDLE
        self._waiter: asyncio.Future[None] | None = None
        self._lost = False
        self._head_only = False
        self._keep = False
        self._framed = False  # the answer being read has a Content-Length or is chunked
        self._head_size = 0  # bytes of the current head's status line and headers, as parsed
        self._fed = 0  # bytes fed while a head is still incomplete (a head that never ends)
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
        if self._state == _IDLE:  # nothing asked: a peer talking out of turn is not reused
            self._keep = False
            self._lost = True
            self.close()
            return
        self._last_read = self._loop.time()
        try:
            if self._state == _HEAD:
                self._fed += len(data)
                self._parser.feed_data(data)
                if self._state == _HEAD and self._fed > MAX_HEAD:
                    raise httpx.RemoteProtocolError("response head too large")
            else:
                self._parser.feed_data(data)
        except httpx.RemoteProtocolError as exc:
            self._fail(exc)
        except httptools.HttpParserCallbackError as exc:
            cause = exc.__context__
            self._fail(cause if isinstance(cause, httpx.RemoteProtocolError)
                       else httpx.RemoteProtocolError(f"malformed response: {exc}"))
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(httpx.RemoteProtocolError(f"malformed response: {exc}"))

    def eof_received(self) -> bool | None:
        return False  # close our side too; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        if self._state == _BODY and exc is None and not self._framed:
            self._keep = False  # a body delimited by the end of the connection: it is whole
            self._finish()
            return
        if self._waiter is not None and not self._waiter.done():
            if exc is None:
                self._fail(httpx.RemoteProtocolError("server disconnected before a complete answer"))
            else:
                self._fail(httpx.ReadError(str(exc) or type(exc).__name__))

    # --- httptools callbacks (called from feed_data) ----------------------------------------

    def on_message_begin(self) -> None:
        if self._state == _IDLE:  # more than one answer to one request: not trusted again
            self._keep = False
            raise httpx.RemoteProtocolError("an answer nobody asked for")
        self._headers, self._framed, self._state, self._head_size = [], False, _HEAD, 0

    def on_status(self, status: bytes) -> None:
        self._head_size += len(status) + 15  # with "HTTP/1.1 NNN " and CRLF

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._state != _HEAD:
            return  # a chunked body's trailers: ignored
        key = name.decode("latin-1")
        self._headers.append((key, value.decode("latin-1").strip()))
        self._head_size += len(name) + len(value) + 4
        if key[0] in "cCtT":
            lower = key.lower()
            if lower == "content-length":
                self._framed = True
            elif lower == "transfer-encoding":
                self._framed = value.rstrip().lower().endswith(b"chunked")

    def on_headers_complete(self) -> None:
        parser = self._parser
        if self._head_size > MAX_HEAD:
            raise httpx.RemoteProtocolError("response head too large")
        if not parser.get_http_version().startswith("1."):
            raise httpx.RemoteProtocolError("not an HTTP/1.x response")
        status = parser.get_status_code()
        if status < 200:
            if status not in _INTERIM:
                raise httpx.RemoteProtocolError(f"unexpected interim answer {status}")
            return  # llhttp ends it here; the final answer follows
        self._status, self._state = status, _BODY
        if self._head_only:  # llhttp would wait for a body the Content-Length describes
            self._keep = False
            self._finish()

    def on_body(self, body: bytes) -> None:
        if self._state == _BODY:
            self._body.append(body)

    def on_message_complete(self) -> None:
        if self._state == _HEAD:
            self._fed = 0  # an interim answer ended; the next head counts from here
            return
        if self._state == _BODY:
            self._keep = self._parser.should_keep_alive()
            self._finish()

    # --- the exchange ------------------------------------------------------------------------

    @property
    def reusable(self) -> bool:
        """True when another request may be sent on this connection."""
        transport = self._transport
        # An answer that came before the whole request was written (an early 413) leaves the
        # rest of that request queued to be written: such a connection is not reused either.
        return (self._keep and not self._lost and transport is not None
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
        self._body, self._headers, self._status, self._fed = [], [], 0, 0
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
        self._state = _IDLE
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(exc)
        self.close()

    def _finish(self) -> None:
        self._state = _IDLE
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)


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
