"""How every listener (tap, admin with its console, collector) holds its connections.

aiohttp answers a request its HTTP parser refuses — a control byte in a header, a line
over the limit, a broken request line — itself, before any middleware sees it: a
plain-text 400 quoting the offending line, and an ERROR with a traceback quoting it
again. When the malformed line was ``Authorization: Bearer <token>`` the token was in
the answer and in the log, and any client could fill the log with tracebacks. A
:class:`ListenerRunner` serves an app with a request handler that instead:

- answers a parser error ``{"error": {"code": "malformed_request", "message", "field":
  null}}`` with aiohttp's status (400) and closes the connection; the message is chosen
  from a fixed table by the error's class (:func:`describe`), never the parser's text;
- logs it as one WARNING naming the listener, the peer's address and that fixed
  description, at most once per ``log_interval_s`` per listener; the refusals in between
  are counted into the next line (:class:`RefusalLog`). No traceback, no request bytes;
- logs what aiohttp would log with a traceback (a defect below the app) as one ERROR
  with the exception's type only, rate-limited the same way; a request whose client
  closed the connection mid-body (:func:`client_gone`) is not logged at all;
- closes a connection idle for ``idle_timeout_s`` — before its first request, between
  two, or with its headers unfinished (aiohttp's keep-alive timer, armed when the
  connection is made and not re-armed by incoming bytes);
- bounds the body: a request whose body has not fully arrived ``read_timeout_s`` after
  its headers gets :class:`BodyReadTimeout` (a ``408``) from its pending read, and the
  connection is closed after the answer; an answer given without reading the body (a
  ``401``) reads on for at most ``min(read_timeout_s, 10)`` s (``lingering_time``) and
  the connection is closed when the read timeout passes. A listener whose handlers bound
  their reads themselves (the tap, with its own ``408 read_timeout``) sets
  ``bound_body_reads = False``.

This subclasses aiohttp's ``RequestHandler`` and ``Server`` (``handle_error``,
``finish_response``, ``log_exception``, ``__call__``) because aiohttp offers no other hook
for errors raised below the app (aiohttp issue #3287, open);
``tests/sidecar/test_malformed_headers.py`` pins the behaviour, so an aiohttp upgrade that
changes those methods fails there.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, Callable

from aiohttp import http_exceptions as hx
from aiohttp import web
from aiohttp.streams import StreamReader

log = logging.getLogger("shadowtrial.http")

#: aiohttp's own lingering time, kept as the most a refused body is read on.
MAX_LINGERING_S = 10.0


@dataclass(frozen=True, slots=True)
class Listener:
    """One listener's name (in its log lines) and its connection bounds, in seconds."""

    name: str
    read_timeout_s: float
    idle_timeout_s: float
    #: False when the app bounds its own body reads (and answers its own 408).
    bound_body_reads: bool = True
    #: At most one WARNING (malformed requests) and one ERROR (defects) per this many seconds.
    log_interval_s: float = 60.0


class BodyReadTimeout(web.HTTPRequestTimeout):
    """Raised from a request's body read when the body did not arrive in time.

    An app's error middleware maps it like any ``HTTPException`` (code ``read_timeout``,
    from its reason); one without such a middleware answers this JSON as it stands."""

    def __init__(self, seconds: float) -> None:
        error = {"code": "read_timeout", "message": f"the body did not arrive within {seconds:g} s", "field": None}
        super().__init__(reason="Read Timeout", text=json.dumps({"error": error}), content_type="application/json")


# -- what a refusal says ------------------------------------------------------------------------

#: llhttp's reasons (such as "Invalid header value char") are fixed strings, which aiohttp
#: puts before ``":\n\n"`` and the quoted bytes; one of letters and spaces only is shown.
_SAFE_DESCRIPTION = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")

