"""The end of multiprocessing's fork server, which the engines' processes of in-process sidecars
fork from in tests (``sidecar.engine.process.use_start_method("forkserver")``, set in
tests/conftest.py).

Left alone it outlives the test process (it exits when the last process holding its "alive"
pipe does) and nobody reaps it, so its CPU and its children's (every engine's process) would be
counted nowhere. :func:`stop_engine_server` closes this process's end of that pipe and reaps it,
killing it if an engine's process still holds the pipe past a deadline. multiprocessing has no
public call for this (``ForkServer._stop`` waits without a bound), hence its private state.
"""

from __future__ import annotations

import os
import select
import signal
from multiprocessing import forkserver
from typing import Any

#: How long an engine's process still running may keep the server alive at the session's end.
DEADLINE_S = 30.0


def stop_engine_server() -> None:
    server: Any = forkserver._forkserver
    with server._lock:
        pid = server._forkserver_pid
        if pid is None:
            return
        os.close(server._forkserver_alive_fd)
        server._forkserver_alive_fd = None
        server._forkserver_pid = None
        address, server._forkserver_address = server._forkserver_address, None
        pidfd = os.pidfd_open(pid)
        try:
            ended, _, _ = select.select([pidfd], [], [], DEADLINE_S)  # readable once it has exited
        finally:
            os.close(pidfd)
        if not ended:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if address and not address.startswith("\0"):
            try:
                os.unlink(address)
            except FileNotFoundError:
                pass
