"""The tap does not hold stalled or idle connections open: a slowloris client is cut off.

Raw loopback sockets against a real sidecar with short timeouts (set through the
``SHADOWTRIAL_TAP__*`` overrides). No sleeps: each test waits on the socket with a
deadline far above the configured bound, and a client that paces its bytes does so by
sending one each time a short read on the socket times out.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from sidecar.config import load_config
from sidecar.errors import ConfigError
from tests.harness import Harness, exchange
from tests.sidecar.api import raw_http

#: The configured bounds (seconds) and how long a test waits for the server to act on them.
BOUND = 0.5
DEADLINE = 20.0

#: The idle bound of a test whose client sends a request: the server, the fake provider and
#: the client share one event loop, and on a loaded machine that loop can stall for longer
#: than ``BOUND`` between accepting a connection and reading the request the client wrote
#: at once, so the connection looked idle and was closed unanswered. Only the tests after
#: an answer wait for this bound.
IDLE_AFTER_REQUEST = 2.0


def timeouts(idle: float = BOUND) -> dict[str, str]:
    return {"SHADOWTRIAL_TAP__READ_TIMEOUT_SECONDS": str(BOUND), "SHADOWTRIAL_TAP__IDLE_TIMEOUT_SECONDS": str(idle)}


TIMEOUTS = timeouts()
ANSWERED = timeouts(IDLE_AFTER_REQUEST)


async def connect(h: Harness) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    assert h.sidecar
    return await raw_http.connect(h.sidecar.tap_url)


async def read_until_closed(reader: asyncio.StreamReader, deadline: float = DEADLINE) -> bytes:
    """Everything the tap sends until it closes the connection (:mod:`tests.sidecar.api.raw_http`)."""
    return await raw_http.read_until_closed(reader, deadline)


async def paced(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes) -> bytes:
    """``data`` a byte at a time until the tap answers or closes (:func:`raw_http.paced`)."""
    return await raw_http.paced(reader, writer, data, DEADLINE)


def close(writer: asyncio.StreamWriter) -> None:
    writer.close()


def request_head(length: int) -> bytes:
    return (
        "POST /v1/exchanges HTTP/1.1\r\nHost: tap\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def status_and_body(raw: bytes) -> tuple[int, bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


async def test_a_connection_that_sends_nothing_is_closed(tmp_path: Path) -> None:
    async with Harness(tmp_path, environ=TIMEOUTS) as h:
        reader, writer = await connect(h)
        try:
            assert await read_until_closed(reader) == b""
        finally:
            close(writer)


async def test_stalled_headers_are_cut_off(tmp_path: Path) -> None:
    async with Harness(tmp_path, environ=TIMEOUTS) as h:
        reader, writer = await connect(h)
        try:
            writer.write(b"POST /v1/exchanges HTTP/1.1\r\nHost: tap\r\nContent-Le")
            await writer.drain()
            assert await read_until_closed(reader) == b""
        finally:
            close(writer)


async def test_trickled_headers_are_cut_off(tmp_path: Path) -> None:
    """A slowloris sending a header byte at a time never completes a request: closed anyway."""
    async with Harness(tmp_path, environ=TIMEOUTS) as h:
        reader, writer = await connect(h)
        try:
            head = b"POST /v1/exchanges HTTP/1.1\r\nHost: tap\r\n" + b"X-Pad: " + b"a" * 4000 + b"\r\n"
            assert await paced(reader, writer, head) == b""
        finally:
            close(writer)


async def test_a_stalled_body_gets_408_and_the_connection_is_closed(tmp_path: Path) -> None:
    async with Harness(tmp_path, environ=ANSWERED) as h:
        trial = await h.create_trial(sample_rate=1.0)
        reader, writer = await connect(h)
        try:
            body = json.dumps([exchange(1)]).encode()
            writer.write(request_head(len(body)) + body[:20])
            await writer.drain()
            status, payload = status_and_body(await read_until_closed(reader))
        finally:
            close(writer)
        assert status == 408
        error = json.loads(payload)["error"]
        assert error["code"] == "read_timeout" and set(error) == {"code", "message", "field"}
        assert h.runtime.counters["tap_rejected_read_timeout"] == 1
        assert (await h.trial(trial["id"]))["funnel"]["total"] == 0


async def test_a_trickled_body_is_cut_off_by_the_total_read_bound(tmp_path: Path) -> None:
    """The bound is on the whole body, not between bytes: a byte every 0.1 s does not keep it open."""
    async with Harness(tmp_path, environ=ANSWERED) as h:
        reader, writer = await connect(h)
        try:
            body = json.dumps([exchange(i) for i in range(40)]).encode()
            writer.write(request_head(len(body)))
            await writer.drain()
            status, payload = status_and_body(await paced(reader, writer, body))
        finally:
            close(writer)
        assert status == 408
        assert json.loads(payload)["error"]["code"] == "read_timeout"


async def test_a_refused_request_with_a_stalled_body_is_not_read_on_for_long(tmp_path: Path) -> None:
    """401 before the body is read: aiohttp reads on a while (so the client sees the answer,
    not a reset), bounded by the read timeout, not by its own ten-second default."""
    env = {**ANSWERED, "TAP_SHARED_TOKEN": "s3cret-tap-token"}
    async with Harness(tmp_path, tap_token_env="TAP_SHARED_TOKEN", environ=env) as h:
        reader, writer = await connect(h)
        try:
            head = request_head(1000).replace(b"\r\n\r\n", b"\r\nAuthorization: Bearer wrong\r\n\r\n")
            writer.write(head + b"[{")
            await writer.drain()
            status, payload = status_and_body(await read_until_closed(reader, deadline=5.0))
        finally:
            close(writer)
        assert status == 401
        assert json.loads(payload)["error"]["code"] == "unauthorized"


async def test_an_idle_keep_alive_connection_is_closed_after_its_answer(tmp_path: Path) -> None:
    async with Harness(tmp_path, environ=ANSWERED) as h:
        await h.create_trial(sample_rate=1.0)
        reader, writer = await connect(h)
        try:
            body = json.dumps([exchange(1)]).encode()
            writer.write(request_head(len(body)) + body)
            await writer.drain()
            status, payload = status_and_body(await read_until_closed(reader))
        finally:
            close(writer)
        # The answer came whole, then the idle connection was closed (read_until_closed returned).
        assert status == 202
        assert json.loads(payload) == {"accepted": 1, "sampled": 1, "shed": 0}


async def test_a_request_written_after_a_stalled_loop_is_still_answered(tmp_path: Path) -> None:
    """The answer tests' idle bound outlasts a loop stall between accept and the client's write.

    With ``BOUND`` as the idle bound this failed as CI did: the stall (``time.sleep`` blocks
    the one loop, standing in for a loaded machine) let the idle timer close the connection
    before the request was read, and the client got nothing."""
    async with Harness(tmp_path, environ=ANSWERED) as h:
        await h.create_trial(sample_rate=1.0)
        reader, writer = await connect(h)
        try:
            time.sleep(BOUND + 0.2)  # the loop stalls; not a wait for anything
            await asyncio.sleep(0)  # and the client's write comes after the loop's next turn
            body = json.dumps([exchange(1)]).encode()
            writer.write(request_head(len(body)) + body)
            await writer.drain()
            status, _ = status_and_body(await read_until_closed(reader))
        finally:
            close(writer)
        assert status == 202


async def test_defaults_bound_both_and_the_config_refuses_nonsense(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text("[tap]\n")
    tap = load_config(str(path), {}).tap
    assert tap.read_timeout_seconds == 15.0 and tap.idle_timeout_seconds == 15.0
    for key in ("read_timeout_seconds", "idle_timeout_seconds"):
        for value in ("0", "-1", "3601", "nan", "inf", '"10"'):
            path.write_text(f"[tap]\n{key} = {value}\n")
            with pytest.raises(ConfigError, match=key):
                load_config(str(path), {})
