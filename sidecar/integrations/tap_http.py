"""The plugin's POSTs to the tap: one keep-alive HTTP/1.1 connection, standard library only.

A gateway plugin posts a batch to the tap at most a few times a second, from the gateway's
own event loop, so each POST's CPU is the gateway's. httpx spent about 2.7 ms of CPU on one
(its client, transport, connection pool and h11 layers; measured beside a LiteLLM proxy,
issue 29); a request written as bytes on an ``asyncio`` stream and its answer's head read
back spends about 0.2 ms. This module is that: POST only, one connection at a time, kept
open between POSTs, closed after a timeout or anything odd.

The rules of :class:`~sidecar.integrations.sender.TapSender` are unchanged: one timeout per
POST (connecting included), never retried — except a POST on a kept-alive connection the tap
had already closed (no byte of an answer came back), which is sent once more on a new one:
the tap drops an exchange id it has seen, so a repeat cannot make a second case.
"""

from __future__ import annotations

import asyncio
import ssl
from urllib.parse import urlsplit


class TapTimeout(Exception):
    """The tap did not answer within the timeout (connecting included)."""


class TapUnreachable(Exception):
    """No answer: the connection was refused or lost, or the answer was not HTTP."""


class TapConnection:
    """POSTs JSON bodies to one URL over a kept-alive connection (see the module docstring).

    ``token`` goes in an ``Authorization: Bearer`` header; it is held only in the request's
    pre-built head, never logged. A plain-HTTP tap loads no certificates; an ``https`` one
    verifies the tap's (the system's CA bundle, loaded at the first POST)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 0.5) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("the tap URL must be http:// or https:// with a host")
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.timeout_s = timeout_s
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rpartition("@")[2]
        head = f"POST {target} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\n"
        if token:
            head += f"Authorization: Bearer {token}\r\n"
        #: Everything of a request's head but its per-POST headers: built once.
        self._head = head.encode("latin-1")
        self._ssl: ssl.SSLContext | None = None
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, body: bytes, headers: bytes = b"") -> int:
        """POST ``body``; ``headers`` are extra ``Name: value\\r\\n`` lines. Returns the status;
        raises :class:`TapTimeout` or :class:`TapUnreachable`."""
        request = b"%sContent-Length: %d\r\n%s\r\n%s" % (self._head, len(body), headers, body)
        try:
            async with asyncio.timeout(self.timeout_s):
                reused = self._reader is not None
                try:
                    return await self._exchange(request)
                except _StaleConnection:
                    if not reused:
                        raise TapUnreachable("the connection ended before an answer") from None
                    return await self._exchange(request)  # the tap had closed the idle connection
        except TimeoutError:
            self._drop_connection()
            raise TapTimeout() from None
        except (OSError, ValueError, EOFError, _StaleConnection, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError) as exc:
            self._drop_connection()
            raise TapUnreachable(type(exc).__name__) from None

    async def aclose(self) -> None:
        writer = self._writer
        self._drop_connection()
        if writer is not None:
            try:
                await asyncio.wait_for(writer.wait_closed(), self.timeout_s)
            except (OSError, TimeoutError):
                pass

    # -- one request and its answer --------------------------------------------------

    async def _exchange(self, request: bytes) -> int:
        reader, writer = await self._connection()
        try:
            writer.write(request)
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            self._drop_connection()
            if not exc.partial:
                raise _StaleConnection() from None
            raise
        except ConnectionError:  # reset or a broken pipe: no answer began either
            self._drop_connection()
            raise _StaleConnection() from None
        status, length, chunked, close = _parse_head(head)
        if chunked:
            await _skip_chunked(reader)
        elif length is not None:
            await reader.readexactly(length)
        else:  # neither: the body runs to the end of the connection
            await reader.read()
            close = True
        if close:
            self._drop_connection()
        return status

    async def _connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = self._reader, self._writer
        if reader is not None and writer is not None and not reader.at_eof() and not writer.is_closing():
            return reader, writer
        self._drop_connection()
        if self.tls and self._ssl is None:
            self._ssl = ssl.create_default_context()
        reader, writer = await asyncio.open_connection(
            self.host, self.port, ssl=self._ssl if self.tls else None,
            server_hostname=self.host if self.tls else None,
        )
        self._reader, self._writer = reader, writer
        return reader, writer

    def _drop_connection(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()


class _StaleConnection(Exception):
    """A kept-alive connection ended before any byte of the answer."""


def _parse_head(head: bytes) -> tuple[int, int | None, bool, bool]:
    """Status, Content-Length, chunked, Connection: close — of an answer's head (ValueError if not HTTP)."""
    lines = head.split(b"\r\n")
    version, status, *_ = lines[0].split(b" ", 2)
    if not version.startswith(b"HTTP/1."):
        raise ValueError("not an HTTP/1.x answer")
    length: int | None = None
    chunked = False
    close = version == b"HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
            if length < 0:
                raise ValueError("negative Content-Length")
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            close = b"close" in value.lower() or (close and b"keep-alive" not in value.lower())
    return int(status), length, chunked, close


async def _skip_chunked(reader: asyncio.StreamReader) -> None:
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16)
        if size == 0:
            while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers, then the blank line
                pass
            return
        await reader.readexactly(size + 2)
