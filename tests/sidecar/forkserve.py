"""A warm parent for ``shadowtrial`` commands that tests start and expect to exit by themselves.

A start-up failure of ``shadowtrial serve`` costs about 1.2 s of CPU, nearly all of it the
interpreter importing the sidecar (issue 29). :class:`ForkServer` starts one Python process
that imports the command and the sidecar once; each :meth:`ForkServer.run` forks it, and the
child runs ``python -m sidecar.cli.main ARGS`` as the interpreter would (``runpy``, the
same ``__main__``, ``SystemExit`` becoming the exit status, an uncaught exception printed
as a traceback with status 1, ``atexit`` run), its stdin ``/dev/null`` and its stdout and
stderr files. The child is a real process: its exit status is the one the kernel reports,
and whatever it starts (the engine's process) is started as ``serve`` starts it.

Run as ``python -m tests.sidecar.forkserve``: one JSON request a line on stdin
(``{"argv": [...], "cwd": ..., "stdout": path, "stderr": path}``), and per request two
lines on stdout: ``{"pid": N}`` once forked, ``{"rc": N}`` once it has exited.
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path
from typing import IO, Any, Mapping

REPO = Path(__file__).resolve().parents[2]


class ForkServer:
    """The warm parent, as seen from a test: ``run`` blocks (call it through ``asyncio.to_thread``)."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.sidecar.forkserve"], cwd=REPO, env=dict(env),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.pid: int | None = None  # the running child's

    def run(self, args: list[str], stdout: Path, stderr: Path, *, cwd: Path = REPO) -> int:
        """Run ``shadowtrial ARGS`` in a forked child; its exit status (negative: the signal)."""
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps({"argv": args, "cwd": str(cwd), "stdout": str(stdout),
                                          "stderr": str(stderr)}) + "\n")
        self.proc.stdin.flush()
        self.pid = int(_reply(self.proc.stdout)["pid"])
        rc = int(_reply(self.proc.stdout)["rc"])
        self.pid = None
        return rc

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def _reply(stream: IO[str]) -> dict[str, Any]:
    line = stream.readline()
    if not line:
        raise AssertionError("the fork server ended")
    reply: dict[str, Any] = json.loads(line)
    return reply


def _child(request: dict[str, Any]) -> None:
    """Run the command as ``python -m sidecar.cli.main`` runs it; never returns."""
    code = 1
    try:
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
            os.close(fd)
        sys.argv = [str(Path(REPO, "sidecar", "cli", "main.py")), *request["argv"]]
        try:
            runpy.run_module("sidecar.cli.main", run_name="__main__", alter_sys=True)
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


def main() -> None:
    import sidecar.app  # noqa: F401  (what ``serve`` imports: once, here)
    import sidecar.cli
    import sidecar.cli.main  # noqa: F401  (and what the command imports)

    # The command's own module as ``python -m`` finds it: not yet imported (runpy runs it as ``__main__``).
    del sys.modules["sidecar.cli.main"]
    delattr(sidecar.cli, "main")

    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
