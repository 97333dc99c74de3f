"""The fork server the process tests start their children from (:mod:`tests.sidecar.forkserve`).

A bound on a child's wait that passes (``ServerProcess.wait``'s ``asyncio.wait_for``, on a
loaded machine) used to cancel the child's exit status to come; the fork server's reader
thread then died setting it, so the child could no longer be signalled or reaped, nor any
later child of the same test process (an xdist worker runs many tests) be started.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.sidecar.forkserve import ForkedProcess, create_subprocess


async def _running_child(tmp_path: Path, name: str) -> ForkedProcess:
    with (tmp_path / f"{name}.log").open("wb") as err:  # a child that runs until it is killed
        return await create_subprocess(["0", "--bind", "127.0.0.1"], stderr=err.fileno(), module="http.server")


async def test_a_wait_cut_short_leaves_the_child_waitable_and_the_fork_server_serving(tmp_path: Path) -> None:
    child = await _running_child(tmp_path, "first")
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(child.wait(), timeout=0.2)  # the bound passes: the child runs on
    assert child.returncode is None
    child.kill()
    assert await asyncio.wait_for(child.wait(), timeout=30) == -signal.SIGKILL
    later = await _running_child(tmp_path, "later")
    later.kill()
    assert await asyncio.wait_for(later.wait(), timeout=30) == -signal.SIGKILL
