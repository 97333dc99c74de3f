"""The supervisor itself (sidecar/supervise.py): a worker that raises or returns while it should
run is logged once with its type and place, shows as down, and is restarted after a backoff or
reported fatal; a cancellation or an end while stopping is expected and says nothing."""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from sidecar.supervise import EXIT, RESTART, UNTIL_DONE, Backoff, Death, Supervisor, place_of
from tests.harness import wait_for

FAST = Backoff(first_s=0.01, cap_s=0.05)
HOLD = Backoff(first_s=3600.0, cap_s=3600.0)


class Poison(Exception):
    """A fault that carries content in its message: the log must never show it."""


def poisoned() -> None:
    raise Poison("CANARY-prompt-text sk-secret-token")


async def test_a_raising_task_is_logged_once_without_its_message_and_restarted(caplog: pytest.LogCaptureFixture) -> None:
    sup = Supervisor(backoff=FAST)
    runs = 0
    again = asyncio.Event()

    async def work() -> None:
        nonlocal runs
        runs += 1
        if runs == 1:
            poisoned()
        again.set()
        await asyncio.Event().wait()

    with caplog.at_level(logging.ERROR, logger="shadowtrial.supervise"):
        task = sup.task("flusher", work, RESTART)
        await asyncio.wait_for(again.wait(), 10)
    w = sup.worker("flusher")
    assert w is not None and w.state == "running" and w.restarts == 1
    assert [d.worker for d in sup.deaths] == ["flusher"] and sup.deaths[0].error == "Poison"
    assert sup.deaths[0].place.startswith("tests/sidecar/test_supervise.py:") and "in poisoned" in sup.deaths[0].place
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "flusher" in lines[0] and "Poison" in lines[0] and "restarted" in lines[0]
    assert "CANARY" not in caplog.text and "sk-secret" not in caplog.text
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert sup.worker("flusher").state == "stopped"  # type: ignore[union-attr]
    assert sup.down() == []


async def test_a_task_that_returns_while_it_should_run_is_a_death() -> None:
    sup = Supervisor(backoff=HOLD)

    async def quits() -> None:
        return None

    task = sup.task("loop", quits, RESTART)

    async def down() -> bool:
        return [w.name for w in sup.down()] == ["loop"]

    await wait_for(down, timeout=10, what="the returned worker to show as down")
    assert sup.down()[0].state == "restarting" and sup.deaths[0].error == "returned"
    task.cancel()  # its backoff wait is cancellable: a stop
    await asyncio.gather(task, return_exceptions=True)
    assert sup.down() == []


async def test_until_done_may_return_and_exit_policy_calls_on_fatal_once_on_the_bound_loop() -> None:
    fatal: list[tuple[Death, bool]] = []
    loop = asyncio.get_running_loop()
    sup = Supervisor(on_fatal=lambda d: fatal.append((d, asyncio.get_running_loop() is loop)), backoff=FAST)
    sup.bind(loop)

    async def done() -> None:
        return None

    await sup.task("feeder", done, UNTIL_DONE)
    assert sup.worker("feeder").state == "done" and sup.deaths == []  # type: ignore[union-attr]

    def crash() -> None:
        poisoned()

    sup.thread("engine", crash, EXIT).join(10)
    sup.died("engine-process", "exited with code -9")

    async def told() -> bool:
        return len(fatal) >= 1

    await wait_for(told, timeout=10, what="on_fatal")
    assert [(d.worker, d.error, on_loop) for d, on_loop in fatal] == [("engine", "Poison", True)]
    assert {w.name: w.state for w in sup.down()} == {"engine": "failed", "engine-process": "failed"}
    assert sup.fatal is not None and sup.fatal.worker == "engine"


def test_a_thread_is_restarted_in_place_and_its_clean_up_runs() -> None:
    sup = Supervisor(backoff=FAST)
    runs: list[int] = []
    cleaned: list[int] = []
    release = threading.Event()

    def target() -> None:
        runs.append(1)
        if len(runs) < 3:
            poisoned()
        release.wait(10)

    t = sup.thread("forward", target, RESTART, on_death=lambda: cleaned.append(len(runs)))
    deadline = time.monotonic() + 10
    while len(runs) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)  # a thread's progress, polled with a deadline
    assert len(runs) == 3 and cleaned == [1, 2]
    assert sup.worker("forward").restarts == 2  # type: ignore[union-attr]
    sup.stop()
    release.set()
    t.join(10)
    assert not t.is_alive() and sup.worker("forward").state == "stopped"  # type: ignore[union-attr]


def test_a_stop_ends_a_threads_backoff_wait_and_nothing_after_it_is_a_death() -> None:
    sup = Supervisor(backoff=HOLD)
    t = sup.thread("forward", poisoned, RESTART)
    deadline = time.monotonic() + 10
    while not sup.down() and time.monotonic() < deadline:
        time.sleep(0.005)
    assert [w.state for w in sup.down()] == ["restarting"]
    sup.stop()
    t.join(10)
    assert not t.is_alive() and sup.down() == []
    assert sup.died("late", "exited with code 1") is None and sup.fatal is None


def test_a_report_from_another_process_is_adopted_under_a_prefix() -> None:
    sup = Supervisor()
    sup.adopt("engine-process:", [{"name": "engine-heartbeat", "state": "restarting", "policy": "restart",
                                   "restarts": 2, "error": "RuntimeError", "place": "sidecar/engine/engine.py:9 in x"}])
    assert [(w.name, w.state, w.restarts) for w in sup.down()] == [("engine-process:engine-heartbeat", "restarting", 2)]
    sup.adopt("engine-process:", [])
    assert sup.workers() == []


def test_place_names_the_file_from_its_package_line_and_function() -> None:
    try:
        poisoned()
    except Poison as exc:
        assert place_of(exc).startswith("tests/sidecar/test_supervise.py:") and place_of(exc).endswith(" in poisoned")
    assert place_of(Poison()) == ""
