"""A real sidecar with ``[uplink]`` beside a real collector on loopback.

Every finished case's ``case_result`` reaches the collector exactly once —
also across a collector outage under continuous traffic — and no byte of a
content-free team's prompts or answers ever reaches it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import httpx

from tests.harness import Harness, exchange, wait_for
from tests.ports import reserved_port
from tests.uplink.kit import UplinkKit


async def _finished_case_ids(h: Harness, trial_id: str) -> set[str]:
    return {f"case:{c['id']}" for c in await h.runtime.store.cases(trial_id) if c["state"] == "finished"}


async def _all_delivered(h: Harness, kit: UplinkKit, trial_id: str) -> None:
    async def done() -> bool:
        held = {rid for rid, _ in kit.held()}
        return held == await _finished_case_ids(h, trial_id) and await h.runtime.store.outbox_depth() == 0

    await wait_for(done, timeout=60, what="every case result at the collector and the outbox empty")


@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_every_case_result_reaches_the_collector_exactly_once(tmp_path: Path, isolation: str) -> None:
    """With the engine in its own process the hook is pickled into it: the same records arrive."""
    kit = UplinkKit(tmp_path)
    async with kit.collector() as c:
        async with Harness(tmp_path, extra=kit.uplink_toml(c.url), isolation=isolation) as h:
            t = await h.create_trial()
            await h.send([exchange(i) for i in range(40)])
            view = await h.settle(t["id"], 40)
            await _all_delivered(h, kit, t["id"])
            held = kit.held()
            records = [json.loads(body) for _, body in held]
            assert len(held) == len({rid for rid, _ in held}) == view["funnel"]["total"] == 40
            judged = [r for r in records if r["outcome"] == "judged"]
            assert len(judged) == view["funnel"].get("judged", len(judged)) and judged
            assert all(r["trial_id"] == t["id"] and r["team"] == "team-a" for r in records)
            # Each record names its exchange, and carries the incumbent's figures the gateway sent.
            assert sorted(r["exchange_id"] for r in records) == sorted(exchange(i)["exchange_id"] for i in range(40))
            assert all(r["incumbent_latency_ms"] == exchange(0)["latency_ms"] for r in records)
            assert all(r["incumbent_cost"]["coverage"] != "unknown" for r in records)
            assert all(r["judge_version_id"] and r["judgments"] for r in judged)
            sent = sum(len(json.loads(b)["records"]) for b in kit.bodies)
            print(f"\n40 cases: {len(held)} records held, {sent} sent in {len(kit.bodies)} batches")


async def test_collector_down_then_back_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)
    with reserved_port() as port:  # kept for the restart below
        await _down_then_back(kit, tmp_path, port)


async def _down_then_back(kit: UplinkKit, tmp_path: Path, port: int) -> None:
    collector = kit.collector(port=port)
    await collector.start()
    try:
        async with Harness(tmp_path, extra=kit.uplink_toml(collector.url)) as h:
            t = await h.create_trial()
            await h.send([exchange(i) for i in range(20)])
            await h.settle(t["id"], 20)
            await _all_delivered(h, kit, t["id"])
            await collector.stop()  # down, while traffic keeps coming: 6 rounds, each across a failed send
            delivery = h.runtime.delivery
            for start in range(20, 80, 10):
                failures = sum(delivery.stats.failures.values())
                await h.send([exchange(i) for i in range(start, start + 10)])

                async def failed_again() -> bool:
                    return sum(delivery.stats.failures.values()) > failures

                await wait_for(failed_again, what="another failed send while the collector is down")
            await h.settle(t["id"], 80)
            waiting = len([r for r in await h.runtime.store.outbox(limit=10_000) if r.topic == "case_result"])
            assert waiting == 60, "every result made while the collector was down waits in the outbox"
            collector = kit.collector(port=port)  # back, on the same port and database
            await collector.start()
            await _all_delivered(h, kit, t["id"])
            held = [rid for rid, _ in kit.held()]
            received = sum(len(json.loads(b)["records"]) for b in kit.bodies)
            print(f"\noutage: {waiting} records waited; collector holds {len(held)} ({len(set(held))} distinct) "
                  f"of 80 cases; {received} records received in {len(kit.bodies)} batches; "
                  f"failed sends {dict(h.runtime.delivery.stats.failures)}")
            assert len(held) == len(set(held)) == 80
    finally:
        await collector.stop()


async def test_a_content_free_teams_canaries_never_reach_the_collector(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)  # no team may uplink content
    canary = "CANARY-7f1c2e"

    def ex(i: int) -> dict[str, Any]:
        e = exchange(i, content=f"incumbent answer {canary}-ans-{i} ⟨q=0.500⟩")
        e["request"]["messages"][0]["content"] = f"question {canary}-q-{i}"
        return e

    async with kit.collector() as c:
        async with Harness(tmp_path, extra=kit.uplink_toml(c.url) + '\n[teams.team-a]\nprompt_retention = false\n') as h:
            t = await h.create_trial()
            await h.send([ex(i) for i in range(30)])
            await h.settle(t["id"], 30)
            await _all_delivered(h, kit, t["id"])
    assert kit.bodies, "batches were sent"
    assert all(canary.encode() not in body for body in kit.bodies), "a request body carried a canary"
    files = b"".join(p.read_bytes() for p in tmp_path.glob("collector.db*"))
    assert canary.encode() not in files and b"question" not in files and b"answer" not in files
    # Retention off: the sidecar's own files (its store, WAL, journal, logs) hold no canary either.
    own = [p for p in tmp_path.rglob("*") if p.is_file() and not p.name.startswith("collector.db")]
    assert any(p.name.startswith("trials.db") for p in own), [p.name for p in own]
    assert not [p.name for p in own if canary.encode() in p.read_bytes()]


async def test_a_full_outbox_stops_sampling_and_never_drops_a_recorded_result(tmp_path: Path) -> None:
    """Past ``max_outbox_records`` undelivered records the tap sheds new cases as
    ``shed_outbox_full``; the records already written all reach the collector once it is back,
    and sampling resumes."""
    kit = UplinkKit(tmp_path)
    with reserved_port() as port:  # kept for the restart below
        await _full_outbox(kit, tmp_path, port)


async def _full_outbox(kit: UplinkKit, tmp_path: Path, port: int) -> None:
    collector = kit.collector(port=port)
    await collector.start()
    await collector.stop()  # down from the start: every record waits
    try:
        async with Harness(tmp_path, extra=kit.uplink_toml(collector.url, max_outbox_records=10, state_interval_seconds=3600.0)) as h:
            t = await h.create_trial()
            await h.send([exchange(i) for i in range(12)])  # sampled before the bound is read: all run
            await h.settle(t["id"], 12)
            await h.runtime.watch_outbox()
            assert await h.runtime.store.outbox_depth() == 12 and h.runtime.outbox_full
            reply = await h.send([exchange(i) for i in range(12, 20)])
            assert (reply["sampled"], reply["shed"]) == (0, 8)
            view = await h.settle(t["id"], 20)
            outcomes = view["funnel"]["outcomes"]
            assert outcomes["shed_outbox_full"] == 8 and sum(outcomes.values()) == view["funnel"]["total"] == 20
            assert await h.runtime.store.outbox_depth() == 12, "no recorded result is dropped"
            assert h.admin is not None
            scrape = (await h.admin.get("/metrics")).text.splitlines()
            assert "shadowtrial_uplink_outbox_depth 12" in scrape
            assert 'shadowtrial_cases_shed_total{reason="outbox_full"} 8' in scrape

            collector = kit.collector(port=port)  # back: the 12 records drain, sampling resumes
            await collector.start()
            await _all_delivered(h, kit, t["id"])
            await h.runtime.watch_outbox()
            assert not h.runtime.outbox_full
            assert (await h.send([exchange(i) for i in range(20, 24)]))["sampled"] == 4
            await h.settle(t["id"], 24)
            await _all_delivered(h, kit, t["id"])
            held = [rid for rid, _ in kit.held()]
            assert len(held) == len(set(held)) == 16  # 12 + 4 run cases; the 8 shed were never run
            scrape = (await h.admin.get("/metrics")).text.splitlines()
            assert "shadowtrial_uplink_records_delivered_total 16" in scrape
    finally:
        await collector.stop()


async def test_the_collector_shows_each_trials_latest_state_and_verdict(tmp_path: Path) -> None:
    """``trial_state`` records: the collector's ``GET /v1/trials`` shows what the sidecar's own
    view shows (status, worded verdict, funnel, spend), and follows a stop."""
    kit = UplinkKit(tmp_path)
    async with kit.collector() as c:
        async with Harness(tmp_path, extra=kit.uplink_toml(c.url)) as h:
            t = await h.create_trial()
            await h.send([exchange(i) for i in range(40)])
            await h.settle(t["id"], 40)
            assert h.admin is not None

            async def shown(status: str) -> dict[str, Any] | None:
                view = (await h.admin.get(f"/v1/trials/{t['id']}")).json()
                async with httpx.AsyncClient() as client:
                    trials = (await client.get(f"{c.url}/v1/trials")).json()["trials"]
                state = next((x["state"] for x in trials if x["trial_id"] == t["id"]), None)
                if state is None or state["status"] != status or state["funnel"] != {k: n for k, n in view["funnel"]["outcomes"].items() if n}:
                    return None
                return {"state": state, "view": view}

            async def matches(status: str) -> bool:
                return await shown(status) is not None

            await wait_for(lambda: matches("running"), timeout=30, what="the running trial's state at the collector")
            got = await shown("running")
            assert got is not None
            state, view = got["state"], got["view"]
            assert state["verdict"] == view["verdict"]["wording"] and state["decision"] == view["verdict"]["code"]
            assert state["cases"] == view["verdict"]["cases"] and state["spent_micros"] == view["spend"]["charged_micros"]
            assert state["execution_site"] == "local" and state["team"] == "team-a"
            await h.admin.post(f"/v1/trials/{t['id']}/stop")
            await wait_for(lambda: matches("stopped"), timeout=30, what="the stop reaching the collector")
            states = kit.held("trial_state")
            revisions = [json.loads(body)["revision"] for _, body in states]
            assert len(revisions) == len(set(revisions)), "one record per revision"
            print(f"\ntrial states held: {len(states)} (revisions {sorted(revisions)})")
