"""A sidecar whose engine loop stalled past its own lease keeps its cases.

On a loaded host (CPU starvation, a long GC) the engine's loop can stall for longer than
``lease_seconds``; when it runs again the heartbeat and the sweep are both overdue, and a
sweep that ran first used to find this process's own lease expired and mark its own live,
in-flight cases ``indeterminate`` (CI's lease tests run with a 1 s lease, where a second's
stall is enough). A peer may still recover them (it cannot tell late from dead); the process
itself knows it is alive.

The stall is simulated on the clock the engine reads: it jumps past the lease with no
heartbeat in between, then the sweep runs, as after a real stall.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, Harness, default_models, exchange, wait_for

LEASE_S = 15.0  # the default


async def test_a_sweep_after_the_engine_stalled_past_its_own_lease_spares_its_own_case(tmp_path: Path) -> None:
    skew = [0.0]
    models = {**default_models(), CANDIDATE: FakeModel(quality=0.6, latency_ms=(800.0, 800.0))}

    def clock() -> float:
        return time.time() + skew[0]

    async with Harness(tmp_path, models=models, clock=clock, lease_seconds=LEASE_S) as h:
        trial = await h.create_trial()
        assert (await h.send([exchange(0)]))["sampled"] == 1

        async def candidate_called() -> bool:
            return h.fake.calls[CANDIDATE] == 1

        await wait_for(candidate_called, timeout=30, what="the candidate call in flight")
        engine = h.runtime.engine
        skew[0] = 2 * LEASE_S  # the loop stalled past the lease: no heartbeat since
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(engine._sweep(), engine._loop))
        view = await h.settle(trial["id"], 1)
    assert {k: n for k, n in view["funnel"]["outcomes"].items() if n} == {"judged": 1}, view["funnel"]
