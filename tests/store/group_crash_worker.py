"""A sidecar process that dies in the middle of a group commit, for ``test_group_commit``.

``python -m tests.store.group_crash_worker PATH`` opens a SQLite store on ``PATH``, creates
trial ``t1``, takes a one-second lease as owner ``A`` from time 0, and claims, reserves and
dispatches cases ``c1`` and ``c2`` (each committed). Then, with the store's thread held, it
asks for ``c1``'s and ``c2``'s finishes and a third write that ends the process, so all three
run in one group: the process exits (code 3) after both finishes ran and before the commit.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading

from sidecar.store.sqlite import SQLiteStore
from tests.store.factories import finish, start, trial


async def run(path: str) -> None:
    store = SQLiteStore(path)
    await store.open()
    await store.create_trial(trial("t1"))
    await store.heartbeat("A", now=0.0, lease_s=1.0)
    for cid in ("c1", "c2"):
        assert await store.claim_case(start(cid, owner="A")) == "claimed"
        assert (await store.reserve("t1", cid, 1000, kind="reserve", at=0.0)).applied
        assert await store.mark_dispatched(cid, "A")
    held = threading.Event()
    assert store._executor is not None
    store._executor.submit(held.wait)  # the store's thread is busy: what is asked for now forms one group

    def die(conn: object) -> None:
        sys.stdout.flush()
        os._exit(3)

    pending = [
        asyncio.ensure_future(store.finish_case(finish("c1", charged=400), "A")),
        asyncio.ensure_future(store.finish_case(finish("c2", charged=0, outcome="judge_failed"), "A")),
        asyncio.ensure_future(store._write(die)),
    ]
    while len(store._writes._queue) < len(pending):  # each task queues its write at its first step
        await asyncio.sleep(0)
    held.set()
    await asyncio.gather(*pending)
    raise AssertionError("the group's last write should have ended the process")


if __name__ == "__main__":
    asyncio.run(run(sys.argv[1]))
