"""A warm parent for the ``shadowtrial`` processes tests start (``serve`` above all).

Starting ``shadowtrial serve`` costs about 1.2 s of CPU before it does anything, nearly all
of it the interpreter importing the sidecar (issue 29). :func:`shared` starts, once per test
process, one Python process that imports the command and the sidecar; :func:`create_subprocess`
forks it, and the child runs ``python -m sidecar.cli.main ARGS`` as the interpreter would
(``runpy``, the same ``__main__``, ``SystemExit`` becoming the exit status, an uncaught
exception printed as a traceback with status 1, ``atexit`` run) with the stdin, stdout and
stderr the test hands it (passed as file descriptors), in a session of its own when asked.
The child is a real process: its exit status is the one the kernel reports, signals reach it
by its pid (or its group's), and whatever it starts (the engine's process) it starts as
``serve`` does. The test sees it through :class:`ForkedProcess`, shaped like
``asyncio.subprocess.Process`` (``pid``, ``returncode``, ``stdout``, ``send_signal``, ``kill``,
``wait``).

The parent (``python -m tests.sidecar.forkserve FD``) talks over a ``SOCK_SEQPACKET`` socket:
a request is one JSON message carrying the three descriptors; it answers ``{"id", "pid"}`` once
forked and ``{"id", "rc"}`` once the child has exited (it waits on pidfds: one thread, so a fork
never copies a lock another thread holds). :func:`close_shared` (the session's end) ends it and
reaps it, so its CPU and its children's are counted with the tests'.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import json
import os
import random
import runpy
import selectors
import signal
import socket
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_MESSAGE = 65536


class ForkServer:
    """The warm parent, seen from the test process."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWTRIAL_")}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.sidecar.forkserve", str(theirs.fileno())], cwd=REPO, env=env,
            stdin=subprocess.DEVNULL, pass_fds=[theirs.fileno()],
        )
        theirs.close()
        self.sock = ours
        self._lock = threading.Lock()
        self._next = 0
        self._pids: dict[int, concurrent.futures.Future[int]] = {}
        self._rcs: dict[int, concurrent.futures.Future[int]] = {}
        self._reader = threading.Thread(target=self._read, name="forkserve-reader", daemon=True)
        self._reader.start()

    def spawn(self, args: list[str], *, stdin: int, stdout: int, stderr: int, cwd: Path = REPO,
              new_session: bool = False, module: str = "sidecar.cli.main") -> tuple[int, concurrent.futures.Future[int]]:
        """Fork a child running ``python -m MODULE ARGS`` on these descriptors; (its pid, its exit status to come)."""
        pid_f: concurrent.futures.Future[int] = concurrent.futures.Future()
        rc_f: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._lock:
            self._next += 1
            ident = self._next
            self._pids[ident], self._rcs[ident] = pid_f, rc_f
            message = json.dumps({"id": ident, "argv": args, "cwd": str(cwd), "session": new_session,
                                  "module": module}).encode()
            socket.send_fds(self.sock, [message], [stdin, stdout, stderr])
        return pid_f.result(timeout=30), rc_f

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(_MESSAGE)
            except OSError:
                data = b""
            if not data:
                break
            reply = json.loads(data)
            with self._lock:
                done = self._pids.pop(reply["id"]) if "pid" in reply else self._rcs.pop(reply["id"])
                if not done.done():  # never raise here: this thread serves every child of the test process
                    done.set_result(reply["pid"] if "pid" in reply else reply["rc"])
        with self._lock:  # the parent is gone: nothing more will come
            for f in [*self._pids.values(), *self._rcs.values()]:
                f.set_exception(AssertionError("the fork server ended"))
            self._pids.clear()
            self._rcs.clear()

    def close(self) -> None:
        """End the parent (it kills and reaps any child still running) and reap it."""
        self.sock.shutdown(socket.SHUT_WR)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=10)
        self.sock.close()


_shared: ForkServer | None = None


def shared() -> ForkServer:
    """This test process's fork server, started on first use."""
    global _shared
    if _shared is None:
        _shared = ForkServer()
    return _shared


def close_shared() -> None:
    global _shared
    if _shared is not None:
        server, _shared = _shared, None
        server.close()


atexit.register(close_shared)