#: Most specific class first.
_DESCRIPTIONS: tuple[tuple[type[BaseException], str], ...] = (
    (hx.BadHttpMethod, "the request line does not start with an HTTP method (TLS sent to a plain-HTTP port?)"),
    (hx.BadStatusLine, "the request line is not valid HTTP/1.1"),
    (hx.InvalidURLError, "the request target is not a valid URL"),
    (hx.LineTooLong, "the request line or a header is longer than this listener accepts"),
    (hx.InvalidHeader, "a header is not valid HTTP/1.1"),
    (hx.PayloadEncodingError, "the body's framing (Content-Length, Transfer-Encoding) is not valid"),
)


def describe(exc: BaseException | None) -> str:
    """What a parser error is, in words that quote nothing the client sent."""
    for cls, text in _DESCRIPTIONS:
        if isinstance(exc, cls):
            return text
    if isinstance(exc, hx.HttpProcessingError):
        head, sep, _quoted = exc.message.partition(":\n\n")
        if sep and 0 < len(head) <= 64 and set(head) <= _SAFE_DESCRIPTION:
            return f"the request is not valid HTTP/1.1 ({head.lower()})"
    return "the request is not valid HTTP/1.1"


def client_gone(request: web.BaseRequest) -> bool:
    """Whether the client closed the connection (aiohttp then fails the pending body read
    with ``ConnectionResetError``): nobody to answer, and nothing to log — a client that
    disconnects mid-body in a loop must not fill the log."""
    return request.transport is None


def body_incomplete(request: web.BaseRequest) -> bool:
    """Whether the request's body has not fully arrived (a handler's time ran out waiting on the client)."""
    return not request.content.is_eof()


def stalled_body(request: web.BaseRequest, seconds: float) -> BodyReadTimeout:
    """The 408 to raise when a handler's own time ran out while the body was still arriving;
    the listener closes the connection after it instead of reading on."""
    protocol = request.protocol
    if isinstance(protocol, _Protocol):
        protocol.close_after_answer = True
    return BodyReadTimeout(seconds)


def _json_error(status: int, code: str, message: str) -> web.Response:
    body = json.dumps({"error": {"code": code, "message": message, "field": None}})
    response = web.Response(status=status, text=body, content_type="application/json")
    response.force_close()
    return response


