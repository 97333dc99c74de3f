"""The admin API: trials, live view, health, and the OpenAPI document.

Errors always have the shape ``{"error": {"code", "message", "field"}}``; one
middleware maps :class:`sidecar.errors.ApiError` subclasses to their status.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from sidecar.errors import ApiError, BadRequest
from sidecar.api.openapi import openapi_document
from sidecar.runtime import RUNTIME
from sidecar.store.errors import IdempotencyConflict
from sidecar.trials import decode_create
from sidecar.api.views import evaluation, spend_view, summary, trial_view, verdict_view
from sidecar.ingest.wire import encode

log = logging.getLogger("shadowtrial.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=encode(data), content_type="application/json")


def _error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    return _json({"error": {"code": code, "message": message, "field": field}}, status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message, exc.field)
    except IdempotencyConflict as exc:
        return _error(409, "request_key_conflict", str(exc), None)
    except web.HTTPRequestEntityTooLarge:
        return _error(413, "body_too_large", "request body too large")
    except web.HTTPException as exc:
        if exc.status >= 400:
            return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
        raise


async def create_trial(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    raw = await request.read()
    body = decode_create(raw)
    key = request.headers.get("Idempotency-Key")
    if key is not None and not (1 <= len(key) <= 255):
        raise BadRequest("Idempotency-Key must be 1 to 255 characters", field="Idempotency-Key")
    # The key's fingerprint is the decoded body re-encoded (fields in schema order, defaults
    # filled in), so a retry that serialises the same request differently is still the same.
    record, created = await rt.create_trial(body, encode(body), key)
    view = await trial_view(rt, record.id)
    return _json(view, 201 if created else 200)


async def list_trials(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    status = request.query.get("status")
    team = request.query.get("team")
    records = await rt.store.list_trials(teams=[team] if team else None, status=status)
    items = []
    for r in records:
        item = summary(r)
        ev = await evaluation(rt, r)
        item["verdict"] = {"code": ev.verdict, "wording": verdict_view(r, ev)["wording"], "cases": ev.n}
        item["spend"] = spend_view(r)
        items.append(item)
    return _json({"trials": items})


async def get_trial(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    return _json(await trial_view(rt, request.match_info["trial_id"]))


async def stop_trial(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    record = await rt.stop_trial(request.match_info["trial_id"])
    return _json(await trial_view(rt, record.id))


async def live(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    running = []
    for record in await rt.store.list_trials(status="running"):
        ev = await evaluation(rt, record)
        item = summary(record)
        item["verdict"] = verdict_view(record, ev)
        item["spend"] = spend_view(record)
        running.append(item)
    totals = await rt.store.total_spend()
    return _json(
        {
            "alerts": [],
            "running_trials": running,
            "watches": [],
            "evaluation_spend": {
                "known_micros": totals["known"],
                "charged_micros": totals["spent"],
                "reserved_micros": totals["reserved"],
                "unknown_calls": totals["unknown_calls"],
                "note": "evaluation spend is reported beside the gateway's metered spend, never summed into it",
            },
            "intake": {"depth": rt.handoff.depth, "capacity": rt.handoff.maxsize, "in_flight": rt.engine.in_flight},
            "counters": dict(rt.counters),
        }
    )


async def healthz(_request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    if not rt.ready:
        return _error(503, "not_ready", rt.unready_reason)
    return _json({"status": "ready"})


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition: content-free counters and gauges."""
    rt = request.app[RUNTIME]
    totals = await rt.store.total_spend()
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, value: float, labels: str = "") -> None:
        if not any(line.startswith(f"# TYPE {name} ") for line in lines):
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{labels} {value}")

    c = rt.counters
    metric("shadowtrial_exchanges_received_total", "counter", "Exchanges decoded by the tap.", c["exchanges_received"])
    metric("shadowtrial_cases_sampled_total", "counter", "Cases offered to the intake queue.", c["cases_sampled"])
    metric("shadowtrial_cases_shed_total", "counter", "Cases shed by reason.", c["cases_shed"], '{reason="queue_full"}')
    for reason in ("malformed", "too_large", "unauthorized", "read_timeout", "unsupported_encoding"):
        metric("shadowtrial_tap_rejected_total", "counter", "Tap requests refused by reason.",
               c[f"tap_rejected_{reason}"], f'{{reason="{reason}"}}')
    for field in ("cost_usd", "latency_ms", "input_tokens", "output_tokens"):
        metric("shadowtrial_tap_figures_excluded_total", "counter",
               "Gateway figures out of range, accepted as not reported, by field.",
               c[f"tap_figures_excluded_{field}"], f'{{field="{field}"}}')
    metric("shadowtrial_intake_queue_depth", "gauge", "Cases waiting in the intake queue.", rt.handoff.depth)
    metric("shadowtrial_cases_in_flight", "gauge", "Cases being dispatched or judged.", rt.engine.in_flight)
    metric("shadowtrial_running_trials", "gauge", "Trials running.", len(rt.routing.current))
    metric("shadowtrial_evaluation_spend_known_micros", "gauge", "Known evaluation spend at list price, micro-dollars.",
           totals["known"])
    metric("shadowtrial_evaluation_spend_reserved_micros", "gauge", "Open reservations, micro-dollars.", totals["reserved"])
    metric("shadowtrial_evaluation_unpriced_calls", "gauge", "Calls whose cost is unknown (held at worst case).",
           totals["unknown_calls"])
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


async def openapi(_request: web.Request) -> web.Response:
    return _json(openapi_document())


def admin_app(rt: Any) -> web.Application:
    app = web.Application(middlewares=[errors_middleware], client_max_size=1 << 20)
    app[RUNTIME] = rt
    app.router.add_post("/v1/trials", create_trial)
    app.router.add_get("/v1/trials", list_trials)
    app.router.add_get("/v1/trials/{trial_id}", get_trial)
    app.router.add_post("/v1/trials/{trial_id}/stop", stop_trial)
    app.router.add_get("/v1/live", live)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/openapi.json", openapi)
    return app
