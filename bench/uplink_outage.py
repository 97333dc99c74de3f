"""Benchmark: the collector down for 30 s under continuous traffic, then back.

    .venv/bin/python bench/uplink_outage.py [--down 30] [--rate 20] [--before 5] [--after 5]

A real sidecar (in this process, the fake provider on loopback, ``[uplink]``
set) and the reference collector (SQLite). Traffic flows at ``--rate``
exchanges per second the whole time: ``--before`` seconds with the collector
up, ``--down`` seconds with it stopped, ``--after`` seconds with it back on the
same port and database. Then traffic stops, every case settles and the outbox
drains.

Printed: exchanges sent; cases finished; the records the sidecar produced
(``case_result`` one per finished case, ``trial_state`` as the trial moved);
what the collector holds of each kind (and how many distinct); the records it
received in all (re-sends included); the outbox's deepest reading during the
outage; failed sends; and how long the outbox took to drain after the collector
came back. The run passes when the collector holds every record exactly once.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.harness import Harness, exchange, wait_for  # noqa: E402
from tests.uplink.kit import UplinkKit  # noqa: E402


async def run(args: argparse.Namespace) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="shadowtrial-outage-"))
    try:
        return await _run(args, tmp)
    finally:  # the databases, keys and journal of the run: nothing is left in the temp dir
        shutil.rmtree(tmp, ignore_errors=True)


async def _run(args: argparse.Namespace, tmp: Path) -> int:
    kit = UplinkKit(tmp)
    collector = kit.collector()
    await collector.start()
    port = collector.port
    sent = 0
    deepest = 0
    phase = "before"
    try:
        async with Harness(tmp, extra=kit.uplink_toml(collector.url)) as h:
            t = await h.create_trial(spend_cap_usd=1000.0)
            store = h.runtime.store
            period = 0.1
            per_tick = max(1, round(args.rate * period))

            async def traffic(seconds: float) -> None:
                nonlocal sent, deepest
                end = time.monotonic() + seconds
                tick = time.monotonic()
                while time.monotonic() < end:
                    await h.send([exchange(i) for i in range(sent, sent + per_tick)])
                    sent += per_tick
                    if phase == "down":
                        deepest = max(deepest, await store.outbox_depth())
                    tick += period
                    await asyncio.sleep(max(0.0, tick - time.monotonic()))  # pacing the load, not a test sync

            await traffic(args.before)
            phase = "down"
            await collector.stop()
            down_at = time.monotonic()
            await traffic(args.down)
            phase = "after"
            collector = kit.collector(port=port)
            await collector.start()
            back_at = time.monotonic()
            print(f"collector down {back_at - down_at:.1f} s; outbox deepest {deepest} records", flush=True)
            await traffic(args.after)
            view = await h.settle(t["id"], sent, timeout=300)
            finished = {f"case:{c['id']}" for c in await store.cases(t["id"]) if c["state"] == "finished"}

            async def drained() -> bool:
                return await store.outbox_depth() == 0 and {rid for rid, _ in kit.held()} == finished

            await wait_for(drained, timeout=300, what="the outbox drained and every case result held")
            drain_s = time.monotonic() - back_at
            if h.runtime.states is not None:  # the trial's last state, now that it settled
                await h.runtime.states.publish()
            await wait_for(lambda: _empty(store), timeout=60, what="the last trial state delivered")
            failures = dict(h.runtime.delivery.stats.failures) if h.runtime.delivery else {}
    finally:
        await collector.stop()
    cases = kit.held()
    states = kit.held("trial_state")
    received = [r["id"] for b in kit.bodies for r in json.loads(b)["records"]]
    distinct = len({rid for rid, _ in cases}) + len({rid for rid, _ in states})
    print(f"exchanges sent {sent}; cases finished {len(finished)} (funnel total {view['funnel']['total']})")
    print(f"collector holds case_result {len(cases)} ({len({r for r, _ in cases})} distinct), "
          f"trial_state {len(states)} ({len({r for r, _ in states})} distinct)")
    print(f"records received {len(received)} in {len(kit.bodies)} batches; re-sent {len(received) - len(set(received))}; "
          f"failed sends {failures}; drained {drain_s:.1f} s after the collector came back")
    ok = len(cases) == len(finished) and {r for r, _ in cases} == finished and len(cases) + len(states) == distinct
    print("every record held exactly once" if ok else "MISMATCH", flush=True)
    return 0 if ok else 1


async def _empty(store: object) -> bool:
    return await store.outbox_depth() == 0  # type: ignore[attr-defined, no-any-return]



def _quick(parser: argparse.ArgumentParser, argv: list[str] | None, **small: object) -> None:
    """``--quick``: a run of seconds that shows the benchmark still works (``make test`` runs every
    benchmark so, tests/bench/); its figures are not for reading. Flags given explicitly still win."""
    parser.add_argument("--quick", action="store_true", help="a run of seconds that proves the benchmark works")
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**small)

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--down", type=float, default=30.0)
    p.add_argument("--rate", type=float, default=20.0, help="exchanges per second")
    p.add_argument("--before", type=float, default=5.0)
    p.add_argument("--after", type=float, default=5.0)
    _quick(p, None, down=1.0, rate=20.0, before=0.5, after=0.5)
    return asyncio.run(run(p.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
