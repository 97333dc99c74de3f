"""Raw loopback sockets for tests that send what no HTTP client would: malformed headers,
unfinished requests, stalled bodies. No sleeps: reads wait on the socket with a deadline."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any
from urllib.parse import urlsplit


async def connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return await asyncio.open_connection(parts.hostname, parts.port)


async def read_until_closed(reader: asyncio.StreamReader, deadline: float) -> bytes:
    """Everything the server sends until it closes the connection; fails if it is still open at the deadline."""
    received = b""
    end = time.monotonic() + deadline
    while True:
        left = end - time.monotonic()
        if left <= 0:
            raise AssertionError(f"the server kept the connection open for {deadline} s; it sent {received[:200]!r}")
        try:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=left)
        except asyncio.TimeoutError:
            continue
        except ConnectionResetError:
            return received
        if not chunk:
            return received
        received += chunk


async def exchange(url: str, data: bytes, deadline: float = 20.0) -> bytes:
    """Send ``data`` on a new connection; return all the server sent until it closed."""
    reader, writer = await connect(url)
    try:
        writer.write(data)
        await writer.drain()
        return await read_until_closed(reader, deadline)
    finally:
        writer.close()


async def paced(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, deadline: float) -> bytes:
    """Send ``data`` a byte at a time, the next whenever the server has said nothing for 0.1 s,
    until the server answers or closes; return what it sent until it closed."""
    end = time.monotonic() + deadline
    for i in range(len(data)):
        if time.monotonic() > end:
            raise AssertionError(f"the server kept a trickling connection open for {deadline} s")
        try:
            chunk = await asyncio.wait_for(reader.read(65536), timeout=0.1)
        except asyncio.TimeoutError:
            try:
                writer.write(data[i : i + 1])
                await writer.drain()
            except ConnectionError:
                return b""
            continue
        except ConnectionResetError:
            return b""
        return chunk + (await read_until_closed(reader, deadline) if chunk else b"")
    raise AssertionError("the whole request was trickled in before the server cut it off; make it longer")


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1])


def json_error(raw: bytes) -> dict[str, Any]:
    """The ``error`` object of a raw JSON error answer (checked to have the project's shape)."""
    head, _, body = raw.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), raw[:300]
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message", "field"}, error
    return dict(error)
