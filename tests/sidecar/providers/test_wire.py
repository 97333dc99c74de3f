"""The provider transport's own HTTP/1.1 wire against scripted raw servers on loopback:
framings (length, chunked, to the end), keep-alive and its limits, interim answers, broken
answers, cancellation, TLS."""

from __future__ import annotations

import asyncio
import datetime
import ssl
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import msgspec
import pytest

from sidecar.providers.base import ChatRequest
from sidecar.providers.openai import OpenAIProvider
from sidecar.providers.transport import AiohttpTransport
from sidecar.providers.wire import MAX_HEAD

TIMEOUT = httpx.Timeout(5.0).as_dict()
OK_BODY = msgspec.json.encode(
    {"choices": [{"message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
     "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
)


def answer(body: bytes = OK_BODY, *, status: str = "200 OK", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode() + body


class Scripted:
    """A raw HTTP/1.1 server: reads each request whole and writes what ``reply(n)`` gives for
    the n-th request (``None``: close without answering). Counts connections and requests."""

    def __init__(self, reply: Callable[[int], bytes | None], close_after: bool = False) -> None:
        self.reply = reply
        self.close_after = close_after
        self.connections = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()
        self.handlers: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.handlers.add(task)
        self.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.requests.append(head + await reader.readexactly(length))
                out = self.reply(len(self.requests))
                if out is None:
                    return
                writer.write(out)
                await writer.drain()
                if self.close_after:
                    return
        finally:
            writer.close()
            self.closed.set()


@asynccontextmanager
async def scripted(server: Scripted, tls: ssl.SSLContext | None = None) -> AsyncIterator[str]:
    srv = await asyncio.start_server(server.handle, "127.0.0.1", 0, ssl=tls)
    port = srv.sockets[0].getsockname()[1]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}/v1/chat/completions"
    finally:
        if server.handlers:  # the client closed its connections: let each handler see it
            await asyncio.wait(server.handlers, timeout=5.0)
        srv.close()
        await srv.wait_closed()


async def post(transport: AiohttpTransport, url: str, body: bytes = b"{}") -> tuple[int, bytes]:
    reply = await transport.post(url, [("X-Probe", "1")], body, TIMEOUT)
    return reply.status_code, reply.content


async def connections_for_two_posts(server: Scripted) -> int:
    """Two POSTs through one transport, each answered 200 with ``OK_BODY``: the connections they took."""
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            assert [await post(transport, url) for _ in range(2)] == [(200, OK_BODY)] * 2
        finally:
            await transport.aclose()
    return server.connections


async def test_length_framed_answers_reuse_one_connection_and_the_request_is_framed() -> None:
    server = Scripted(lambda n: answer())
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            assert [await post(transport, url, b"abc") for _ in range(3)] == [(200, OK_BODY)] * 3
        finally:
            await transport.aclose()
    assert server.connections == 1
    head, _, body = server.requests[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/chat/completions HTTP/1.1" and body == b"abc"
    assert b"Host: 127.0.0.1:" + url.split(":")[2].split("/")[0].encode() in lines
    assert b"Content-Length: 3" in lines and b"X-Probe: 1" in lines


async def test_a_chunked_answer_with_extensions_and_trailers_is_read_whole_and_kept_alive() -> None:
    half = len(OK_BODY) // 2
    chunked = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               + f"{half:x};note=1\r\n".encode() + OK_BODY[:half] + b"\r\n"
               + f"{len(OK_BODY) - half:X}\r\n".encode() + OK_BODY[half:] + b"\r\n"
               + b"0\r\nX-Trailer: t\r\n\r\n")
    assert await connections_for_two_posts(Scripted(lambda n: chunked)) == 1


async def test_an_answer_to_the_end_of_the_connection_is_read_whole_and_not_reused() -> None:
    server = Scripted(lambda n: b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n" + OK_BODY,
                      close_after=True)
    assert await connections_for_two_posts(server) == 2


async def test_connection_close_and_an_expired_idle_connection_are_not_reused() -> None:
    server = Scripted(lambda n: answer(extra="Connection: close\r\n" if n == 1 else ""))
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        expiring = AiohttpTransport(httpx.Limits(max_connections=4, keepalive_expiry=0.0))
        try:
            await post(transport, url)  # Connection: close -> a second connection
            await post(transport, url)
            await post(transport, url)  # kept alive
            await post(expiring, url)
            await post(expiring, url)  # idle for longer than 0 s: not reused
        finally:
            await transport.aclose()
            await expiring.aclose()
    assert server.connections == 4


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    server = Scripted(lambda n: answer(), close_after=True)  # length-framed, yet the server hangs up
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            await post(transport, url)
            await server.closed.wait()
            idle = [c for conns in transport._idle.values() for c in conns]
            deadline = asyncio.get_running_loop().time() + 5.0
            while any(c.reusable for c in idle):  # until the client has seen the hang-up
                assert asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.01)
            assert await post(transport, url) == (200, OK_BODY)
        finally:
            await transport.aclose()
    assert server.connections == 2


async def test_interim_answers_are_skipped() -> None:
    server = Scripted(lambda n: b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n" + answer())
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            assert await post(transport, url) == (200, OK_BODY)
        finally:
            await transport.aclose()


@pytest.mark.parametrize("reply, error", [
    (b"SPDY/3 200 OK\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 2000 OK\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\n folded: header\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 12x\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (70 * 1024) + b"\r\n\r\n", httpx.RemoteProtocolError),
    (None, httpx.RemoteProtocolError),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: upgrade\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 199 Odd\r\n\r\n" + answer(), httpx.RemoteProtocolError),
    (b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc", httpx.RemoteProtocolError),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", httpx.RemoteProtocolError),
])
async def test_broken_answers_are_protocol_errors(reply: bytes | None, error: type[Exception]) -> None:
    server = Scripted(lambda n: reply, close_after=True)
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            with pytest.raises(error):
                await post(transport, url)
        finally:
            await transport.aclose()


async def test_a_broken_answer_is_a_connection_error_that_may_have_billed() -> None:
    server = Scripted(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\ncut", close_after=True)
    async with scripted(server) as url:
        provider = OpenAIProvider(url.removesuffix("/chat/completions"), "sk-x", timeout=httpx.Timeout(5.0),
                                  limits=httpx.Limits(max_connections=4), deadline_s=10.0, max_retries=3)
        try:
            result = await provider.chat(ChatRequest(model="m", messages=[{"role": "user", "content": "hi"}]))
        finally:
            await provider.aclose()
    assert (result.ok, result.error, result.attempts, result.may_have_billed) == (False, "connection", 1, True)


async def test_a_header_with_a_newline_is_never_sent() -> None:
    server = Scripted(lambda n: answer())
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            with pytest.raises(ValueError):
                await transport.post(url, [("X-Probe", "1\r\nX-Injected: 1")], b"{}", TIMEOUT)
        finally:
            await transport.aclose()
    assert server.requests == []


async def test_a_cancelled_exchange_closes_its_connection() -> None:
    arrived = asyncio.Event()

    def reply(n: int) -> bytes | None:
        if n == 1:
            arrived.set()
            return b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npart"  # and the rest never comes
        return answer()

    server = Scripted(reply)
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=1))
        try:
            task = asyncio.create_task(post(transport, url))
            await arrived.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert await post(transport, url) == (200, OK_BODY)  # on a new connection, the slot freed
        finally:
            await transport.aclose()
    assert server.connections == 2


def _tls_pair(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context with a self-signed certificate for 127.0.0.1, and a client context trusting it."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "shadowtrial test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    (tmp / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp / "key.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                    serialization.NoEncryption()))
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(tmp / "cert.pem", tmp / "key.pem")
    client = ssl.create_default_context(cafile=str(tmp / "cert.pem"))
    return server, client


async def test_tls_is_verified_and_then_carries_the_exchange() -> None:
    server = Scripted(lambda n: answer())
    with tempfile.TemporaryDirectory() as tmp:
        server_ctx, client_ctx = _tls_pair(Path(tmp))
        async with scripted(server, server_ctx) as url:
            untrusting = AiohttpTransport(httpx.Limits(max_connections=4))
            trusting = AiohttpTransport(httpx.Limits(max_connections=4))
            trusting._ssl = client_ctx  # the one CA this test made; the default is certifi's bundle
            try:
                with pytest.raises(httpx.ConnectError):
                    await post(untrusting, url)
                assert [await post(trusting, url) for _ in range(2)] == [(200, OK_BODY)] * 2
            finally:
                await untrusting.aclose()
                await trusting.aclose()
    assert (len(server.requests), server.connections) == (2, 1)  # the refused handshake never reached it


async def test_an_answer_before_the_whole_request_was_written_is_not_followed_on_that_connection() -> None:
    """An early refusal (413) while the body is still being written: the rest of that body is
    still queued on the connection, so the next request goes out on a new one."""
    connections: list[int] = []
    handlers: set[asyncio.Task[None]] = set()
    done = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        handlers.add(task)
        connections.append(1)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if len(connections) == 1:  # refuse at once, never read the body
                writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 0\r\n\r\n")
                await writer.drain()
                await done.wait()
            else:
                length = next(int(x.split(b":")[1]) for x in head.split(b"\r\n")
                              if x.lower().startswith(b"content-length"))
                await reader.readexactly(length)
                writer.write(answer())
                await writer.drain()
                await reader.read()  # until the client closes
        except ConnectionError:
            pass
        finally:
            writer.close()

    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}/v1/chat/completions"
    transport = AiohttpTransport(httpx.Limits(max_connections=4))
    try:
        first = await transport.post(url, [], b"x" * (32 << 20), TIMEOUT)  # beyond any socket buffer
        second = await transport.post(url, [], b"{}", TIMEOUT)
    finally:
        await transport.aclose()
        done.set()
        if handlers:
            await asyncio.wait(handlers, timeout=5.0)
        srv.close()
        await srv.wait_closed()
    assert (first.status_code, second.status_code, second.content) == (413, 200, OK_BODY)
    assert len(connections) == 2


async def test_a_silent_answer_on_a_reused_connection_is_a_read_timeout() -> None:
    """The connection's one timer, left from the first exchange, still cuts the second one."""
    server = Scripted(lambda n: answer() if n == 1 else b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nsilen")
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        timeout: dict[str, float | None] = {"pool": None, "connect": 5.0, "write": None, "read": 0.2}
        try:
            assert (await transport.post(url, [], b"{}", timeout)).status_code == 200
            with pytest.raises(httpx.ReadTimeout):
                await transport.post(url, [], b"{}", timeout)
        finally:
            await transport.aclose()
    assert server.connections == 1


async def test_a_head_past_the_limit_is_refused_before_it_ends() -> None:
    """A head still incomplete past MAX_HEAD is cut without waiting for its end (the server
    keeps the connection open)."""
    server = Scripted(lambda n: b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * (MAX_HEAD + 1024))
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            with pytest.raises(httpx.RemoteProtocolError, match="too large"):
                await post(transport, url)
        finally:
            await transport.aclose()


async def test_many_headers_past_the_limit_in_one_read_are_refused() -> None:
    head = b"".join(b"X-H%d: %s\r\n" % (i, b"v" * 60) for i in range(MAX_HEAD // 60))
    server = Scripted(lambda n: b"HTTP/1.1 200 OK\r\n" + head + b"Content-Length: 0\r\n\r\n", close_after=True)
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            with pytest.raises(httpx.RemoteProtocolError, match="too large"):
                await post(transport, url)
        finally:
            await transport.aclose()


async def test_bytes_past_the_end_of_an_answer_or_an_http10_answer_are_not_followed_on_that_connection() -> None:
    extra = Scripted(lambda n: answer() + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")  # one request, two answers
    old = Scripted(lambda n: answer().replace(b"HTTP/1.1", b"HTTP/1.0", 1))
    for server in (extra, old):
        assert await connections_for_two_posts(server) == 2


async def test_answers_without_a_body_keep_one_parser_across_the_connection() -> None:
    """204 and 304 end at their head (no Content-Length needed); the connection's one parser then
    reads the next answers, of every framing, on the same connection."""
    replies = [b"HTTP/1.1 204 No Content\r\n\r\n", b"HTTP/1.1 304 Not Modified\r\nETag: x\r\n\r\n",
               b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
               b"HTTP/1.1 100 Continue\r\n\r\n" + answer()]
    server = Scripted(lambda n: replies[n - 1])
    async with scripted(server) as url:
        transport = AiohttpTransport(httpx.Limits(max_connections=4))
        try:
            got = [await post(transport, url) for _ in range(4)]
        finally:
            await transport.aclose()
    assert got == [(204, b""), (304, b""), (200, b"abc"), (200, OK_BODY)]
    assert server.connections == 1