class RefusalLog:
    """A listener's lines about requests refused below the app: at most one per
    ``interval_s`` and level; the ones in between are counted into the next line (a
    client sending malformed requests in a loop costs one line a minute, not one each)."""

    def __init__(self, listener: str, *, interval_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.listener = listener
        self.interval_s = interval_s
        self.clock = clock
        self._next: dict[int, float] = {}
        self._held: dict[int, int] = {}

    def note(self, level: int, text: str, remote: str | None) -> None:
        """Log ``text`` (fixed wording, never request bytes) from ``remote``, or count it."""
        now = self.clock()
        if now < self._next.get(level, float("-inf")):
            self._held[level] = self._held.get(level, 0) + 1
            return
        held = self._held.pop(level, 0)
        self._next[level] = now + self.interval_s
        more = f"; {held} more since the last such line" if held else ""
        log.log(level, "%s listener: %s from %s%s", self.listener, text, remote or "an unknown peer", more)


# -- the request handler ------------------------------------------------------------------------


class _Deadline:
    """The read deadline of one request's body."""

    def __init__(self, protocol: _Protocol, payload: StreamReader, seconds: float) -> None:
        self.protocol = protocol
        self.payload = payload
        self.seconds = seconds
        self.answered = False
        self.expired = False
        self._timer = asyncio.get_running_loop().call_later(seconds, self._expire)
        payload.on_eof(self._timer.cancel)

    def _expire(self) -> None:
        if self.payload.is_eof():
            return
        if self.answered:  # the answer is out, aiohttp is reading on (lingering): stop now
            self.protocol.force_close()
            return
        self.expired = True
        self.payload.set_exception(BodyReadTimeout(self.seconds))


class _Protocol(web.RequestHandler):
    """aiohttp's request handler, answering and logging errors below the app safely (module doc)."""

    def __init__(self, manager: _Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self.listener = manager.listener
        self.refusals = manager.refusals
        self._deadline: _Deadline | None = None
        #: Set while a request is handled: close the connection once its answer is out.
        self.close_after_answer = False

    def watch_body(self, payload: StreamReader) -> None:
        """Start the read deadline of the request whose body is ``payload``."""
        self._deadline = None
        self.close_after_answer = False
        if self.listener.bound_body_reads and not payload.is_eof():
            self._deadline = _Deadline(self, payload, self.listener.read_timeout_s)

    def handle_error(
        self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:  # as aiohttp: an answer has begun, the connection is broken
            raise ConnectionError("a response was already sent; cannot send the error")
        if isinstance(exc, ConnectionError) and client_gone(request):
            return _json_error(400, "client_closed", "the client closed the connection")  # never delivered
        if status >= 500:  # a defect (500) or a handler's unhandled TimeoutError (504)
            self.refusals.note(logging.ERROR, f"request failed below the app ({type(exc).__name__}, {status})",
                               request.remote)
            return _json_error(status, "internal_error", "the server failed to handle the request")
        text = describe(exc)
        self.refusals.note(logging.WARNING, f"refused a malformed request: {text}", request.remote)
        return _json_error(status, "malformed_request", text)

    def log_exception(self, *args: Any, **kw: Any) -> None:
        # aiohttp's text may quote the request (a handler's wrong return value's repr): the type only.
        exc = kw.get("exc_info")
        kind = type(exc).__name__ if isinstance(exc, BaseException) else "no exception"
        self.refusals.note(logging.ERROR, f"unexpected error handling a request ({kind})", None)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        result = await super().finish_response(request, resp, start_time)
        deadline = self._deadline
        if deadline is not None:
            deadline.answered = True
        if self.close_after_answer or (deadline is not None and deadline.expired):
            self.force_close()  # the 408 is out; read nothing more from a stalled client
        return result


class _Server(web.Server):
    """aiohttp's server, making :class:`_Protocol` handlers."""

    def __init__(
        self, app: web.Server, *, listener: Listener, refusals: RefusalLog, protocol_kw: dict[str, Any],
    ) -> None:
        self._app_request_factory = app.request_factory
        super().__init__(app.request_handler, request_factory=self._make_request_watched,
                         handler_cancellation=app.handler_cancellation, **protocol_kw)
        self.listener = listener
        self.refusals = refusals
        self._protocol_kw = protocol_kw

    def _make_request_watched(
        self, message: Any, payload: StreamReader, protocol: web.RequestHandler, writer: Any, task: Any,
    ) -> web.BaseRequest:
        request = self._app_request_factory(message, payload, protocol, writer, task)
        if isinstance(protocol, _Protocol):
            protocol.watch_body(payload)
        return request

    def __call__(self) -> web.RequestHandler:
        return _Protocol(self, loop=asyncio.get_running_loop(), **self._protocol_kw)


class ListenerRunner(web.AppRunner):
    """``web.AppRunner`` for one of the product's listeners (module doc); the access log is off.

    The app's ``handler_args`` are not read: pass ``auto_decompress`` here."""

    def __init__(
        self, app: web.Application, listener: Listener, *, auto_decompress: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.listener = listener
        self.refusals = RefusalLog(listener.name, interval_s=listener.log_interval_s, clock=clock)
        self._protocol_kw: dict[str, Any] = {
            "access_log": None,
            "keepalive_timeout": listener.idle_timeout_s,
            "lingering_time": min(listener.read_timeout_s, MAX_LINGERING_S),
            "auto_decompress": auto_decompress,
        }
        super().__init__(app, **self._protocol_kw)

    async def _make_server(self) -> web.Server:
        app_server = await super()._make_server()  # the app's start-up; its handler and request factory
        return _Server(app_server, listener=self.listener, refusals=self.refusals, protocol_kw=self._protocol_kw)
