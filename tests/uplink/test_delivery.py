"""The delivery loop against scripted collectors on loopback: Retry-After, partial acks, gzip, tokens."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any

import jwt
from aiohttp import web

from tests.harness import wait_for
from tests.uplink.kit import AUDIENCE, UplinkKit
from uplink.delivery import Delivery, DeliverySettings
from uplink.outbox import MemoryOutbox
from uplink.schema import decode_batch


class Scripted:
    """A collector that answers from a script, one answer per request, then acks everything."""

    def __init__(self, script: list[Any]) -> None:
        self.script = script
        self.requests: list[tuple[float, dict[str, str], list[str]]] = []
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = gzip.decompress(await request.read())
        _, records = decode_batch(body)
        ids = [r.id for r in records]
        self.requests.append((time.monotonic(), dict(request.headers), ids))
        step = self.script.pop(0) if self.script else "ack"
        if step == "ack":
            return web.json_response({"acked": ids})
        if callable(step):
            return step(ids)
        status, headers = step
        return web.json_response({"error": {"code": "busy", "message": "busy", "field": None}},
                                 status=status, headers=headers)

    async def __aenter__(self) -> Scripted:
        app = web.Application()
        app.router.add_post("/v1/uplink/batches", self.handle)
        self.runner = web.AppRunner(app, access_log=None, auto_decompress=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def _delivery(kit: UplinkKit, url: str, outbox: MemoryOutbox, **over: Any) -> Delivery:
    kw: dict[str, Any] = {"url": url, "sidecar_id": "s1", "owner": "s1", "batch_size": 10,
                          "backoff_base_s": 0.01, "backoff_cap_s": 0.05, "idle_poll_s": 0.02}
    kw.update(over)
    return Delivery(outbox, DeliverySettings(**kw), kit.signer())


def _filled(n: int) -> MemoryOutbox:
    box = MemoryOutbox()
    for i in range(n):
        box.add(f"case:c{i}", b'{"kind":"case_result","id":"case:c%d","trial_id":"t","case_id":"c%d","exchange_id":"x",'
                b'"team":"a","outcome":"judged","finished_at":1.0}' % (i, i))
    return box


async def test_retry_after_is_honoured_and_nothing_is_lost(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)
    box = _filled(5)
    async with Scripted([(503, {"Retry-After": "1"}), (429, {}), "ack"]) as stub:
        d = _delivery(kit, stub.url, box)
        await d.start()

        async def empty() -> bool:
            return not box.records

        await wait_for(empty, what="the outbox emptied")
        await d.stop()
    (t0, _, first), (t1, _, second), (_, _, third) = stub.requests[:3]
    assert first == second == third, "the same records are sent again until acknowledged"
    assert t1 - t0 >= 1.0, f"Retry-After: 1 honoured (next try after {t1 - t0:.2f} s)"
    assert dict(d.stats.failures) == {"http_503": 1, "http_429": 1}


async def test_only_acknowledged_and_refused_ids_are_deleted(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)
    box = _filled(6)
    seen_at_second: list[str] = []

    def half(ids: list[str]) -> web.Response:
        # Ack the even ones, refuse c1, say nothing of c3 and c5, and name an id never sent.
        return web.json_response({"acked": [i for i in ids if int(i[-1]) % 2 == 0] + ["case:elsewhere"],
                                  "refused": {"case:c1": "content_not_permitted"}})

    def snapshot(ids: list[str]) -> web.Response:
        seen_at_second.extend(ids)
        return web.json_response({"acked": ids})

    async with Scripted([half, snapshot]) as stub:
        d = _delivery(kit, stub.url, box)
        await d.start()

        async def empty() -> bool:
            return not box.records

        await wait_for(empty, what="the outbox emptied")
        await d.stop()
    assert seen_at_second == ["case:c3", "case:c5"], "what the collector did not name was sent again"


async def test_each_request_is_gzip_with_a_short_lived_eddsa_token(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)
    box = _filled(3)
    async with Scripted([]) as stub:
        d = _delivery(kit, stub.url, box)
        await d.start()

        async def empty() -> bool:
            return not box.records

        await wait_for(empty, what="the outbox emptied")
        await d.stop()
    _, headers, ids = stub.requests[0]
    assert headers["Content-Encoding"] == "gzip" and ids == ["case:c0", "case:c1", "case:c2"]
    token = headers["Authorization"].removeprefix("Bearer ")
    assert jwt.get_unverified_header(token) == {"alg": "EdDSA", "kid": "sidecar-key-1", "typ": "JWT"}
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["aud"] == AUDIENCE and 0 < claims["exp"] - claims["iat"] <= 60
