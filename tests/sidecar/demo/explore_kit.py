"""``shadowtrial demo --stay`` in a subprocess, as an operator starts it: its printed consoles,
token and trial ids, and a Ctrl-C to the whole process group (as a terminal sends it) at the end.

Readiness is the demo's own "ready in" line, read from its stdout with a deadline (no sleep).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
READY = re.compile(r"^ready in (\d+\.\d)s")


@dataclass
class RunningDemo:
    proc: asyncio.subprocess.Process
    printed: list[str] = field(default_factory=list)
    sidecar: str = ""
    collector: str = ""
    token: str = ""
    ready_s: float = 0.0

    def link(self, label: str) -> str:
        """The address printed on the line that starts with ``label``."""
        line = next(x for x in self.printed if x.strip().startswith(label))
        return line.split()[-1]

    def id_of(self, label: str) -> str:
        return self.link(label).rstrip("/").rsplit("/", 1)[1]


def _env() -> dict[str, str]:
    # The config refuses unknown SHADOWTRIAL_* names; CI exports some for the test run itself.
    return {k: v for k, v in os.environ.items() if not k.startswith("SHADOWTRIAL_")}


async def start(timeout: float = 180.0) -> RunningDemo:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "sidecar.cli.main", "demo", "--stay", cwd=ROOT, env=_env(),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, start_new_session=True)
    demo = RunningDemo(proc)
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            await stop(demo)
            raise AssertionError(f"the demo was not ready within {timeout}s: {demo.printed[-10:]}")
        raw = await asyncio.wait_for(proc.stdout.readline(), timeout=left)
        if not raw:
            err = await proc.stderr.read() if proc.stderr else b""
            raise AssertionError(f"the demo ended before it was ready: {demo.printed[-10:]} {err.decode()[-2000:]}")
        line = raw.decode().rstrip("\n")
        demo.printed.append(line)
        if m := READY.match(line):
            demo.ready_s = float(m.group(1))
            break
    # The rest of the banner follows the ready line at once.
    while not any(x.strip().startswith("Compare models") for x in demo.printed):
        raw = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        assert raw, demo.printed
        demo.printed.append(raw.decode().rstrip("\n"))
    demo.sidecar = demo.link("sidecar console").removesuffix("/console/")
    demo.collector = demo.link("control-plane console").removesuffix("/console/")
    demo.token = next(x.strip() for x in demo.printed if re.fullmatch(r"\s+\S+\.\S+\.\S+", x))
    return demo


async def stop(demo: RunningDemo, timeout: float = 60.0) -> tuple[int, str, str]:
    """Ctrl-C to the demo's process group; its exit code, the rest of its stdout, its stderr."""
    if demo.proc.returncode is None:
        os.killpg(demo.proc.pid, signal.SIGINT)
    out, err = await asyncio.wait_for(demo.proc.communicate(), timeout=timeout)
    return demo.proc.returncode or 0, out.decode(), err.decode()


class SharedDemo:
    """One ``shadowtrial demo --stay`` for the tests that only look at it (issue 29): the HTTP
    checks and the browser's tour of both consoles read the same demo instead of starting two
    (each start is about 20 s and 10 s of CPU). :meth:`get` starts it on first use (again, after
    a :meth:`stop`); :meth:`stop` sends the Ctrl-C and returns what :func:`stop` returns. The
    session fixture ``explorable_demo`` (tests/conftest.py) stops it at the end if no test did.
    """

    def __init__(self) -> None:
        self.running: RunningDemo | None = None

    async def get(self) -> RunningDemo:
        if self.running is None or self.running.proc.returncode is not None:
            self.running = await start()
        return self.running

    async def stop(self) -> tuple[int, str, str]:
        demo = await self.get()  # a test that checks the stop has a demo to stop
        self.running = None
        return await stop(demo)
