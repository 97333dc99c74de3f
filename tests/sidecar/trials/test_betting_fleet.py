"""The betting sequence across a fleet and a SIGKILL (issue 31): identical decisions, identical cases.

Two real ``shadowtrial serve`` processes on one PostgreSQL judge one trial's cases, each
folding the trial on every read and every engine refresh. Midway one of them is SIGKILLed
and started again. The betting capital depends on the order of the cases, so every fold
must take the cases in the store's scoring order and resume exactly where the kept state
ends: at the end, the decision and the case it was reached at are the same through both
sidecars, and the kept state is bit for bit the one a single pure fold of the stored stream,
in one go or in pieces, gives.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import pytest

from policies.stream import fold_cases
from sidecar.demo.fake_provider import FakeProvider
from sidecar.store import make_store
from sidecar.trials.fold import _text
from tests.harness import CANDIDATE, INCUMBENT, wait_for, write_config
from tests.pg import PostgresServer
from tests.sidecar.test_fleet import running_trials
from tests.sidecar import test_lifecycle as lifecycle
from tests.sidecar.test_lifecycle import Client, ServerProcess, fake_and_servers, start_server  # noqa: F401
from tests.sidecar.trials.test_verdict_stands import mixed, models, planted

OUTCOMES = mixed(60, 14, 16)


async def test_two_sidecars_and_a_sigkill_fold_one_stream_to_the_same_decision(
    tmp_path: Path, pg_server: PostgresServer, fake_and_servers: tuple[FakeProvider, list[ServerProcess]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(lifecycle, "START_TIMEOUT_S", 60.0)  # a bound, not a wait: shared CI machines start slowly
    fake, servers = fake_and_servers
    fake.models.clear()
    fake.models.update(models())
    dsn = pg_server.create_database()
    config = write_config(tmp_path, fake.base_url, workers=4, lease_seconds=1.0, refresh_seconds=0.2,
                          store_url=dsn)
    (a_server, a), (_b_server, b) = [await start_server(servers, config, tmp_path) for _ in range(2)]
    store = make_store(dsn)
    await store.open()
    try:
        r = await a.admin.post("/v1/trials", json={
            "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
            "spend_cap_usd": 10.0, "sample_rate": 1.0, "audit_share": 0.0,
            "on_decision": "continue",  # the stream is folded past its decision, by both sidecars
        })
        assert r.status_code == 201, r.text
        tid = r.json()["id"]

        async def routed() -> bool:
            return all([await running_trials(c) == 1 for c in (a, b)])

        await wait_for(routed, timeout=15, what="both sidecars to route the trial")

        async def reads(clients: list[Client], stop: asyncio.Event) -> None:
            while not stop.is_set():  # every read folds; keep both folding while cases finish
                for c in clients:
                    try:
                        await c.trial(tid)
                    except httpx.HTTPError:  # a sidecar going down
                        pass

        # First half through both sidecars, read through both.
        stop = asyncio.Event()
        reader = asyncio.create_task(reads([a, b], stop))
        half = len(OUTCOMES) // 2
        await asyncio.gather(a.send([planted(i, q) for i, q in enumerate(OUTCOMES[:half]) if i % 2 == 0]),
                             b.send([planted(i, q) for i, q in enumerate(OUTCOMES[:half]) if i % 2 == 1]))

        async def some_judged() -> bool:
            return len(await store.scores_after(tid, 0)) >= half // 2

        await wait_for(some_judged, timeout=30, what="some cases scored")
        stop.set()
        await reader
        a_server.signal(signal.SIGKILL)  # mid-run: cases in flight, folds under way
        assert await a_server.wait(lifecycle.REAP_S) == -signal.SIGKILL
        await a.aclose()
        a_server, a = await start_server(servers, config, tmp_path)

        stop = asyncio.Event()
        reader = asyncio.create_task(reads([a, b], stop))
        rest = list(enumerate(OUTCOMES))[half:]
        await asyncio.gather(a.send([planted(i, q) for i, q in rest if i % 2 == 0]),
                             b.send([planted(i, q) for i, q in rest if i % 2 == 1]))

        # Exchanges queued in the killed sidecar's intake are gone with it (no journal on PostgreSQL):
        # wait for everything sent to the survivors, with both intakes empty and nothing in flight.
        survivors = len(OUTCOMES[:half][1::2]) + len(rest)

        async def settled() -> bool:
            view = await b.trial(tid)
            intakes = [(await c.live())["intake"] for c in (a, b)]
            return (view["funnel"]["total"] >= survivors and view["funnel"]["in_flight"] == 0
                    and all(i["depth"] == 0 and i["in_flight"] == 0 for i in intakes))

        await wait_for(settled, timeout=60, what="every case finished or recovered")
        stop.set()
        await reader

        stream = await store.scores_after(tid, 0)
        assert [n for n, _ in stream] == list(range(1, len(stream) + 1)), "the scoring sequence has no gap"
        assert len(stream) >= half, "most cases were scored"
        whole = fold_cases(None, stream, alpha=0.05, tolerance=0.05, min_cases=20, expected_cases=1000)
        pieces = None
        for cut in (0, 7, 8, 31, len(stream) // 2, len(stream)):
            pieces = fold_cases(pieces.state if pieces else None, stream[:cut], alpha=0.05, tolerance=0.05,
                                min_cases=20, expected_cases=1000)
        assert pieces is not None and pieces.state == whole.state
        assert whole.state.sequence is not None and whole.verdict != "inconclusive", "the stream decided"

        views = [await c.trial(tid) for c in (a, b)]
        verdicts = [(v["verdict"]["code"], v["verdict"]["decided_at"]) for v in views]
        assert verdicts == [(whole.verdict, whole.state.sequence.decided_at)] * 2, verdicts
        record = await store.get_trial(tid)
        assert record is not None and record.sequence_state == _text(whole.state.to_dict()), \
            "the kept state is bit for bit the pure fold of the stream"
        assert json.loads(record.sequence_state)["cursor"] == len(stream)
    finally:
        await store.close()
        await a.aclose()
        await b.aclose()

