"""The engine in its own process (``engine.isolation = "process"``, the default): cases run
there with its own store connection and provider clients, the post-finish hook runs there in
the finishing transaction, backpressure sheds only at the tap and every sampled case is
counted once — through a drain at stop, and when the engine's process dies under the sidecar.
(The sidecar's own death, with the engine's process following it, is in test_lifecycle.)"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from pathlib import Path

import pytest

from sidecar.demo.fake_provider import FakeModel
from sidecar.engine.process import EngineProcess, start_method
from sidecar.engine.subjects import Subject
from sidecar.store.records import CaseFinish, OutboxRecord
from tests.harness import CANDIDATE, Harness, default_models, exchange, wait_for


def report(subject: Subject, finish: CaseFinish) -> tuple[OutboxRecord, ...]:
    """A post-finish hook; top-level, so it travels to the engine's process."""
    body = json.dumps({"trial": subject.id, "outcome": finish.outcome, "pid": os.getpid()})
    return (OutboxRecord(record_id=f"case:{finish.case_id}", topic="case_finished", body=body),)


def slow_candidate(latency_ms: tuple[float, float]) -> dict[str, FakeModel]:
    models = default_models()
    models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=latency_ms)
    return models


async def test_cases_run_in_the_engine_process_with_the_hook_and_each_exchange_once(tmp_path: Path) -> None:
    async with Harness(tmp_path, isolation="process", hooks=[report]) as h:
        engine = h.runtime.engine
        assert isinstance(engine, EngineProcess) and engine.pid not in (None, os.getpid())
        trial = await h.create_trial()
        batch = [exchange(i) for i in range(50)]
        assert (await h.send(batch))["sampled"] == 50
        assert (await h.send(batch[:10]))["sampled"] == 10  # re-deliveries: claimed once, never run twice
        await h.runtime.idle()
        view = await h.trial(trial["id"])
        assert view["funnel"]["outcomes"]["judged"] == 50 and view["funnel"]["total"] == 50
        assert view["funnel"]["in_flight"] == 0 and engine.in_flight == 0
        assert h.fake.calls[CANDIDATE] == 50
        cases = await h.runtime.store.cases(trial["id"])
        assert {c["owner"] for c in cases} == {engine.owner}
        records = await h.runtime.store.outbox()
        assert sorted(r.record_id for r in records) == sorted(f"case:{c['id']}" for c in cases)
        assert {json.loads(r.body)["pid"] for r in records} == {engine.pid}


async def test_a_full_engine_sheds_at_the_tap_only_and_every_case_is_counted(tmp_path: Path) -> None:
    async with Harness(
        tmp_path, isolation="process", models=slow_candidate((20.0, 40.0)), workers=2, queue_size=16
    ) as h:
        trial = await h.create_trial()
        sampled = shed = 0
        for start in range(0, 600, 100):
            reply = await h.send([exchange(start + i) for i in range(100)])
            assert reply["sampled"] + reply["shed"] == 100
            sampled, shed = sampled + reply["sampled"], shed + reply["shed"]
        await h.runtime.idle()
        view = await h.trial(trial["id"])
        outcomes = view["funnel"]["outcomes"]
        print(f"\n600 offered to 2 workers behind a 16-claim hand-off: {sampled} sampled, {shed} shed at the tap")
        assert shed > 0 and outcomes["shed_queue_full"] == shed
        assert outcomes["judged"] == sampled == h.fake.calls[CANDIDATE]
        assert view["funnel"]["total"] == 600 and view["funnel"]["in_flight"] == 0


async def test_stop_drains_within_the_deadline_and_counts_the_rest(tmp_path: Path) -> None:
    h = Harness(tmp_path, isolation="process", models=slow_candidate((150.0, 250.0)), workers=2, drain=0.5)
    async with h:
        trial = await h.create_trial()
        assert (await h.send([exchange(i) for i in range(300)]))["sampled"] == 300

        # Stop only once a case has been judged: on a loaded machine the engine's process may
        # not finish one within the half-second drain alone (a run once failed that way), and
        # this test is about the drain counting the rest, not about how fast the first ends.
        async def one_judged() -> bool:
            return (await h.trial(trial["id"]))["funnel"]["outcomes"].get("judged", 0) > 0

        await wait_for(one_judged, timeout=30, what="the first judged case")
    # A second life on the same store reads what the first one left.
    async with Harness(tmp_path, isolation="process") as again:
        view = await again.trial(trial["id"])
    outcomes = view["funnel"]["outcomes"]
    assert view["funnel"]["total"] == 300 and view["funnel"]["in_flight"] == 0, view["funnel"]
    assert outcomes["shed_stopped"] > 0 and outcomes["judged"] > 0
    assert outcomes["judged"] + outcomes["indeterminate"] + outcomes["shed_stopped"] == 300, outcomes


