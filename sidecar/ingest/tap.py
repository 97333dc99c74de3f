"""The tap: where the gateway hands over copies of served exchanges.

``POST /v1/exchanges`` answers ``202 {"accepted", "sampled", "shed"}`` as soon as
the batch is decoded and offered to the intake queue; it never waits for a
dispatch or for the store. Malformed input is ``400`` with the path of the
first bad field; a body over the limit is ``413``; unknown fields are ignored.
"""

from __future__ import annotations

import hmac
from collections import Counter

from aiohttp import web

from policies.sampling import is_sampled
from sidecar.engine.case import Job
from sidecar.runtime import RUNTIME, Runtime
from sidecar.ingest.wire import DecodeError, TapReply, decode_exchanges, encode


def _error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body = {"error": {"code": code, "message": message, "field": field}}
    return web.Response(status=status, body=encode(body), content_type="application/json")


def ingest(rt: Runtime, body: bytes, content_type: str) -> TapReply:
    """Decode, match, sample and enqueue one batch. Never awaits. Raises DecodeError."""
    exchanges = decode_exchanges(body, content_type)
    sampled = shed = 0
    counts: Counter[tuple[str, str]] = Counter()
    for ex in exchanges:
        for trial in rt.registry.match(ex):
            if ex.redacted:
                counts[(trial.id, "skipped_redacted")] += 1
            elif not is_sampled(trial.id, ex.exchange_id, trial.record.sample_rate):
                counts[(trial.id, "not_sampled")] += 1
            elif rt.intake.offer(Job(trial, ex)):
                sampled += 1
            else:
                shed += 1
                counts[(trial.id, "shed_queue_full")] += 1
    if counts:
        rt.funnel.add_many(counts)
    rt.counters["exchanges_received"] += len(exchanges)
    rt.counters["cases_sampled"] += sampled
    rt.counters["cases_shed"] += shed
    return TapReply(accepted=len(exchanges), sampled=sampled, shed=shed)


async def post_exchanges(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    token = rt.tap_token
    if token is not None:
        given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return _error(401, "unauthorized", "tap token missing or wrong")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        rt.counters["tap_rejected_too_large"] += 1
        return _error(413, "body_too_large", f"body exceeds {rt.config.tap.max_body_bytes} bytes")
    try:
        reply = ingest(rt, body, request.content_type)
    except DecodeError as exc:
        rt.counters["tap_rejected_malformed"] += 1
        return _error(400, "invalid_exchange", str(exc), exc.path)
    return web.Response(status=202, body=encode(reply), content_type="application/json")


async def tap_healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def tap_app(rt: Runtime) -> web.Application:
    app = web.Application(client_max_size=rt.config.tap.max_body_bytes)
    app[RUNTIME] = rt
    app.router.add_post("/v1/exchanges", post_exchanges)
    app.router.add_get("/healthz", tap_healthz)
    return app
