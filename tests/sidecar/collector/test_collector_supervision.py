"""Issue 21 item 1, second part, on the collector (``shadowtrial collector``): each of its
workers killed in turn is restarted — the control plane's driver and its engine's loops, the
corpus runner's driver and lease refresher — and its engine's loop ending unbidden makes
``/readyz`` 503 naming it and asks the process to exit non-zero."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import httpx
import pytest

from sidecar.collector.server import CollectorServer
from sidecar.config import load_config
from sidecar.demo.fake_provider import FakeProvider
from tests.harness import default_models, wait_for
from tests.sidecar.collector.corpus.runs_kit import collector_toml
from tests.sidecar.workers_kit import FAST, fail_once, restarted


async def test_each_worker_of_a_collector_killed_in_turn_is_noticed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="shadowtrial.supervise")
    fake = FakeProvider(default_models(), seed=1)
    await fake.start()
    path, _auth = collector_toml(tmp_path, fake.base_url, lease_seconds=1.5, workers=2)
    config = load_config(str(path), {})
    server = CollectorServer(config.collector, config=config)
    await server.start()
    try:
        sup = server.supervisor
        sup.backoff = FAST
        cp, runner, store = server.control_plane, server.corpus_runner, server.store
        assert cp is not None and runner is not None and store is not None
        names = {w.name for w in sup.workers()}
        assert {"control-plane", "corpus-runner", "corpus-leases", "engine", "engine-heartbeat",
                "engine-worker-0", "engine-worker-1"} <= names, names
        async with httpx.AsyncClient(base_url=server.url, timeout=30.0) as client:
            r = await client.get("/readyz")
            assert (r.status_code, r.json()) == (200, {"status": "ready"})
            for name, fired in (
                ("control-plane", fail_once(cp, "offer_pending")),
                ("corpus-runner", fail_once(store, "expire_claims")),
                ("corpus-leases", fail_once(store, "refresh_claims")),
                ("engine-heartbeat", fail_once(cp.engine._store, "heartbeat")),
            ):
                began = time.monotonic()
                await restarted(sup, name)
                assert fired == [1]
                print(f"collector {name}: noticed and restarted in {time.monotonic() - began:.2f} s")
            assert (await client.get("/readyz")).status_code == 200

            loop = cp.engine._loop
            loop.call_soon_threadsafe(loop.stop)  # the engine's loop ends under it

            async def told() -> bool:
                return server.failed.is_set()

            await wait_for(told, timeout=10, what="the collector to ask for an exit")
            r = await client.get("/readyz")
            assert r.status_code == 503
            body = r.json()
            assert body["error"]["code"] == "not_ready"
            assert [(w["name"], w["state"], w["error"]) for w in body["error"]["workers"]] == [("engine", "failed", "returned")]
    finally:
        await server.stop()
        await fake.stop()
    deaths = [r.getMessage() for r in caplog.records if r.name == "shadowtrial.supervise"]
    assert len(deaths) == 5, deaths
    assert "CANARY" not in caplog.text
