"""One sidecar process of a fleet, for the multi-process tests.

``python -m tests.store.worker URL OWNER SEED CYCLES`` opens a store on ``URL``
(applying migrations if it is the first), creates trial ``t1`` under one
idempotency key (every worker races to), takes a lease as ``OWNER`` and runs
``CYCLES`` claim/reserve/dispatch/finish cycles with amounts drawn from
``SEED``, then retires and prints how many cases it finished.
"""

from __future__ import annotations

import asyncio
import random
import sys

from sidecar.store import make_store
from tests.store.factories import finish, start, trial

CAP = 40_000


async def run(url: str, owner: str, seed: int, cycles: int) -> int:
    store = make_store(url)
    await store.open()
    try:
        await store.create_trial(trial("t1", cap_micros=CAP), idempotency_key="fleet", body_hash="h")
        await store.heartbeat(owner, now=0.0, lease_s=1e12)
        rng = random.Random(seed)

        async def cycle(i: int) -> bool:
            cid = f"{owner}-{i:03d}"
            assert await store.claim_case(start(cid, owner=owner)) == "claimed"
            amount = rng.randint(1, 3000)
            held = amount if (await store.reserve("t1", cid, amount, kind="reserve", at=float(i))).applied else 0
            if held:
                assert await store.mark_dispatched(cid, owner)
            charged = int(held * rng.random())
            return await store.finish_case(finish(cid, charged=charged, outcome="judged" if held else "shed_cap_busy"), owner)

        done = await asyncio.gather(*(cycle(i) for i in range(cycles)))
        await store.retire(owner, now=1.0)
        return sum(done)
    finally:
        await store.close()


if __name__ == "__main__":
    url, owner, seed, cycles = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(asyncio.run(run(url, owner, seed, cycles)))
