"""``--quick`` only: the engine's process of a benchmark's sidecar forked from a warm server, not spawned.

A sidecar starts its engine's process through :mod:`sidecar.engine.process`, by default as a fresh
interpreter (``spawn``) that imports the engine again: about 1 s of CPU, most of a ``--quick`` run's
engine. The other way it offers, multiprocessing's ``forkserver`` (the test suite's), forks each
engine's process from a server that imported the engine once; multiprocessing starts that server
as a fresh interpreter too, which costs the same import for a single engine.

:class:`WarmEngineServer` runs the same server loop (``multiprocessing.forkserver.main``) in a
process forked from the sidecar's process before the sidecar starts, while it runs one thread and
no event loop, with the engine imported; it registers it as this process's fork server, and sets
the ``forkserver`` start method. The sidecar then starts its engine's process as under the test
suite: the engine's code, the pipes and the supervision are the same; only who forks it changes.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import tempfile
import threading
import traceback
from multiprocessing import connection, forkserver, resource_tracker
from typing import Any, cast

from sidecar.engine import child as engine_child
from sidecar.engine import process as engine_start

#: The longest path an AF_UNIX socket's address holds on Linux (108 bytes with its terminating NUL).
SUN_PATH_MAX = 107
#: How long a stopped sidecar's engine's process may keep the server alive.
DEADLINE_S = 30.0


class WarmEngineServer:
    """Started before the sidecar in its process; ``stop()`` after the sidecar stopped."""

    def __init__(self) -> None:
        if threading.active_count() != 1:
            raise RuntimeError("the engine's server is forked only while this process runs one thread")
        assert callable(engine_child.main)  # imported here, so the server and every engine forked from it have it
        self._server: Any = cast(Any, forkserver)._forkserver  # multiprocessing's own state: no public call
        if self._server._forkserver_pid is not None:
            raise RuntimeError("this process has a fork server already")
        resource_tracker.ensure_running()  # the engine's process gets its descriptor, as from multiprocessing's
        self.address: str = cast(Any, connection).arbitrary_address("AF_UNIX")
        self._own_dir: str | None = None
        if len(os.fsencode(self.address)) > SUN_PATH_MAX:
            # A deep temp dir (a test's own) is past what a socket's address can hold: a private
            # directory in the system's temp dir instead, removed by stop() (Python 3.13's
            # multiprocessing falls back the same way).
            self._own_dir = tempfile.mkdtemp(prefix="st-fs-", dir="/tmp")
            self.address = os.path.join(self._own_dir, "s")
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(self.address)
            os.chmod(self.address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()
            self.pid = os.fork()
            if self.pid == 0:
                _serve(listener.fileno(), alive_r)  # never returns
        os.close(alive_r)
        self._server._forkserver_address = self.address
        self._server._forkserver_alive_fd = alive_w
        self._server._forkserver_pid = self.pid
        engine_start.use_start_method("forkserver")

    def stop(self) -> None:
        """Close the server's "alive" pipe (it exits when no process holds it) and reap it, killing
        it if an engine's process still holds the pipe past the deadline."""
        engine_start.use_start_method("spawn")
        server = self._server
        with server._lock:
            os.close(server._forkserver_alive_fd)
            server._forkserver_alive_fd = server._forkserver_pid = server._forkserver_address = None
        pidfd = os.pidfd_open(self.pid)
        try:
            ended, _, _ = select.select([pidfd], [], [], DEADLINE_S)  # readable once it has exited
        finally:
            os.close(pidfd)
        if not ended:
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        try:
            os.unlink(self.address)
        except FileNotFoundError:
            pass
        if self._own_dir is not None:
            os.rmdir(self._own_dir)


def _serve(listener_fd: int, alive_r: int) -> None:
    """The server: only its listening socket, its "alive" pipe and the standard streams kept open (as
    multiprocessing passes them to its own), then multiprocessing's loop until no client is left."""
    code = 1
    try:
        keep = {0, 1, 2, listener_fd, alive_r}
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:  # the listing's own descriptor, closed already
                    pass
        forkserver.main(listener_fd, alive_r, [])
    except SystemExit:
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)
