"""The retention window's age bound holds without traffic (issue 21, item 12): an expired
exchange is never replayed, and a quiet sidecar evicts it on time. The sidecar's clock is
injected and moved forward; nothing waits for real seconds to pass."""

from __future__ import annotations

import base64
import os
import time
from pathlib import Path
from typing import Any

import msgspec

from sidecar.config import RetentionConfig
from sidecar.engine.engine import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.wire import Exchange
from sidecar.retention.replay import ReplayFeeder
from sidecar.seal import Sealer
from sidecar.retention.window import RetentionWindow
from sidecar.store import make_store
from sidecar.store.records import RetainedSelection
from sidecar.telemetry.counters import TapCounters
from tests.harness import CANDIDATE, INCUMBENT, Harness, exchange, wait_for
from tests.store.factories import trial
from tests.sidecar.services.test_replay import KEY_ENV, WINDOW

ALL = RetainedSelection(team="team-a", served_from=0.0, served_to=1e12)


class Clock:
    """Real time plus a shift the test moves forward."""

    def __init__(self) -> None:
        self.shift = 0.0

    def __call__(self) -> float:
        return time.time() + self.shift


def keyed(window_seconds: float) -> dict[str, Any]:
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    return {"environ": {KEY_ENV: key},
            "extra": f'[retention]\nkey_env = "{KEY_ENV}"\nwindow_seconds = {window_seconds}\n'}


def replay_body() -> dict[str, Any]:
    return {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE, "spend_cap_usd": 10.0,
            "source": WINDOW}


async def test_an_expired_window_replays_nothing(tmp_path: Path) -> None:
    # A 600 s window sweeps once a minute: the test ends long before, so what hides the
    # expired exchanges here is the replay's own age bound, not an eviction.
    clock = Clock()
    async with Harness(tmp_path, clock=clock, **keyed(600)) as h:
        assert h.admin is not None
        await h.send([exchange(i) for i in range(30)])
        await h.runtime.retention.idle()
        clock.shift = 601.0  # ten minutes and a second later, no traffic meanwhile
        held = await h.runtime.store.retention_totals()
        r = await h.admin.post("/v1/trials", json=replay_body())
        candidate_calls = h.fake.calls[CANDIDATE]
    print(f"\nexpired window: {held['count']} rows still stored, replay answered {r.status_code} "
          f"{r.json().get('error', {}).get('code')}, candidate calls {candidate_calls}")
    assert held["count"] == 30, "the sweep ran: this test no longer shows the replay's own bound"
    assert r.status_code == 409 and r.json()["error"]["code"] == "replay_window_empty", r.text
    assert candidate_calls == 0


async def test_a_quiet_sidecar_evicts_expired_exchanges_on_time(tmp_path: Path) -> None:
    clock = Clock()
    async with Harness(tmp_path, clock=clock, **keyed(3)) as h:
        await h.send([exchange(i) for i in range(30)])
        await h.runtime.retention.idle()
        assert (await h.runtime.store.retention_totals())["count"] == 30
        clock.shift = 5.0  # 5 s later, no traffic

        async def evicted() -> bool:
            return bool((await h.runtime.store.retention_totals())["count"] == 0)

        started = time.monotonic()
        await wait_for(evicted, timeout=10.0, what="the quiet window to evict its expired exchanges")
        took = time.monotonic() - started
        counters = dict(h.runtime.counters)
        assert h.admin is not None  # the case: a replay asked for after the quiet 5 s
        r = await h.admin.post("/v1/trials", json=replay_body())
    assert r.status_code == 409 and r.json()["error"]["code"] == "replay_window_empty", r.text
    assert h.fake.calls[CANDIDATE] == 0
    from sidecar.retention.window import sweep_interval

    print(f"\nwindow_seconds=3, 30 kept, clock +5 s: evicted by age {counters['retention_evicted_age']} "
          f"within {took:.2f} s of real time (sweep interval {sweep_interval(3):.2f} s)")
    assert counters["retention_evicted_age"] == 30


async def test_a_replay_feeds_only_what_has_not_expired_when_each_page_is_read(tmp_path: Path) -> None:
    """The feeder's own bound: rows still stored but past the window are skipped."""
    store = make_store(str(tmp_path / "s.db"))
    await store.open()
    try:
        sealer = Sealer(os.urandom(32))
        now = 10_000.0
        window = RetentionWindow(RetentionConfig(key_env="K", window_seconds=100.0), sealer, store, TapCounters(),
                                 default_retention=lambda team: True, clock=lambda: now)
        old = [(msgspec.convert(exchange(i), Exchange), now - 500.0) for i in range(20)]
        new = [(msgspec.convert(exchange(100 + i), Exchange), now - 10.0) for i in range(5)]
        await store.retain(window._seal(old + new), keep_after=0.0, max_count=1000, max_bytes=1 << 30)
        record = await store.create_trial(trial("r1", source="replay", source_from=0.0, source_to=1e12,
                                                source_size=25, sample_rate=1.0, incumbent_model=INCUMBENT))
        handoff: Handoff[Claim] = Handoff(100)

        class NoPending:
            def pending(self, trial_id: str) -> dict[str, int]:
                return {}

        feeder = ReplayFeeder(store, handoff, sealer, NoPending(), clock=lambda: now, window_seconds=100.0)
        feeder.feed(record)

        async def fed() -> bool:
            got = await store.get_trial("r1")
            return got is not None and got.replay_fed == 5 and handoff.depth == 5

        await wait_for(fed, timeout=10.0, what="the fresh exchanges fed")
        await feeder.stop()
        fed_ids = sorted(c.exchange.exchange_id for c in handoff.drain_remaining())
        assert await store.count_retained(ALL) == 25  # nothing evicted: the feeder's bound did it
    finally:
        await store.close()
    assert fed_ids == sorted(f"ex-{100 + i}" for i in range(5))
