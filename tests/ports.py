"""A loopback port kept for a server that stops and starts again on it.

A test that stops a collector and starts it again "on the same port" must not let another
process take that port in between: under ``-n 4`` the other workers open connections and
servers all the time, and a freed port is soon someone's ephemeral port (CI once failed
exactly so: ``address already in use``). ``reserved_port`` binds a socket with
``SO_REUSEADDR`` and never listens on it. While it is held, the kernel hands the port to no
``bind(port 0)`` and no outgoing connection, yet a server that binds it with
``SO_REUSEADDR`` (aiohttp and asyncio do by default on Linux) can listen on it, as often as
it likes. A connection to the port while no server listens is refused, as for a server that
is down.
"""

from __future__ import annotations

import socket
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def reserved_port(host: str = "127.0.0.1") -> Iterator[int]:
    hold = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        hold.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hold.bind((host, 0))
        yield int(hold.getsockname()[1])
    finally:
        hold.close()