class ForkedProcess:
    """A child of the fork server, shaped like ``asyncio.subprocess.Process``."""

    def __init__(self, pid: int, rc: concurrent.futures.Future[int], stdout: asyncio.StreamReader | None,
                 transport: asyncio.BaseTransport | None = None) -> None:
        self.pid = pid
        self._rc = rc
        self.stdout = stdout
        self._transport = transport  # the stdout pipe's, closed once the child is reaped

    @property
    def returncode(self) -> int | None:
        return self._rc.result() if self._rc.done() else None

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    async def wait(self) -> int:
        # Shielded: a caller's bound on the wait (``asyncio.wait_for``) that passes must not cancel
        # the exit status to come. It did: the reader thread then died setting it, and every later
        # child of this test process (an xdist worker's) could no longer be started or reaped.
        rc = await asyncio.shield(asyncio.wrap_future(self._rc))
        if self._transport is not None:
            self._transport.close()
        return rc


async def create_subprocess(args: list[str], *, stderr: int, stdout: int | None = None, new_session: bool = False,
                            module: str = "sidecar.cli.main") -> ForkedProcess:
    """``python -m MODULE ARGS`` (``shadowtrial ARGS``) from the fork server: stdin ``/dev/null``,
    stderr the descriptor given, stdout a pipe read through ``.stdout`` (or the descriptor ``stdout``)."""
    server = shared()
    null = os.open(os.devnull, os.O_RDONLY)
    read_end, write_end = os.pipe() if stdout is None else (-1, stdout)
    try:
        pid, rc = await asyncio.to_thread(server.spawn, args, stdin=null, stdout=write_end, stderr=stderr,
                                          new_session=new_session, module=module)
    finally:
        os.close(null)
        if stdout is None:
            os.close(write_end)
    if stdout is not None:
        return ForkedProcess(pid, rc, None)
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_end, "rb", 0))
    return ForkedProcess(pid, rc, reader, transport)


# -- the parent ---------------------------------------------------------------------------------------


def _reseed() -> None:
    """Seed every module-level ``random.Random`` from the OS again, as a fresh import would (the
    ``random`` module's own is reseeded at fork; one of ours, ``sidecar.engine.case._ids``, makes
    judgment ids: two forked sidecars on one store would otherwise draw the same ones)."""
    for module in list(sys.modules.values()):
        for value in list(getattr(module, "__dict__", {}).values()):
            if type(value) is random.Random:
                value.seed()


def _child(request: dict[str, Any], fds: list[int]) -> None:
    """Run the command as ``python -m sidecar.cli.main`` runs it; never returns."""
    code = 1
    try:
        _reseed()
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
            os.close(fd)
        if request["session"]:
            os.setsid()
        os.chdir(request["cwd"])
        sys.argv = ["-m", *request["argv"]]  # runpy puts the module's path first, as ``python -m`` does
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None:
                code = 0
            elif isinstance(exc.code, int):
                code = exc.code
            else:
                print(exc.code, file=sys.stderr)
                code = 1
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main(fd: int) -> None:
    import sidecar.app  # noqa: F401  (what ``serve`` imports: once, here)
    import sidecar.cli
    import sidecar.cli.main  # noqa: F401  (and what the command imports)

    # The command's own module as ``python -m`` finds it: not yet imported (runpy runs it as ``__main__``).
    del sys.modules["sidecar.cli.main"]
    delattr(sidecar.cli, "main")

    sock = socket.socket(fileno=fd)
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, None)
    children: dict[int, tuple[int, int]] = {}  # pidfd -> (request id, pid)
    open_ = True
    while open_ or children:
        for key, _ in sel.select():
            if key.data is None:
                message, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 3)
                if not message:  # the test process is done: a child still running was left behind
                    open_ = False
                    sel.unregister(sock)
                    for _, pid in children.values():
                        os.kill(pid, signal.SIGKILL)
                    continue
                request = json.loads(message)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    sock.close()
                    for pidfd in children:
                        os.close(pidfd)
                    _child(request, fds)
                for x in fds:
                    os.close(x)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (request["id"], pid)
                sel.register(pidfd, selectors.EVENT_READ, pid)
                sock.send(json.dumps({"id": request["id"], "pid": pid}).encode())
            else:
                ident, pid = children.pop(key.fd)
                sel.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                try:
                    sock.send(json.dumps({"id": ident, "rc": os.waitstatus_to_exitcode(status)}).encode())
                except OSError:
                    pass  # the test process has gone


if __name__ == "__main__":
    main(int(sys.argv[1]))
