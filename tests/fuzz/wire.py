"""A bare HTTP/1.1 client on one keep-alive connection, for the fuzz tests' thousands of requests.

httpx spent more CPU per request than the sidecar spent answering it (issue 29: most of the
admin fuzz's time outside hypothesis went to the client's layers). This one writes the request
as httpx would (its default headers: ``Host``, ``Accept``, ``Accept-Encoding``, ``Connection``,
``User-Agent``; ``Content-Length`` for a body, and ``0`` for a bodiless POST, PUT or PATCH; a
header the caller gives replaces the default of that name) and reads the answer into an
:class:`httpx.Response`, so the tests' checks read it as before. It reconnects when the server
closes the connection (``Connection: close``, or a close before answering a reused connection).
Blocking (:class:`Client`, for a test's sending thread) and asyncio (:class:`AsyncClient`).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from typing import Protocol
from urllib.parse import urlsplit

import httpx

Headers = Sequence[tuple[str, str | bytes]]
DEFAULTS = (("Accept", b"*/*"), ("Accept-Encoding", b"gzip, deflate"), ("Connection", b"keep-alive"),
            ("User-Agent", f"python-httpx/{httpx.__version__}".encode()))
BODY_METHODS = ("POST", "PUT", "PATCH")


def request_bytes(host: bytes, method: str, target: str, body: bytes | None, headers: Headers) -> bytes:
    given = [(name, value if isinstance(value, bytes) else value.encode()) for name, value in headers]
    names = {name.lower() for name, _ in given}
    lines = [f"{method} {target} HTTP/1.1".encode(), b"Host: " + host]
    if body or (method in BODY_METHODS and "content-length" not in names):
        lines.append(b"Content-Length: %d" % len(body or b""))
    lines += [name.encode() + b": " + value for name, value in DEFAULTS if name.lower() not in names]
    lines += [name.encode() + b": " + value for name, value in given]
    return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")


class _Reader(Protocol):
    def readline(self) -> bytes: ...
    def read(self, n: int) -> bytes: ...


class _Closed(Exception):
    """The server closed the connection before a byte of the answer."""


Head = tuple[int, list[tuple[bytes, bytes]], dict[bytes, bytes], bool]


def _head(status_line: bytes, lines: Sequence[bytes]) -> Head:
    """The status, the header fields (as sent, and by lower-case name), and whether the connection stays open."""
    version, status, *_ = status_line.split(b" ", 2)
    raw = [(name.strip(), value.strip()) for name, _, value in (line.partition(b":") for line in lines if line.strip())]
    fields = {name.lower(): value for name, value in raw}
    return int(status), raw, fields, fields.get(b"connection", b"").lower() != b"close" and version == b"HTTP/1.1"


def _bodiless(method: str, code: int) -> bool:
    return method == "HEAD" or code in (204, 304) or 100 <= code < 200


def parse(readline: Callable[[], bytes], read: Callable[[int], bytes], method: str) -> tuple[httpx.Response, bool]:
    """One answer, and whether the connection stays open (blocking reads)."""
    status_line = readline()
    if not status_line:
        raise _Closed
    lines = []
    while (line := readline()) not in (b"\r\n", b"\n", b""):
        lines.append(line)
    code, raw, fields, keep = _head(status_line, lines)
    if _bodiless(method, code):
        content = b""
    elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while size := int(readline().split(b";")[0], 16):
            parts.append(read(size))
            readline()
        while readline() not in (b"\r\n", b"\n", b""):
            pass  # trailers
        content = b"".join(parts)
    elif b"content-length" in fields:
        content = read(int(fields[b"content-length"]))
    else:
        content, keep = read(-1), False
    return httpx.Response(code, headers=raw, content=content), keep


class Client:
    """Blocking; one connection at a time, reopened when the server closed it."""

    def __init__(self, base_url: str, timeout: float = 60.0) -> None:
        parts = urlsplit(base_url)
        assert parts.hostname and parts.port
        self.address, self.timeout = (parts.hostname, parts.port), timeout
        self.host = parts.netloc.encode()
        self._sock: socket.socket | None = None
        self._file: _Reader | None = None

    def request(self, method: str, target: str, *, content: bytes | None = None,
                headers: Headers = ()) -> httpx.Response:
        data = request_bytes(self.host, method, target, content, headers)
        for attempt in (0, 1):
            reused = self._sock is not None
            if self._sock is None:
                self._sock = socket.create_connection(self.address, timeout=self.timeout)
                self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._file = self._sock.makefile("rb")
            assert self._file is not None
            try:
                try:
                    self._sock.sendall(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server answered early (a refusal) and closed: read what it said
                file = self._file
                response, keep = parse(file.readline, file.read, method)
            except (_Closed, ConnectionResetError):
                self.close()
                if reused and attempt == 0:
                    continue  # a kept connection the server had closed: once more on a new one
                raise
            if not keep:
                self.close()
            return response
        raise AssertionError("unreachable")

    def post(self, target: str, *, content: bytes, headers: Headers = ()) -> httpx.Response:
        return self.request("POST", target, content=content, headers=headers)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = self._file = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClient:
    """On the running loop; one connection at a time, reopened when the server closed it."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        assert parts.hostname and parts.port
        self.address, self.timeout = (parts.hostname, parts.port), timeout
        self.host = parts.netloc.encode()
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def request(self, method: str, target: str, *, content: bytes | None = None,
                      headers: Headers = ()) -> httpx.Response:
        return await asyncio.wait_for(self._request(method, target, content, headers), self.timeout)

    async def get(self, target: str) -> httpx.Response:
        return await self.request("GET", target)

    async def _request(self, method: str, target: str, content: bytes | None, headers: Headers) -> httpx.Response:
        data = request_bytes(self.host, method, target, content, headers)
        for attempt in (0, 1):
            reused = self._streams is not None
            if self._streams is None:
                self._streams = await asyncio.open_connection(*self.address, limit=2**20)
            reader, writer = self._streams
            try:
                writer.write(data)
                try:
                    await writer.drain()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server answered early (a refusal) and closed: read what it said
                # The answer is read whole first (it is small), then parsed without awaiting.
                head = await reader.readuntil(b"\r\n\r\n")
                response, keep = await _read_answer(head, reader, method)
            except (asyncio.IncompleteReadError, ConnectionResetError) as exc:
                await self.aclose()
                if reused and attempt == 0 and not getattr(exc, "partial", b""):
                    continue  # a kept connection the server had closed: once more on a new one
                raise
            if not keep:
                await self.aclose()
            return response
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        if self._streams is not None:
            writer = self._streams[1]
            self._streams = None
            writer.close()
            try:
                await writer.wait_closed()
            except (ConnectionResetError, BrokenPipeError):
                pass


async def _read_answer(head: bytes, reader: asyncio.StreamReader, method: str) -> tuple[httpx.Response, bool]:
    """The answer whose head (up to the blank line) is read: its body as its framing says."""
    status_line, *lines = head.split(b"\r\n")
    code, raw, fields, keep = _head(status_line, lines)
    if _bodiless(method, code):
        content = b""
    elif fields.get(b"transfer-encoding", b"").lower() == b"chunked":
        parts = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            parts.append((await reader.readexactly(size + 2))[:-2])
        while (await reader.readuntil(b"\r\n")) != b"\r\n":
            pass  # trailers
        content = b"".join(parts)
    elif b"content-length" in fields:
        content = await reader.readexactly(int(fields[b"content-length"]))
    else:
        content, keep = await reader.read(), False
    return httpx.Response(code, headers=raw, content=content), keep
