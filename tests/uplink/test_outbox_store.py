"""The store's side of delivery (claim_outbox / delete_outbox), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

from sidecar.store import Store
from tests.store.conftest import Backend, OpenStore, backend, store, stores  # noqa: F401  (fixtures)
from tests.store.factories import effect, finish, start, trial


async def _fill(store: Store, n: int) -> None:
    await store.create_trial(trial("t1", cap_micros=10_000))
    for i in range(n):
        await store.claim_case(start(f"c{i}", exchange_id=f"x{i}"))
        assert await store.finish_case(finish(f"c{i}", effects=(effect(f"r{i}", f'{{"i": {i}}}'),)), "A")


async def test_claim_leases_records_oldest_first_and_delete_forgets_exactly_those(store: Store) -> None:
    await _fill(store, 5)
    got = await store.claim_outbox("A", limit=3, lease_s=30, now=100.0)
    assert got == [("r0", b'{"i": 0}'), ("r1", b'{"i": 1}'), ("r2", b'{"i": 2}')]
    # Another owner sees only what A does not hold; A itself may take its own again (a retry).
    assert [r for r, _ in await store.claim_outbox("B", limit=10, lease_s=30, now=101.0)] == ["r3", "r4"]
    assert [r for r, _ in await store.claim_outbox("A", limit=10, lease_s=30, now=102.0)] == ["r0", "r1", "r2"]
    assert await store.delete_outbox(["r1", "nope"]) == 1
    assert await store.outbox_depth() == 4
    # A's lease lapses (A died): B takes its records.
    assert [r for r, _ in await store.claim_outbox("B", limit=10, lease_s=30, now=200.0)] == ["r0", "r2", "r3", "r4"]


async def test_peers_claiming_at_once_never_share_a_record(stores: OpenStore) -> None:
    first = await stores()
    await _fill(first, 40)
    peers = [first, await stores(), await stores()]
    seen: list[str] = []

    async def deliver(i: int, peer: Store) -> None:
        while got := await peer.claim_outbox(f"owner-{i}", limit=3, lease_s=300, now=100.0):
            seen.extend(r for r, _ in got)
            await peer.delete_outbox([r for r, _ in got])

    await asyncio.gather(*(deliver(i, p) for i, p in enumerate(peers)))
    assert len(seen) == len(set(seen)) == 40, "each record delivered by one owner only"
    assert await first.outbox_depth() == 0
