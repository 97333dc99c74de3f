"""The hand-off between the tap's loop and the engine's (sidecar/ingest/handoff.py)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from sidecar.ingest.handoff import Handoff


def test_a_full_handoff_refuses_the_newest_and_keeps_order() -> None:
    h: Handoff[int] = Handoff(3)
    assert h.offer_many([1, 2]) == 2
    assert h.offer_many([3, 4, 5]) == 1  # room for one: 3 is taken, 4 and 5 refused
    assert not h.offer(6)
    assert h.depth == 3
    assert h.drain_remaining() == [1, 2, 3]
    assert h.depth == 0


def test_a_closed_handoff_takes_nothing() -> None:
    h: Handoff[int] = Handoff(3)
    h.close()
    assert h.offer_many([1]) == 0 and h.depth == 0


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        Handoff(0)


async def test_producers_on_other_threads_never_block_and_wake_the_consumer() -> None:
    """Four producer threads offer 20,000 items into a queue of 500 while the consumer
    loop takes them: every item is either taken or refused (never lost, never twice)."""
    h: Handoff[tuple[int, int]] = Handoff(500)
    h.attach(asyncio.get_running_loop())
    per_thread, threads = 5_000, 4
    refused = [0] * threads

    def produce(t: int) -> None:
        for i in range(0, per_thread, 50):
            batch = [(t, j) for j in range(i, i + 50)]
            refused[t] += len(batch) - h.offer_many(batch)

    got: list[tuple[int, int]] = []

    async def consume() -> None:
        while True:
            got.append(await h.take())

    consumer = asyncio.create_task(consume())
    workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    await asyncio.gather(*(asyncio.to_thread(w.join) for w in workers))
    consumer.cancel()
    await asyncio.gather(consumer, return_exceptions=True)
    assert got, "the consumer was woken while the producers ran"
    got += h.drain_remaining()  # what was accepted but not yet taken
    assert len(got) == len(set(got)) == per_thread * threads - sum(refused)
    for t in range(threads):  # each producer's accepted items arrive in the order offered
        mine = [j for (tt, j) in got if tt == t]
        assert mine == sorted(mine)
