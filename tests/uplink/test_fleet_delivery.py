"""Two sidecars of a fleet on one real PostgreSQL, each with its own uplink, one collector:
every record reaches the collector once, and no record is sent by both sidecars."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from tests.harness import Harness, exchange, wait_for
from tests.pg import PostgresServer
from tests.uplink.kit import UplinkKit


async def test_a_fleet_delivers_each_record_from_one_sidecar(tmp_path: Path, pg_server: PostgresServer) -> None:
    dsn = pg_server.create_database()
    kit = UplinkKit(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    try:
        async with kit.collector() as c:
            common: dict[str, Any] = {"store_url": dsn, "refresh_seconds": 0.2}
            async with Harness(tmp_path / "a", extra=kit.uplink_toml(c.url, sidecar_id="gw-1/a"), **common) as a, \
                    Harness(tmp_path / "b", extra=kit.uplink_toml(c.url, sidecar_id="gw-1/b"), **common) as b:
                t = await a.create_trial(audit_share=0.0)

                async def b_routes() -> bool:
                    return len(b.runtime.routing.current) == 1

                await wait_for(b_routes, what="the second sidecar to run the trial")
                for start in range(0, 60, 10):
                    await a.send([exchange(i) for i in range(start, start + 5)])
                    await b.send([exchange(i) for i in range(start + 5, start + 10)])
                await a.settle(t["id"], 60)

                async def delivered() -> bool:
                    return (len(kit.held()) == 60 and await a.runtime.store.outbox_depth() == 0)

                await wait_for(delivered, timeout=60, what="all 60 records at the collector")
                senders: dict[str, set[str]] = defaultdict(set)
                for body in kit.bodies:
                    batch = json.loads(body)
                    for r in batch["records"]:
                        senders[r["id"]].add(batch["sidecar_id"])
                per_sidecar = {s: sum(1 for v in senders.values() if s in v) for s in ("gw-1/a", "gw-1/b")}
                print(f"\nfleet: 60 records held; sent by {per_sidecar}")
                cases = {rid: v for rid, v in senders.items() if rid.startswith("case:")}
                assert len(cases) == 60
                assert all(len(v) == 1 for v in cases.values()), "a record was sent by both sidecars"
                # Both sidecars publish the trial's states: one that read the same facts after the
                # other's copy was delivered writes the same id again, which the collector keeps once.
                states = [rid for rid, _ in kit.held("trial_state")]
                assert states and len(states) == len(set(states))
    finally:
        pg_server.drop_database(dsn)
