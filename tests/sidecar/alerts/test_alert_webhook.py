"""The alert webhook against a real aiohttp receiver on loopback.

The receiver is the example of docs/alerts.md: it verifies the HMAC signature over the
timestamp and the body, refuses a timestamp outside its tolerance (a replayed request),
and here also fails its first request with 503, so the sender's retry is seen.
"""

from __future__ import annotations

import json
import time
import random
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from sidecar.alerts.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, verify
from sidecar.alerts.webhook import AlertWebhook
from sidecar.config import AlertsConfig
from sidecar.store import make_store
from sidecar.store.base import Store
from sidecar.store.watch_records import WatchStep
from tests.store.factories import finish, start, trial
from tests.harness import wait_for
from tests.store.test_watch_conformance import PROMOTABLE, watch_rows

SECRET = "s3cret-for-tests"


class Receiver:
    """docs/alerts.md's receiver, with a scripted first failure and a settable clock."""

    def __init__(self, *, fail_first: int = 1) -> None:
        self.fail_first = fail_first
        self.now = 0.0
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.accepted: list[dict[str, Any]] = []
        self.refused = 0
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.requests.append((dict(request.headers), body))
        stamp = request.headers.get(TIMESTAMP_HEADER, "")
        sent = request.headers.get(SIGNATURE_HEADER, "")
        if not verify(SECRET.encode(), stamp, body, sent, now=self.now):
            self.refused += 1
            return web.json_response({"error": "bad signature or stale timestamp"}, status=401)
        if len(self.requests) <= self.fail_first:
            return web.json_response({"error": "try later"}, status=503)
        self.accepted.append(json.loads(body))
        return web.json_response({"ok": True})

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/hook", self.handle)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}/hook"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def fired_watch(store: Store) -> None:
    await store.create_trial(trial("t1"))
    p, w, d = watch_rows()
    assert (await store.promote(p, w, d, promotable=PROMOTABLE)).created
    for i in range(16):
        assert await store.claim_case(start(f"c{i}", d.id)) == "claimed"
        step = WatchStep("wa1", f"c{i}", "old_wins", at=1_000.0 + i)
        assert await store.finish_case(finish(f"c{i}", d.id, effects=(step,)), "A")


async def test_each_transition_is_delivered_signed_and_retried_after_a_failure(tmp_path: Path) -> None:
    store = make_store(str(tmp_path / "s.db"))
    await store.open()
    clock = [10_000.0]
    try:
        await fired_watch(store)
        async with Receiver(fail_first=1) as receiver:
            receiver.now = clock[0]
            config = AlertsConfig(webhook_url=receiver.url, secret_env="HOOK_SECRET", backoff_base_seconds=0.01,
                                  backoff_cap_seconds=0.02, max_attempts=3, poll_seconds=0.02)
            hook = AlertWebhook(store, config, SECRET, clock=lambda: clock[0], rng=random.Random(1))
            await hook.start()  # its own task polls the store's pending transitions

            async def accepted(n: int) -> bool:
                return len(receiver.accepted) >= n and not await store.pending_transitions(limit=10)

            try:
                await wait_for(lambda: accepted(1), what="the firing transition")  # 503 first, then 200
                await store.transition_alert("wa1.alert", "acknowledged", allowed_from=("firing",), actor="bob",
                                             now=clock[0])
                await store.transition_alert("wa1.alert", "resolved", allowed_from=("firing", "acknowledged"),
                                             actor="bob", now=clock[0])
                await wait_for(lambda: accepted(3), what="the acknowledged and resolved transitions")
            finally:
                await hook.stop()
            states = [a["state"] for a in receiver.accepted]
            print(f"\nwebhook: {len(receiver.requests)} POSTs for 3 transitions (first refused 503, retried); "
                  f"accepted {states}; counts {hook.counts}")
            assert states == ["firing", "acknowledged", "resolved"]
            assert len(receiver.requests) == 4 and receiver.refused == 0
            assert hook.counts == {"delivered": 3, "retried": 1, "gave_up": 0}
            first = receiver.accepted[0]
            assert first["id"] == "wa1.alert:firing" and first["evidence"]["judged"] >= 5
            assert await store.pending_transitions(limit=10) == []

            # A replayed request (its timestamp now 10 minutes old) is refused by the receiver.
            headers, body = receiver.requests[-1]
            receiver.now = clock[0] + 600
            async with httpx.AsyncClient() as client:
                r = await client.post(receiver.url, content=body, headers={
                    TIMESTAMP_HEADER: headers[TIMESTAMP_HEADER], SIGNATURE_HEADER: headers[SIGNATURE_HEADER]})
                assert r.status_code == 401
                forged = await client.post(receiver.url, content=body.replace(b"resolved", b"firing"), headers={
                    TIMESTAMP_HEADER: str(int(receiver.now)), SIGNATURE_HEADER: headers[SIGNATURE_HEADER]})
                assert forged.status_code == 401
    finally:
        await store.close()


