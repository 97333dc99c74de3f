"""The README's first verdict with no key (issue 28, "Must show"): its "No key yet?" block, run
in order, reaches *Adoptable* with the bundled fake provider.

The commands are read from the README and run as written, with three changes a test needs:
the listeners take free ports (``127.0.0.1:0``, the fake provider's address handed to the
sidecar through ``SHADOWTRIAL_PROVIDERS__FAKE__BASE_URL``), the store is in a temporary
directory, and ``send`` drops ``--rate`` (pacing is covered in tests/sidecar/cli/test_send.py).
"""

from __future__ import annotations

import json
import os
import re
import selectors
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

import pytest

from sidecar.cli.main import main
from tests.test_readme_commands import ROOT, block_commands


def first_verdict_block() -> list[list[str]]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    start = text.index("**No key yet?**")
    block = text[start:text.index("```\n", text.index("```sh", start) + 5) + 4]
    return [shlex.split(c) for c in block_commands(block)]


def read_line(stream: IO[str], pattern: str, timeout: float = 120.0) -> re.Match[str]:
    """The first line of ``stream`` matching ``pattern``, within ``timeout`` (polled, no sleep)."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if selector.select(timeout=max(0.0, deadline - time.monotonic())):
            line = stream.readline()
            if not line:
                break
            if m := re.search(pattern, line):
                return m
    raise AssertionError(f"no line matching {pattern!r}")


def test_the_readme_first_verdict_block_reaches_adoptable(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commands = first_verdict_block()
    assert [c[0] for c in commands] == ["fake-provider", "serve", "trials", "send", "trials"], commands
    env = {"PATH": os.environ.get("PATH", "")}  # no SHADOWTRIAL_* of the test run reaches them
    procs: list[subprocess.Popen[str]] = []
    try:
        fake = [*commands[0][:-1], "127.0.0.1:0"]  # --listen 127.0.0.1:8000 → a free port
        procs.append(subprocess.Popen([sys.executable, "-m", "sidecar.cli", *fake], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, env=env, cwd=tmp_path))
        assert procs[0].stdout is not None
        provider = read_line(procs[0].stdout, r"(http://\S+/v1)").group(1)
        serve = [*commands[1][:-1], str(ROOT / commands[1][-1])]  # the store lands in tmp_path
        serve_env = env | {"SHADOWTRIAL_TAP__LISTEN": "127.0.0.1:0", "SHADOWTRIAL_ADMIN__LISTEN": "127.0.0.1:0",
                           "SHADOWTRIAL_PROVIDERS__FAKE__BASE_URL": provider}
        procs.append(subprocess.Popen([sys.executable, "-m", "sidecar.cli", *serve], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True, env=serve_env, cwd=tmp_path))
        assert procs[1].stdout is not None
        tap, admin = read_line(procs[1].stdout, r"tap (\S+)\s+admin (\S+)").groups()
        cli_env = {"SHADOWTRIAL_TAP_URL": tap, "SHADOWTRIAL_ADMIN_URL": admin}

        assert main(commands[2], cli_env) == 0
        send = commands[3]
        if "--rate" in send:
            del send[send.index("--rate"):send.index("--rate") + 2]
        assert main(send, cli_env) == 0
        capsys.readouterr()
        deadline = time.monotonic() + 120
        while True:  # the cases sampled last finish after send returns
            assert main(commands[4], cli_env) == 0
            listed = capsys.readouterr().out
            if "Adoptable" in listed or time.monotonic() > deadline:
                break
            assert main([*commands[4], "--json"], cli_env) == 0
            trials = json.loads(capsys.readouterr().out)["trials"]
            assert trials and trials[0]["status"] in ("running", "decided"), trials
            time.sleep(0.1)  # a poll's interval, under the deadline above
        assert "Adoptable" in listed, listed
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
            if proc.stdout is not None:
                proc.stdout.close()
