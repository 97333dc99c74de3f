"""LiteLLM proxies forked from one process that imported LiteLLM once (``gateway_overhead.py --quick``).

Importing ``litellm.proxy.proxy_server`` costs a proxy several seconds of CPU before it serves
anything; a benchmark that starts six proxies to run a few dozen requests through each spends
nearly all its time there. :class:`Zygote` runs the LiteLLM environment's Python once, imports
the proxy there, and forks each proxy from it: the child process sets up what a proxy started
by ``tests.litellm_proxy.LiteLLMProxy`` gets (its own session, working directory = the proxy's
directory, the environment ``proxy_env`` built, stdout and stderr to ``proxy.log``) and runs
the same command line, ``litellm.proxy.proxy_cli`` with the same arguments, in that process.
Each proxy is still a process of its own, serving its own port, with its own CPU in
``/proc/<pid>/stat`` (a forked child's counts start at zero: the import is the zygote's).

What differs from a proxy started from scratch: the modules imported before the fork (LiteLLM,
its proxy, uvicorn) are shared copy-on-write, and the interpreter's start-up environment
(``PYTHONPATH``) is the zygote's, the same for every proxy. The measuring modes of the
benchmark start proxies from scratch; this is for the quick mode, which shows the benchmark
works.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from tests.litellm_proxy import HOST, LiteLLMProxy, venv_python

#: Runs in the LiteLLM environment: imports the proxy, then forks one proxy per request line
#: (a JSON spec) on stdin, answering each with the child's pid; exits when stdin closes and every
#: proxy it forked has exited.
ZYGOTE = r'''
import json, os, select, sys
import litellm.proxy.proxy_cli as cli
import litellm.proxy.proxy_server  # noqa: F401  (the import every proxy would pay for)
import uvicorn  # noqa: F401

children = set()


def reap(block=False):
    while children:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        children.discard(pid)


def serve(spec):
    code = 1
    try:
        os.setsid()
        os.chdir(spec["cwd"])
        log = os.open(spec["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(spec["env"])
        sys.argv = ["litellm"] + spec["argv"]
        cli.run_server.main(args=spec["argv"], prog_name="litellm", standalone_mode=True)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


import gc
gc.collect()
gc.freeze()  # what the import made stays out of every child's collections: fewer copied pages
print("ready", flush=True)
while True:
    ready, _, _ = select.select([sys.stdin], [], [], 0.2)
    reap()
    if not ready:
        continue
    line = sys.stdin.readline()  # one request at a time: the parent waits for each answer
    if not line:
        break
    spec = json.loads(line)
    pid = os.fork()
    if pid == 0:
        serve(spec)
    children.add(pid)
    print(pid, flush=True)
reap(block=True)
'''


def _gone(pid: int) -> bool:
    """The process exited (a zombie not yet reaped by the zygote counts as exited)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


class ForkedProcess:
    """What :class:`LiteLLMProxy` uses of a ``subprocess.Popen``, for a proxy the zygote forked
    (its exit status belongs to the zygote: an exited proxy reads as ``returncode`` -1)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and _gone(self.pid):
            self.returncode = -1
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.02)  # polling with a deadline
        assert self.returncode is not None
        return self.returncode


class Zygote:
    """The LiteLLM environment's Python with the proxy imported, forking proxies on request."""

    def __init__(self, venv: Path, env: Mapping[str, str], log: Path) -> None:
        """Start it (it imports LiteLLM meanwhile: :meth:`wait_ready` before the first fork)."""
        self.log = open(log, "ab")
        self.process = subprocess.Popen(
            [str(venv_python(venv)), "-c", ZYGOTE], env=dict(env), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self.log, start_new_session=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in, self._out = self.process.stdin, self.process.stdout

    def wait_ready(self, timeout_s: float = 240.0) -> None:
        self._readline("ready", timeout_s)

    def _readline(self, what: str, timeout_s: float) -> str:
        import select

        ready, _, _ = select.select([self._out], [], [], timeout_s)
        line = self._out.readline().decode().strip() if ready else ""
        if not line:
            raise RuntimeError(f"the LiteLLM zygote gave no {what} within {timeout_s:.0f} s (see {self.log.name})")
        return line

    def fork(self, *, cwd: Path, log: Path, env: Mapping[str, str], argv: list[str]) -> ForkedProcess:
        spec = {"cwd": str(cwd), "log": str(log), "env": dict(env), "argv": argv}
        self._in.write(json.dumps(spec).encode() + b"\n")
        self._in.flush()
        return ForkedProcess(int(self._readline("pid", 30.0)))

    def close(self) -> None:
        """Stop forking; the zygote exits once every proxy it forked has (each is stopped by its owner)."""
        try:
            self._in.close()
        except OSError:
            pass
        try:
            self.process.wait(30.0)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(5.0)
        self.log.close()


@dataclass
class ForkedProxy(LiteLLMProxy):
    """A :class:`LiteLLMProxy` the zygote forks instead of starting from scratch (same command line)."""

    zygote: Any = field(default=None, repr=False)

    def start(self) -> None:
        from tests.litellm_proxy import free_port

        self.port = free_port()
        self._attempts += 1
        argv = ["--config", str(self.config), "--host", HOST, "--port", str(self.port), "--num_workers", "1",
                "--telemetry", "False"]
        self.process = self.zygote.fork(cwd=self.config.parent, log=self.log_path, env=self.env, argv=argv)