async def test_a_refusal_ends_delivery_and_attempts_are_bounded(tmp_path: Path) -> None:
    store = make_store(str(tmp_path / "s.db"))
    await store.open()
    try:
        await fired_watch(store)
        async with Receiver(fail_first=100) as receiver:
            receiver.now = 10_000.0
            config = AlertsConfig(webhook_url=receiver.url, secret_env="HOOK_SECRET", backoff_base_seconds=0.01,
                                  backoff_cap_seconds=0.01, max_attempts=3)
            hook = AlertWebhook(store, config, SECRET, clock=lambda: 10_000.0)
            await hook.start(poll=False)  # driven by hand
            try:
                assert await hook.deliver_pending() == 0
            finally:
                await hook.stop()
            assert len(receiver.requests) == 3 and hook.counts["gave_up"] == 1
            assert await store.pending_transitions(limit=10) == []
    finally:
        await store.close()


async def test_a_running_sidecar_posts_the_firing_transition_of_a_watch(tmp_path: Path) -> None:
    from tests.harness import Harness
    from tests.sidecar.services.test_watches import adoptable_trial, judged, models, served, watch_view

    async with Receiver(fail_first=1) as receiver:
        receiver.now = time.time()
        extra = (f'[alerts]\nwebhook_url = "{receiver.url}"\nsecret_env = "HOOK_SECRET"\n'
                 "backoff_base_seconds = 0.01\nbackoff_cap_seconds = 0.02\npoll_seconds = 0.05\n")
        async with Harness(tmp_path, models=models(), never_called=(), extra=extra,
                           environ={"HOOK_SECRET": SECRET}) as h:
            assert h.admin
            trial_id = await adoptable_trial(h)
            r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 5.0, "sample_rate": 1.0})
            watch_id = r.json()["watch"]["id"]
            await h.send([served(i, 0.4, "drop") for i in range(80)])

            async def fired() -> bool:
                return bool((await watch_view(h, watch_id))["detector"]["fired"])

            await wait_for(fired, timeout=60, what="the alert")
            await wait_for(lambda: _has(receiver, 1), timeout=30, what="the webhook's firing POST")
            # Every drop case judged first: the resolve re-arms the watch, and a drop case judged
            # after it would count in the new period (a second alert, issue 23 item 5).
            await judged(h, watch_id, 80)
            await h.admin.post(f"/v1/alerts/{watch_id}.alert/resolve")
            await wait_for(lambda: _has(receiver, 2), timeout=30, what="the webhook's resolved POST")
        assert [a["state"] for a in receiver.accepted] == ["firing", "resolved"]
        assert receiver.accepted[0]["watch_id"] == watch_id and receiver.refused == 0


async def _has(receiver: Receiver, n: int) -> bool:
    return len(receiver.accepted) >= n


def test_a_webhook_without_a_secret_is_refused_at_start() -> None:
    import pytest

    from sidecar.config import load_config
    from sidecar.errors import ConfigError

    with pytest.raises(ValueError, match="secret_env is required"):
        AlertsConfig(webhook_url="https://example.com/hook")
    with pytest.raises(ConfigError, match="alerts.secret_env names HOOK_SECRET, which is not set"):
        load_config(None, {"SHADOWTRIAL_ALERTS__WEBHOOK_URL": "https://example.com/hook",
                           "SHADOWTRIAL_ALERTS__SECRET_ENV": "HOOK_SECRET"})
