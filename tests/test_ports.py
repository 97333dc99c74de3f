"""The reserved port: nobody else gets it, our server gets it every time, and it refuses
connections while our server is down."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.ports import reserved_port


def test_a_reserved_port_is_refused_to_others_and_given_to_our_server_each_time() -> None:
    with reserved_port() as port:
        other = socket.socket()
        with pytest.raises(OSError):
            other.bind(("127.0.0.1", port))  # a plain bind elsewhere: taken
        other.close()
        fresh = [socket.socket() for _ in range(64)]
        try:
            for s in fresh:
                s.bind(("127.0.0.1", 0))
            assert port not in {s.getsockname()[1] for s in fresh}, "the kernel handed the reserved port out"
        finally:
            for s in fresh:
                s.close()
        probe = socket.socket()
        with pytest.raises(ConnectionRefusedError):
            probe.connect(("127.0.0.1", port))  # down: refused, as a stopped server
        probe.close()

        async def up_and_down() -> None:
            loop = asyncio.get_running_loop()
            for _ in range(2):  # start, stop, start again on the same port
                server = await loop.create_server(asyncio.Protocol, "127.0.0.1", port)
                assert server.sockets[0].getsockname()[1] == port
                server.close()
                await server.wait_closed()

        asyncio.run(up_and_down())
