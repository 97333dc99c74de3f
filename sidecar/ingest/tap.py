"""The tap: where the gateway hands over copies of served exchanges.

``POST /v1/exchanges`` answers ``202 {"accepted", "sampled", "shed"}`` as soon as
the batch is decoded and its sampled claims are offered to the engine's
hand-off; it never waits for a dispatch, the store or the engine's loop. Malformed input is ``400`` with the path of the
first bad field; a body over the limit is ``413``; unknown fields are ignored.
"""

from __future__ import annotations

import hmac
import logging
from collections import Counter

from aiohttp import web

from policies.sampling import is_sampled
from sidecar.engine.engine import Claim
from sidecar.ingest.journal import Journal
from sidecar.runtime import RUNTIME, Runtime
from sidecar.ingest.wire import DecodeError, TapReply, decode_exchanges, encode

log = logging.getLogger("shadowtrial.tap")


def _error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    body = {"error": {"code": code, "message": message, "field": field}}
    return web.Response(status=status, body=encode(body), content_type="application/json")


def ingest(rt: Runtime, body: bytes, content_type: str) -> TapReply:
    """Decode, match, sample and hand claims to their sinks. Never awaits. Raises DecodeError.

    A claim goes to the sink of its trial's pinned execution site; a full sink
    refuses the newest claims, which are counted ``shed_queue_full`` (``shed_stopped``
    once the sink closed: stopping, or its engine's process died)."""
    exchanges = decode_exchanges(body, content_type)
    routes = rt.routing.current  # one consistent table for the whole batch
    counts: Counter[tuple[str, str]] = Counter()
    claims: dict[str, list[Claim]] = {}
    content_free: set[str] = set()
    for ex in exchanges:
        for route in routes.match(ex):
            if not route.prompt_retention:
                content_free.add(route.trial_id)
            if ex.redacted:
                counts[(route.trial_id, "skipped_redacted")] += 1
            elif not is_sampled(route.trial_id, ex.exchange_id, route.sample_rate):
                counts[(route.trial_id, "not_sampled")] += 1
            else:
                claims.setdefault(route.execution_site, []).append(Claim(route.trial_id, ex))
    sampled = shed = 0
    journal = rt.journal
    for site, batch in claims.items():
        sink = rt.sinks.get(site)
        if sink is None:
            taken = 0
        elif journal is None:
            taken = sink.offer_many(batch)
        else:
            batch = journal.number(batch)
            taken = sink.offer_many(batch)
            _write(rt, journal, batch[:taken], content_free)
        sampled += taken
        refused = "not_at_site" if sink is None else "shed_stopped" if sink.closed else "shed_queue_full"
        for claim in batch[taken:]:
            shed += 1
            counts[(claim.trial_id, refused)] += 1
    if counts:
        rt.funnel.add_many(counts)
    rt.counters["exchanges_received"] += len(exchanges)
    rt.counters["cases_sampled"] += sampled
    rt.counters["cases_shed"] += shed
    return TapReply(accepted=len(exchanges), sampled=sampled, shed=shed)


def _write(rt: Runtime, journal: Journal, claims: list[Claim], content_free: set[str]) -> None:
    """Journal the claims the sink took, before the tap answers (a crash cannot lose them)."""
    try:
        journal.write(claims, content_free)
    except OSError as exc:  # disk full, say: the claims still run; only crash-safety is lost
        rt.counters["journal_write_errors"] += 1
        if rt.counters["journal_write_errors"] == 1 or rt.counters["journal_write_errors"] % 1000 == 0:
            log.error("intake journal write failed (%s): sampled cases are not crash-safe", exc.strerror)


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
