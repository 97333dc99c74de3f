"""Issue 21 item 1, second part: no internal worker of the sidecar dies silently.

Each background worker is killed in turn (a dependency made to fail once with an error its own
handler does not absorb; the engine's process SIGKILLed; the engine's loop stopped) and the
sidecar notices within a bounded time: the worker is restarted (its death logged once, with
its type and place, never its message), or ``/readyz`` answers 503 naming it and the process
stops and exits non-zero. The issue's own case: the thread forwarding claims to the engine's
process dying (``OverflowError`` in ``encode_claims``) makes ``/readyz`` 503."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

import sidecar.engine.process as engine_process
from sidecar.demo.fake_provider import FakeProvider
from sidecar.engine.process import EngineProcess
from sidecar.engine.subjects import Subject
from sidecar.store.records import CaseFinish, OutboxRecord
from tests.harness import Harness, default_models, exchange, wait_for, write_config
from tests.sidecar.forkserve import create_subprocess
from tests.sidecar.services.test_replay import replay as replay_trial
from tests.sidecar.workers_kit import FAST, HOLD, Fault, fail_once, restarted
from tests.uplink.kit import UplinkKit

POISON_TEAM = "team-poison"
#: Trials whose first case the hook below already failed (one per trial, in each process).
_poisoned: set[str] = set()


def poison_hook(subject: Subject, finish: CaseFinish) -> tuple[OutboxRecord, ...]:
    """A post-finish hook (top-level: it travels to the engine's process) that kills the engine
    worker running the first case of a ``team-poison`` trial."""
    if subject.record.team == POISON_TEAM and subject.id not in _poisoned:
        _poisoned.add(subject.id)
        raise Fault()
    return ()


async def readyz(h: Harness) -> tuple[int, dict[str, Any]]:
    assert h.admin is not None
    r = await h.admin.get("/readyz")
    return r.status_code, r.json()


async def poisoned_worker_restarted(h: Harness, prefix: str = "") -> None:
    """Kill an engine worker with a poisoned case; a restarted worker runs the next cases."""
    trial = await h.create_trial(team=POISON_TEAM)
    await h.send([exchange(900 + i, team=POISON_TEAM) for i in range(3)])
    sup = h.runtime.supervisor

    async def one_restarted() -> bool:
        return any(w.name.startswith(prefix + "engine-worker-") and w.restarts >= 1 and w.state == "running"
                   and w.last is not None and w.last.error == "Fault" for w in sup.workers())

    await wait_for(one_restarted, timeout=30, what="a restarted engine worker")

    async def others_judged() -> bool:
        return (await h.trial(trial["id"]))["funnel"]["outcomes"].get("judged", 0) == 2

    # The poisoned case was claimed and never finished (the stop's retire settles it); the others run.
    await wait_for(others_judged, timeout=30, what="the other cases judged")


async def test_each_worker_of_a_sidecar_killed_in_turn_is_restarted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    kit = UplinkKit(tmp_path)
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    extra = (kit.uplink_toml("http://127.0.0.1:9") + '[retention]\nkey_env = "ST_KEY"\n'
             '[alerts]\nwebhook_url = "http://127.0.0.1:9/hook"\nsecret_env = "HOOK_SECRET"\npoll_seconds = 0.05\n')
    harness = Harness(tmp_path, extra=extra, environ={"ST_KEY": key, "HOOK_SECRET": "s" * 32}, hooks=[poison_hook],
                      lease_seconds=1.5, refresh_seconds=0.2)
    caplog.set_level(logging.ERROR, logger="shadowtrial.supervise")
    async with harness as h:
        rt = h.runtime
        sup = rt.supervisor
        sup.backoff = FAST
        engine = rt.engine
        store = engine._store  # the engine's own connection (on a thread here)
        names = {w.name for w in sup.workers()}
        expected = {"funnel-flush", "outbox-bound", "trial-states", "uplink-delivery", "forwarder",
                    "retention-writer", "alert-webhook", "engine", "engine-refresh", "engine-fold",
                    "engine-heartbeat", "engine-sweep", "engine-account"} | {f"engine-worker-{i}" for i in range(8)}
        assert expected <= names, expected - names
        assert await readyz(h) == (200, {"status": "ready"})
        trial = await h.create_trial()

        async def kill(name: str, fired: list[int], trigger: Any = None) -> None:
            began = time.monotonic()
            if trigger is not None:
                await trigger()
            await restarted(sup, name)
            assert fired == [1]
            print(f"{name}: noticed and restarted in {time.monotonic() - began:.2f} s")

        # The main loop's chores.
        await kill("funnel-flush", fail_once(rt.funnel, "flush"))
        await kill("outbox-bound", fail_once(rt, "watch_outbox"))
        await kill("trial-states", fail_once(rt.states, "publish"))
        await kill("uplink-delivery", fail_once(rt.delivery.outbox, "claim_outbox"))
        await kill("alert-webhook", fail_once(rt.webhook.store, "pending_transitions"))
        # The forwarder to the outbox: it fails taking its next batch, after the one offered now.
        fired = fail_once(rt.forwarder.handoff, "take_many")
        await kill("forwarder", fired, lambda: _offer_one(rt.forwarder.handoff))
        # The retention window's writer: its store write fails.
        fired = fail_once(rt.store, "retain")
        await kill("retention-writer", fired, lambda: h.send([exchange(1)]))
        # A replay's feeder: its read of the window fails; restarted, it resumes from the stored
        # progress and feeds the window to the end.
        await h.send([exchange(20 + i) for i in range(3)])
        await rt.retention.idle()
        fired = fail_once(rt.store, "retained")
        replay = await replay_trial(h)

        async def replay_back() -> bool:
            w = sup.worker(f"replay-{replay['id']}")
            return w is not None and w.restarts == 1 and w.last is not None and w.last.error == "Fault"

        await wait_for(replay_back, timeout=30, what="the replay's feeder restarted")
        assert fired == [1]
        await rt.replays.wait(replay["id"])
        fed = await h.trial(replay["id"])
        assert fed["status"] == "stopped" and fed["funnel"]["outcomes"].get("judged", 0) >= 1, fed["funnel"]
        # The engine's housekeeping, on the engine's loop.
        await kill("engine-refresh", fail_once(store, "list_trials"))
        await kill("engine-heartbeat", fail_once(store, "heartbeat"))
        await kill("engine-sweep", fail_once(store, "recover_expired"))
        await kill("engine-account", fail_once(engine.watermark, "mark"))
        fired = fail_once(store, "fold_inputs")  # folding the cases just judged (what the fold reads)
        await kill("engine-fold", fired, lambda: h.send([exchange(2), exchange(3)]))
        # An engine worker, killed by a case whose post-finish hook fails.
        await poisoned_worker_restarted(h)
        # Everything still runs: a case goes from the tap to its outcome.
        await h.send([exchange(10)])
        view = await h.settle(trial["id"], 7)
        assert view["funnel"]["outcomes"]["judged"] == 7
        assert sup.fatal is None and not rt.failed.is_set()
        assert await readyz(h) == (200, {"status": "ready"})
    deaths = [r.getMessage() for r in caplog.records if r.name == "shadowtrial.supervise"]
    assert len(deaths) == 14, deaths  # each death logged once
    assert all("Fault at tests/sidecar/workers_kit.py:" in line or "Fault at tests/sidecar/test_worker_supervision"
               in line for line in deaths), deaths
    assert "CANARY" not in caplog.text and "sk-never" not in caplog.text


async def _offer_one(handoff: Any) -> None:
    from sidecar.engine.engine import Claim
    from sidecar.ingest.wire import Exchange
    import msgspec

    assert handoff.offer_many([Claim("t-unrouted", msgspec.convert(exchange(5), Exchange), 0)]) == 1


async def test_a_worker_waiting_for_its_restart_makes_readyz_503_naming_it(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        sup = h.runtime.supervisor
        sup.backoff = HOLD
        fail_once(h.runtime.funnel, "flush")

        async def named() -> bool:
            status, body = await readyz(h)
            return status == 503 and [w["name"] for w in body.get("error", {}).get("workers", [])] == ["funnel-flush"]

        await wait_for(named, timeout=10, what="/readyz to name the dead worker")
        status, body = await readyz(h)
        assert body["error"]["code"] == "worker_down" and "funnel-flush (Fault at tests/sidecar/workers_kit.py:" \
            in body["error"]["message"] and "restarting" in body["error"]["message"]
        [w] = body["error"]["workers"]
        assert (w["state"], w["policy"], w["error"], w["restarts"]) == ("restarting", "restart", "Fault", 0)
        assert "CANARY" not in str(body)
        assert not h.runtime.failed.is_set()  # a restartable worker never ends the process


ENCODE_CLAIMS = engine_process.encode_claims


def _overflow_once() -> list[int]:
    original = ENCODE_CLAIMS
    fired: list[int] = []

    def encode(claims: Any) -> bytes:
        if not fired:
            fired.append(len(claims))
            engine_process.encode_claims = original
            raise OverflowError("can't serialize 18446744073709551616 CANARY")
        return original(claims)

    engine_process.encode_claims = encode
    return fired


async def test_the_forward_thread_dying_makes_readyz_503_naming_it(tmp_path: Path) -> None:
    """The issue's scenario: the thread forwarding claims to the engine's process dies with an
    OverflowError in encode_claims (injected here, whatever the encoder does with wide integers)."""
    fired = _overflow_once()
    try:
        async with Harness(tmp_path, isolation="process") as h:
            h.runtime.supervisor.backoff = HOLD
            await h.create_trial()
            await h.send([exchange(1)])

            async def named() -> bool:
                status, body = await readyz(h)
                return status == 503 and "engine-forward" in [w["name"] for w in body.get("error", {}).get("workers", [])]

            await wait_for(named, timeout=20, what="/readyz to name the forward thread")
            _, body = await readyz(h)
            [w] = [w for w in body["error"]["workers"] if w["name"] == "engine-forward"]
            assert (w["state"], w["error"]) == ("restarting", "OverflowError")
            assert "engine-forward (OverflowError at" in body["error"]["message"]
            assert "CANARY" not in str(body) and "18446744073709551616" not in str(body)
            assert fired == [1]
    finally:
        engine_process.encode_claims = ENCODE_CLAIMS


async def test_engine_process_workers_are_restarted_and_its_death_is_fatal(tmp_path: Path) -> None:
    """With the engine in its own process: the forward thread restarted (the batch it held
    counted, the next cases judged), the route refresh restarted, a worker of the engine's
    process restarted there and reported here; then the engine's process SIGKILLed: 503 naming
    it, and the runtime asks to stop and exit non-zero."""
    async with Harness(tmp_path, isolation="process", hooks=[poison_hook], refresh_seconds=0.2) as h:
        rt = h.runtime
        sup = rt.supervisor
        sup.backoff = FAST
        trial = await h.create_trial()
        fired = _overflow_once()
        await h.send([exchange(i) for i in range(5)])
        await restarted(sup, "engine-forward", error="OverflowError")
        assert fired and fired[0] >= 1
        await h.send([exchange(10 + i) for i in range(5)])
        view = await h.settle(trial["id"], 10)
        outcomes = view["funnel"]["outcomes"]
        assert outcomes.get("shed_stopped", 0) == fired[0] and outcomes["judged"] == 10 - fired[0], outcomes
        fail_once(rt, "refresh_routes")
        await restarted(sup, "routes")
        await poisoned_worker_restarted(h, prefix="engine-process:")
        assert not rt.failed.is_set() and (await readyz(h))[0] == 200

        engine = rt.engine
        assert isinstance(engine, EngineProcess) and engine.pid is not None
        os.kill(engine.pid, signal.SIGKILL)

        async def told() -> bool:
            return rt.failed.is_set()

        await wait_for(told, timeout=20, what="the runtime to ask for an exit")
        status, body = await readyz(h)
        assert status == 503
        [w] = [w for w in body["error"]["workers"] if w["name"] == "engine-process"]
        assert (w["state"], w["policy"], w["error"]) == ("failed", "exit", f"exited with code {-signal.SIGKILL}")


async def test_the_engine_listening_thread_raising_is_fatal(tmp_path: Path) -> None:
    """The thread reading the engine's control pipe dies: the pipe's state is unknown, so the
    sidecar is told to exit (and the engine's process, its pipe closed, exits too)."""
    async with Harness(tmp_path, isolation="process") as h:
        rt = h.runtime
        await h.create_trial()
        fired = fail_once(rt.engine._ctl, "recv")  # its next read, after the status a case sends
        await h.send([exchange(1)])

        async def told() -> bool:
            return rt.failed.is_set()

        await wait_for(told, timeout=20, what="the runtime to ask for an exit")
        assert fired == [1]
        status, body = await readyz(h)
        assert status == 503
        assert ("engine-listen", "failed", "Fault") in [(w["name"], w["state"], w["error"])
                                                       for w in body["error"]["workers"]]


async def test_the_spend_reading_loop_is_restarted(tmp_path: Path) -> None:
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from sidecar.config import TelemetryConfig
    from sidecar.telemetry import Telemetry

    telemetry = Telemetry.start(TelemetryConfig(), process="sidecar", metric_reader=InMemoryMetricReader())
    try:
        async with Harness(tmp_path, telemetry=telemetry, extra="[telemetry]\nexport_interval_seconds = 0.1\n") as h:
            sup = h.runtime.supervisor
            sup.backoff = FAST
            fired = fail_once(h.runtime.store, "total_spend")
            await restarted(sup, "spend-reading")
            assert fired == [1]
    finally:
        telemetry.shutdown()


async def test_the_engine_loop_ending_unbidden_is_fatal(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        rt = h.runtime
        loop = rt.engine._loop
        loop.call_soon_threadsafe(loop.stop)

        async def told() -> bool:
            return rt.failed.is_set()

        await wait_for(told, timeout=10, what="the runtime to ask for an exit")
        status, body = await readyz(h)
        assert status == 503 and body["error"]["code"] == "not_ready"
        assert "worker engine died (returned)" in body["error"]["message"]
        assert [(w["name"], w["state"]) for w in body["error"]["workers"]] == [("engine", "failed")]


async def test_serve_exits_non_zero_when_its_engine_process_is_killed(tmp_path: Path) -> None:
    """``shadowtrial serve`` itself: the engine's process SIGKILLed, the sidecar stops in order
    and exits 70, so its orchestrator restarts it."""
    fake = FakeProvider(default_models(), seed=1)
    await fake.start()
    try:
        path = write_config(tmp_path, fake.base_url, isolation="process")
        # The suite's own switches (SHADOWTRIAL_REQUIRE_*, set by .ci/run) are not the sidecar's
        # settings: the config refuses unknown SHADOWTRIAL_ variables, so they stay out.
        # A child of the warm parent that imported the sidecar once (tests/sidecar/forkserve.py,
        # which keeps them out), run as ``python -m sidecar.cli serve``.
        log = tmp_path / "serve.err"
        with log.open("wb") as err_file:
            proc = await create_subprocess(["serve", "--config", str(path)], stderr=err_file.fileno(),
                                           module="sidecar.cli")
        try:
            assert proc.stdout is not None
            line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
            assert line.startswith("shadowtrial: tap"), line
            children = _children(proc.pid)
            assert len(children) == 1, children
            os.kill(children[0], signal.SIGKILL)
            code = await asyncio.wait_for(proc.wait(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        err = log.read_text()
        assert code == 70, err
        assert err.count("worker engine-process died (exited with code -9)") == 1, err
    finally:
        await fake.stop()


def _children(pid: int) -> list[int]:
    """The engine processes whose parent is ``pid`` (Linux /proc; not multiprocessing's resource tracker)."""
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if b"spawn_main" in f.read():
                    found.append(int(entry))
    return found


async def test_the_outbox_forwarder_dying_counts_the_batch_it_held_and_runs_again(tmp_path: Path) -> None:
    """A claim the forwarder to the outbox held when it died gets its one outcome; the restarted
    forwarder takes the next batch."""
    import msgspec

    import sidecar.export.forwarder as forwarder_module
    from sidecar.engine.engine import Claim
    from sidecar.export.forwarder import Forwarder
    from sidecar.ingest.funnel import FunnelCounter
    from sidecar.ingest.routing import RoutingTable
    from sidecar.ingest.wire import Exchange
    from sidecar.store import make_store
    from sidecar.supervise import Supervisor
    from tests.store.factories import trial

    store = make_store(str(tmp_path / "s.db"))
    await store.open()
    routing = RoutingTable()
    routing.add(trial("cp", team="team-a", execution_site="control_plane", prompt_retention=True))
    funnel = FunnelCounter()
    sup = Supervisor(backoff=FAST)
    fwd = Forwarder(store, routing, funnel, queue_size=16, clock=lambda: 5.0, supervisor=sup)
    original = forwarder_module.exchange_record
    calls: list[int] = []

    def record(claim: Claim) -> Any:
        calls.append(1)
        if len(calls) == 2:  # the second claim of the first batch: the first is ready, not yet stored
            raise OverflowError("can't serialize CANARY")
        return original(claim)

    forwarder_module.exchange_record = record
    await fwd.start()
    try:
        claims = [Claim("gone", msgspec.convert(exchange(0), Exchange))]  # counted shed_stopped by _records
        claims += [Claim("cp", msgspec.convert(exchange(i), Exchange)) for i in (1, 2, 3)]
        assert fwd.handoff.offer_many(claims) == 4
        await restarted(sup, "forwarder", error="OverflowError")
        assert fwd.dropped == {"shed_stopped": 4}  # the unrouted one once, and the three held
        assert fwd.handoff.offer_many([Claim("cp", msgspec.convert(exchange(9), Exchange))]) == 1

        async def forwarded() -> bool:
            return fwd.forwarded == 1

        await wait_for(forwarded, timeout=10, what="the restarted forwarder's batch")
        assert [r.record_id for r in await store.outbox()] == ["posture:team-a::5000000", "exchange:cp:ex-9"]
    finally:
        forwarder_module.exchange_record = original
        await fwd.stop(1.0)
        await store.close()


async def test_the_engine_process_claim_reader_is_restarted_there_and_reported_here(tmp_path: Path) -> None:
    """The thread of the engine's process that reads the claim pipe dies on a message it cannot
    decode; it is restarted there, the sidecar's /readyz registry shows it, and later claims run."""
    original = ENCODE_CLAIMS
    sent: list[int] = []

    def garbled(claims: Any) -> bytes:
        if not sent:
            sent.append(len(claims))
            return b"\x93not-claims"
        return original(claims)

    async with Harness(tmp_path, isolation="process") as h:
        sup = h.runtime.supervisor
        trial = await h.create_trial()
        engine_process.encode_claims = garbled
        try:
            await h.send([exchange(1)])
            await restarted(sup, "engine-process:engine-claims", error="ValidationError", timeout=30)
        finally:
            engine_process.encode_claims = original
        await h.send([exchange(2), exchange(3)])

        async def judged() -> bool:
            return (await h.trial(trial["id"]))["funnel"]["outcomes"].get("judged", 0) == 2

        await wait_for(judged, timeout=30, what="the later claims judged")
