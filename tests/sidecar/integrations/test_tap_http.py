"""The plugin's hand-written POST to the tap (``sidecar.integrations.tap_http``) and its
encoder (``sender.encode``), against real servers on loopback (issue 29: the plugin's CPU)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from sidecar.integrations import sender
from sidecar.integrations.tap_http import TapConnection, TapTimeout, TapUnreachable
from tests.harness import DELIVERY_TIMEOUT_S, Harness
from tests.ports import reserved_port

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


@asynccontextmanager
async def server(handler: Handler) -> AsyncIterator[tuple[str, list[int]]]:
    """A raw TCP server on 127.0.0.1: its URL, and one entry per connection accepted."""
    connections: list[int] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        try:
            await handler(reader, writer)
        finally:
            writer.close()

    srv = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1/exchanges?x=1", connections
    finally:
        srv.close()


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    return head, await reader.readexactly(length)


async def test_posts_share_one_kept_alive_connection_with_the_head_the_tap_needs() -> None:
    seen: list[tuple[bytes, bytes]] = []

    async def tap(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                seen.append(await read_request(reader))
            except asyncio.IncompleteReadError:
                return
            writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}")

    async with server(tap) as (url, connections):
        conn = TapConnection(url, token="sk-secret", timeout_s=2.0)
        for i in range(3):
            assert await conn.post(b"[%d]" % i, b"Shadowtrial-Plugin-Stats: {}\r\n") == 202
        await conn.aclose()
    assert len(connections) == 1 and [body for _, body in seen] == [b"[0]", b"[1]", b"[2]"]
    head = seen[0][0].decode()
    assert head.startswith("POST /v1/exchanges?x=1 HTTP/1.1\r\n")
    for line in ("Authorization: Bearer sk-secret", "Content-Type: application/json", "Content-Length: 3",
                 "Shadowtrial-Plugin-Stats: {}", f"Host: 127.0.0.1:{url.split(':')[2].split('/')[0]}"):
        assert line in head


async def test_a_connection_the_tap_closed_while_idle_is_replaced_once() -> None:
    """The tap closes a kept-alive connection after its answer; the next POST goes on a new one."""
    async def tap(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()  # then the handler returns and the connection closes, unannounced

    async with server(tap) as (url, connections):
        conn = TapConnection(url, timeout_s=2.0)
        assert await conn.post(b"[]") == 202
        assert await conn.post(b"[]") == 202
        await conn.aclose()
    assert len(connections) == 2


async def test_chunked_and_closing_answers_are_read_whole() -> None:
    answers = [
        b"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\n\r\n",
        b"HTTP/1.1 503 Unavailable\r\nConnection: close\r\n\r\nbusy",
    ]

    async def tap(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for answer in answers:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                return
            writer.write(answer)
            await writer.drain()
        writer.write_eof()

    async with server(tap) as (url, connections):
        conn = TapConnection(url, timeout_s=2.0)
        assert await conn.post(b"[]") == 400
        assert await conn.post(b"[]") == 503  # the chunked body was consumed: the next answer is whole
        assert await conn.post(b"[]") == 400  # "Connection: close" was obeyed: a new connection
        await conn.aclose()
    assert len(connections) == 2


async def test_a_hung_tap_times_out_and_a_closed_port_is_unreachable() -> None:
    release = asyncio.Event()

    async def hung(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await release.wait()

    async with server(hung) as (url, _):
        conn = TapConnection(url, timeout_s=0.2)
        with pytest.raises(TapTimeout):
            await conn.post(b"[]")
        release.set()
        await conn.aclose()
    with reserved_port() as port, pytest.raises(TapUnreachable):  # held, with no listener: refused
        await TapConnection(f"http://127.0.0.1:{port}/", timeout_s=2.0).post(b"[]")

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SMTP ready\r\n\r\n")

    async with server(garbage) as (url, _):
        with pytest.raises(TapUnreachable):
            await TapConnection(url, timeout_s=2.0).post(b"[]")


async def test_the_sender_posts_to_the_real_tap_without_an_httpx_client(tmp_path: Path) -> None:
    """httpx spent about 2.7 ms of the gateway's CPU per POST; the batches now go over the
    hand-written connection (httpx stays for the admin reads and tests' transports)."""
    async with Harness(tmp_path) as h:
        s = sender.TapSender(h.sidecar.tap_url + "/v1/exchanges", flush_s=0.0, timeout_s=DELIVERY_TIMEOUT_S)
        s.drop("no_call_id", 1)
        from tests.integrations.test_litellm_plugin import small_kwargs  # the captured kwargs, mapped
        from sidecar.integrations.litellm import TapPlugin

        exchange = TapPlugin().exchange_from(small_kwargs(0))
        assert exchange is not None
        s.offer(exchange)
        assert s._flusher is not None
        await s._flusher
        assert s.counts["sent"] == 1 and s._client is None
        await s.aclose()
        assert h.runtime.counters["exchanges_received"] == 1


WEIRD: list[Any] = [
    {"a": "é ✓ \u2028", "b": [1, 2.5, 1e-06, -0.0, True, None], "c": {"d": 10**30}},
    {1: "int key", None: "none key", 2.5: "float key"},
    {"deep": [[[{"x": "y"}]]], "big": 2**70, "neg": -(2**64)},
]
REFUSED: list[Any] = [
    {"x": float("nan")}, {"x": [float("inf")]}, {"x": "\ud800"}, {"x": object()}, {"x": b"bytes"},
]


@pytest.mark.parametrize("use_orjson", [True, False])
def test_encode_writes_what_the_standard_encoder_writes_and_refuses_what_it_refuses(
    use_orjson: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """orjson writes NaN and infinities as null where the tap refuses them: the encoder must
    refuse them exactly as ``json.dumps(..., allow_nan=False)`` does, with or without orjson."""
    if not use_orjson:
        monkeypatch.setattr(sender, "_orjson", None)
    elif sender._orjson is None:
        pytest.skip("orjson is not installed")
    for value in WEIRD:
        expected = json.loads(json.dumps(value, ensure_ascii=False, allow_nan=False))
        item = sender.encode(value)
        assert item is not None and json.loads(item) == expected
    for value in REFUSED:
        assert sender.encode(value) is None, value


def test_a_tap_url_the_connection_cannot_use_fails_the_start_not_a_later_task() -> None:
    """A port that is not a number passes the settings' check; the sender refuses it when
    built (the plugin then disables itself in one log line) instead of a flush task failing."""
    with pytest.raises(ValueError):
        sender.TapSender("http://tap:port/v1/exchanges")
    assert TapConnection("http://tap:8790/v1/exchanges").port == 8790