async def test_when_the_engine_process_dies_the_sidecar_says_so_and_counts_what_it_cannot_run(tmp_path: Path) -> None:
    async with Harness(tmp_path, isolation="process") as h:
        trial = await h.create_trial()
        await h.send([exchange(i) for i in range(20)])
        await h.runtime.idle()
        engine = h.runtime.engine
        assert isinstance(engine, EngineProcess) and engine.pid is not None
        os.kill(engine.pid, signal.SIGKILL)

        async def unready() -> bool:
            r = await h.admin.get("/readyz")  # type: ignore[union-attr]
            return r.status_code == 503 and "engine process exited" in r.json()["error"]["message"]

        await wait_for(unready, timeout=10, what="/readyz to report the dead engine")
        # The tap still answers at once; what it samples now cannot run and is counted, not lost.
        reply = await h.send([exchange(100 + i) for i in range(30)])
        assert reply == {"accepted": 30, "sampled": 0, "shed": 30}
        view = await h.settle(trial["id"], 50)
        outcomes = view["funnel"]["outcomes"]
        assert outcomes["judged"] == 20 and outcomes["shed_stopped"] == 30, outcomes
        assert view["funnel"]["total"] == 50


# -- the engine's process forked from the warm server (``use_start_method("forkserver")``, which
# tests/conftest.py sets for every in-process sidecar; ``shadowtrial serve`` keeps ``spawn``) ------


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _judgment_ids(db: Path) -> set[str]:
    conn = sqlite3.connect(db)
    try:
        return {row[0] for row in conn.execute("SELECT id FROM judgments")}
    finally:
        conn.close()


async def test_engines_forked_from_the_warm_server_are_separate_and_draw_their_own_judgment_ids(tmp_path: Path) -> None:
    """Two engines' processes forked from one server's state: each a process of its own (its
    death is its own, see the test above), neither this one nor the server, and the judgment-id
    generator seeded again in each (otherwise both would draw the server's next ids)."""
    assert start_method() == "forkserver"
    pids, ids = [], []
    for n in range(2):
        (tmp_path / f"s{n}").mkdir()
        async with Harness(tmp_path / f"s{n}", isolation="process") as h:
            engine = h.runtime.engine
            assert isinstance(engine, EngineProcess) and engine.pid is not None
            assert engine.pid != os.getpid() and _parent(engine.pid) not in (os.getpid(), engine.pid)
            pids.append((engine.pid, _parent(engine.pid)))
            trial = await h.create_trial()
            await h.send([exchange(1)])
            await h.settle(trial["id"], 1)
        ids.append(_judgment_ids(tmp_path / f"s{n}" / "trials.db"))
    (first, server), (second, server_again) = pids
    assert first != second and server == server_again, pids  # one warm server, two children
    assert ids[0] and ids[1] and not ids[0] & ids[1], ids


def probe(subject: Subject, finish: CaseFinish) -> tuple[OutboxRecord, ...]:
    """A post-finish hook that reports what the engine's process sees of its environment."""
    print(f"engine-stderr-{finish.case_id}", file=sys.stderr, flush=True)
    body = json.dumps({"env": os.environ.get("I32_ENGINE_PROBE"), "cwd": os.getcwd()})
    return (OutboxRecord(record_id=f"probe:{finish.case_id}", topic="case_finished", body=body),)


async def test_a_forked_engine_gets_the_environment_directory_and_stderr_of_its_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a spawned process would: the values at the engine's start, not the server's (which
    may have started long before, in another test's directory and with its captured stderr)."""
    (tmp_path / "warm").mkdir()
    (tmp_path / "s").mkdir()
    async with Harness(tmp_path / "warm", isolation="process"):
        pass  # the server runs now, whatever started it first
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.setenv("I32_ENGINE_PROBE", "set-after-the-server-started")
    monkeypatch.chdir(here)
    log = tmp_path / "stderr.log"
    saved = os.dup(2)
    try:
        with open(log, "wb") as f:
            os.dup2(f.fileno(), 2)
        async with Harness(tmp_path / "s", isolation="process", hooks=[probe]) as h:
            trial = await h.create_trial()
            await h.send([exchange(1)])
            await h.settle(trial["id"], 1)
            [record] = await h.runtime.store.outbox()
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    assert json.loads(record.body) == {"env": "set-after-the-server-started", "cwd": str(here)}
    assert f"engine-stderr-{record.record_id.removeprefix('probe:')}" in log.read_text()
