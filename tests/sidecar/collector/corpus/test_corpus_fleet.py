"""A fleet of collectors (issue 25, item 4): two ``shadowtrial collector`` processes on one real
PostgreSQL share one comparison group of 220 invocations by item lease. One is SIGKILLed
mid-run: only the invocations it held become ``invocation_indeterminate`` (once its lease has
ended), the other collector finishes the group, every planned invocation is called at most
once (the fake provider counts each), and the denominators add up."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import asyncpg

from sidecar.demo.fake_provider import FakeModel, FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, wait_for
from tests.pg import PostgresServer
from tests.sidecar.collector.corpus.runs_kit import Api, collector_toml, group_body, start_group
from tests.sidecar.collector.corpus.test_corpus_run_crash import CollectorProcess

ITEMS = 110  # two arms: 220 invocations
LEASE_S = 5.0  # long enough that a collector slowed by a busy machine keeps its claims


def generation_calls(fake: FakeProvider) -> Counter[tuple[str | None, str]]:
    """Generation calls per (model, question) at the provider."""
    out: Counter[tuple[str | None, str]] = Counter()
    for q in fake.requests:
        if q.model in (INCUMBENT, CANDIDATE):
            out[(q.model, str(q.body["messages"][-1]["content"]))] += 1
    return out


async def test_two_collectors_share_a_group_and_a_sigkilled_one_leaves_only_its_own_in_flight_indeterminate(
    tmp_path: Path, pg_server: PostgresServer
) -> None:
    dsn = pg_server.create_database()
    slow = (150.0, 250.0)  # a call lasts longer than the store's work around it: the kill finds calls in flight
    models = {INCUMBENT: FakeModel(quality=0.5, quality_noise=0.02, filler_words=(2, 6), latency_ms=slow),
              CANDIDATE: FakeModel(quality=0.8, quality_noise=0.02, filler_words=(2, 6), latency_ms=slow),
              JUDGE: FakeModel(judge=True, latency_ms=(5.0, 15.0))}
    children: list[CollectorProcess] = []
    db = await asyncpg.connect(dsn)
    async with FakeProvider(models, seed=25) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url, lease_seconds=LEASE_S, workers=16, store_url=dsn)
        try:
            for n in range(2):
                child = CollectorProcess(path, tmp_path / f"collector-{n}.log")
                children.append(child)
                await child.start()
            survivor, victim = children
            api = Api(auth, survivor.url)
            suite = await api.suite(await api.dataset(ITEMS), [{"name": "pref", "kind": "paired_judge"},
                                                               {"name": "latency", "kind": "latency"}])
            started = await start_group(api, group_body(suite), "k-fleet")
            assert started.status_code == 201, started.text
            gid = started.json()["id"]
            assert victim.proc is not None
            victim_owner = f"runner-{victim.proc.pid}-"

            async def both_at_work() -> bool:
                # The victim is frozen while its claims are read, and killed without running again:
                # what the store shows it holding is what it holds at the kill. (Read while it ran,
                # a starved test process could kill it after it had finished those claims and
                # before it claimed the next: nothing in flight, nothing indeterminate.)
                assert victim.proc is not None
                victim.proc.send_signal(signal.SIGSTOP)
                owners = {r["owner"] for r in await db.fetch(
                    "SELECT owner FROM comparison_attempts WHERE comparison_id=$1 AND status='claimed'", gid)}
                done = await db.fetchval("SELECT COUNT(*) FROM comparison_attempts WHERE comparison_id=$1 "
                                         "AND status='completed'", gid)
                if done >= 60 and len(owners) == 2 and any(o.startswith(victim_owner) for o in owners):
                    return True
                victim.proc.send_signal(signal.SIGCONT)
                return False

            t0 = time.monotonic()
            await wait_for(both_at_work, what="both collectors with invocations in flight, 60 done")
            t1 = time.monotonic()
            await victim.kill(signal.SIGKILL)  # frozen since its claims were read
            at_kill = Counter(r["status"] for r in await db.fetch(
                "SELECT status FROM comparison_attempts WHERE comparison_id=$1", gid))
            view: dict[str, Any] = {}

            async def ended() -> bool:
                view.update((await api.call("GET", f"/v1/comparisons/{gid}")).json())
                return bool(view["status"] == "completed")

            await wait_for(ended, timeout=60, what="the surviving collector to finish the group")
            t2 = time.monotonic()
            rows = await db.fetch("SELECT status, owner, error FROM comparison_attempts WHERE comparison_id=$1", gid)
            judged = await db.fetch("SELECT status, owner FROM comparison_scores WHERE comparison_id=$1 "
                                    "AND metric='pref'", gid)
            await survivor.kill(signal.SIGTERM)
            await api.aclose()
        finally:
            for child in children:
                await child.ensure_dead()
            await db.close()
    calls = generation_calls(fake)
    statuses = Counter(r["status"] for r in rows)
    lost = [r for r in rows if r["status"] == "invocation_indeterminate"]
    arms = {a["arm"]: a["generation"] for a in view["run"]["arms"]}
    print(f"\ncollector fleet: {2 * ITEMS} invocations; at the kill {dict(at_kill)}; at the end {dict(statuses)}; "
          f"generation calls {sum(calls.values())} over {len(calls)} distinct; denominators {arms}; "
          f"{t1 - t0:.1f} s to the kill, {t2 - t1:.1f} s after it")
    assert len(rows) == 2 * ITEMS, "every planned invocation has exactly one attempt"
    assert max(calls.values()) == 1, "no invocation was called twice"
    assert lost and {r["owner"][:len(victim_owner)] for r in lost} == {victim_owner}, \
        "only the killed collector's in-flight invocations are indeterminate"
    assert all(r["error"] == "claim_expired" for r in lost)
    assert len(lost) <= 2 * 8, "at most what it held of the group (8 items, 2 arms)"
    called = statuses["completed"] + statuses["failed"]
    assert called <= sum(calls.values()) <= called + len(lost)
    for g in arms.values():
        assert g["completed"] + g["failed"] + g["invocation_indeterminate"] + g["in_flight"] + g["queued"] \
            + g["not_started"] == g["planned"] == ITEMS
    assert sum(g["invocation_indeterminate"] for g in arms.values()) == len(lost)
    assert all(r["status"] != "pending" for r in judged)
    assert not [r for r in judged if r["status"] == "invocation_indeterminate" and not r["owner"].startswith(victim_owner)]
