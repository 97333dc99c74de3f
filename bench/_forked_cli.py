"""``--quick``: a ``shadowtrial`` command's process forked from the benchmark's, not a fresh interpreter.

``python -m sidecar.cli.main collector ...`` imports the collector first, about 1.3 s of CPU, most of
what a ``--quick`` run's collector costs. :class:`ForkedCommand` runs the same entry point
(:func:`sidecar.cli.main.main`, with the same arguments, environment and working directory) in a
process forked from this one, which imported it once; only before this process runs an event loop
or a second thread, so the command's process copies no loop, lock or socket of ours.
"""

from __future__ import annotations

import asyncio
import os
import select
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import IO, Mapping, Sequence


class ForkedCommand:
    """What ``subprocess.Popen([sys.executable, "-m", "sidecar.cli.main", *argv], stdout=PIPE, cwd=cwd,
    env=env)`` gives the benchmarks: ``stdout`` to read, ``terminate()``, ``wait(timeout)``."""

    def __init__(self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str]) -> None:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("a command is forked only before this process starts its event loop")
        if threading.active_count() != 1:
            raise RuntimeError("a command is forked only while this process runs one thread")
        from sidecar.cli import main as cli
        from sidecar.collector import server  # noqa: F401  (what ``collector`` imports: here, once)

        read, write = os.pipe()
        sys.stdout.flush()
        sys.stderr.flush()
        self.pid = os.fork()
        if self.pid == 0:
            code = 1
            try:
                os.close(read)
                os.dup2(write, 1)
                os.close(write)
                os.chdir(cwd)
                os.environ.clear()
                os.environ.update(env)
                code = cli.main(list(argv))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except BaseException:
                traceback.print_exc()
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(write)
        self.stdout: IO[bytes] = os.fdopen(read, "rb")
        self.returncode: int | None = None

    def terminate(self) -> None:
        if self.returncode is None:
            os.kill(self.pid, signal.SIGTERM)

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            pidfd = os.pidfd_open(self.pid)
            try:
                ended, _, _ = select.select([pidfd], [], [], timeout)  # readable once it has exited
            finally:
                os.close(pidfd)
            if not ended:
                raise subprocess.TimeoutExpired(f"collector (pid {self.pid})", timeout or 0.0)
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            self.stdout.close()
        return self.returncode
