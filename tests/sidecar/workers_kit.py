"""Faults for the worker-supervision tests: make one dependency of a worker fail once, and
wait until the supervisor noticed (a restart, or the worker down)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable

from sidecar.supervise import Backoff, Supervisor, Worker
from tests.harness import wait_for

#: Restarts at once, so a test observes the restart.
FAST = Backoff(first_s=0.01, cap_s=0.05)
#: Never restarts within a test, so a test observes the worker down.
HOLD = Backoff(first_s=3600.0, cap_s=3600.0)


class Fault(BaseException):
    """An end no worker's own ``except Exception`` absorbs: it stands for any unexpected one.
    Its message carries a canary that must never reach a log or an answer."""

    def __init__(self) -> None:
        super().__init__("CANARY-fault-message sk-never-logged")


def fail_once(obj: Any, attr: str, exc: Callable[[], BaseException] = Fault) -> list[int]:
    """Make ``obj.attr`` (a method, sync or async) raise ``exc()`` on its next call, then behave
    as before. Returns a list that holds one item once the fault fired."""
    original = getattr(obj, attr)
    fired: list[int] = []

    if asyncio.iscoroutinefunction(original):
        @functools.wraps(original)
        async def patched_async(*args: Any, **kw: Any) -> Any:
            if not fired:
                fired.append(1)
                setattr(obj, attr, original)
                raise exc()
            return await original(*args, **kw)

        setattr(obj, attr, patched_async)
    else:
        @functools.wraps(original)
        def patched(*args: Any, **kw: Any) -> Any:
            if not fired:
                fired.append(1)
                setattr(obj, attr, original)
                raise exc()
            return original(*args, **kw)

        setattr(obj, attr, patched)
    return fired


async def restarted(sup: Supervisor, name: str, *, timeout: float = 30.0, error: str = "Fault") -> Worker:
    """Until ``name`` died with ``error`` and runs again."""
    found: Worker | None = None

    async def back() -> bool:
        nonlocal found
        found = sup.worker(name)
        return (found is not None and found.restarts >= 1 and found.state == "running"
                and found.last is not None and found.last.error == error)

    await wait_for(back, timeout=timeout, what=f"worker {name} to be restarted after {error}")
    assert found is not None
    return found
