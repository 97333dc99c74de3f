"""The admin API: trials, teams' posture, live view, health, and the OpenAPI document.

Errors always have the shape ``{"error": {"code", "message", "field"}}``; one
middleware maps :class:`sidecar.errors.ApiError` subclasses to their status.
"""

from __future__ import annotations

import logging
import re
from contextlib import aclosing
from typing import Any

from aiohttp import HttpVersion11, web

from sidecar.errors import ApiError, BadRequest
from sidecar.api.guard import store_guard
from sidecar.api.gate_routes import FLAGGER_PREFIX, GATE_ROUTES, REVOCATIONS
from sidecar.api.kit import (
    COMPARE, GATES, POSTURE, PROMOTION, TRIALS, WATCHES, Handler, _error, _json, errors_middleware, read_body,
)
from sidecar.api.principal import principal_of
from sidecar.api.readiness import readiness
from sidecar.runtime import RUNTIME
from sidecar.services.posture import IF_MATCH, PostureService, check_if_match, check_team, decode_posture
from sidecar.services.compare import CompareService, decode_compare
from sidecar.services.trials import TrialService
from sidecar.api.watch_routes import WATCH_ROUTES
from sidecar.services.gates import GateService
from sidecar.services.promotion import PromotionService
from sidecar.services.watches import WatchService
from sidecar.telemetry.names import METRICS
from sidecar.trials.create import (
    IDEMPOTENCY_KEY, MAX_NAME_CHARS, NAME_PATTERN, NAME_RULE, STATUSES, check_idempotency_key, decode_create,
)
from sidecar.ingest.wire import encode

log = logging.getLogger("shadowtrial.admin")


#: ``GET /v1/trials`` filters; any other query parameter is refused, to catch typos.
LIST_PARAMS = ("status", "team")


def list_filters(request: web.Request) -> tuple[str | None, str | None]:
    """``(status, team)`` from the query string; :class:`BadRequest` names a bad parameter."""
    query = request.query
    for name in query:
        if name not in LIST_PARAMS:
            raise BadRequest(f"unknown query parameter {name!r}; filters are {', '.join(LIST_PARAMS)}", field=name)
        if len(query.getall(name)) > 1:
            raise BadRequest(f"give {name} once", field=name)
    status = query.get("status")
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)}, got {status!r}", field="status")
    team = query.get("team")
    if team is not None and not (1 <= len(team) <= MAX_NAME_CHARS and re.search(NAME_PATTERN, team)):
        raise BadRequest(f"team must be {NAME_RULE}", field="team")
    return status, team


async def create_trial(request: web.Request) -> web.Response:
    key = check_idempotency_key(request.headers.getall(IDEMPOTENCY_KEY, []))
    body = decode_create(await read_body(request))
    # The key's fingerprint is the decoded body re-encoded (fields in schema order, defaults
    # filled in), so a retry that serialises the same request differently is still the same.
    view, created = await request.app[TRIALS].create(principal_of(request), body, encode(body), key)
    return _json(view, 201 if created else 200)


async def list_trials(request: web.Request) -> web.Response:
    status, team = list_filters(request)
    return _json({"trials": await request.app[TRIALS].list(principal_of(request), status=status, team=team)})


async def get_trial(request: web.Request) -> web.Response:
    return _json(await request.app[TRIALS].get(principal_of(request), request.match_info["trial_id"]))


async def stop_trial(request: web.Request) -> web.Response:
    return _json(await request.app[TRIALS].stop(principal_of(request), request.match_info["trial_id"]))


async def resume_trial(request: web.Request) -> web.Response:
    return _json(await request.app[TRIALS].resume(principal_of(request), request.match_info["trial_id"]))


def _posture_answer(view: dict[str, Any]) -> web.Response:
    response = _json(view)
    response.headers["ETag"] = f'"{view["revision"]}"'
    return response


async def get_posture(request: web.Request) -> web.Response:
    team = check_team(request.match_info["team"])
    if request.query:
        name = next(iter(request.query))
        raise BadRequest(f"unknown query parameter {name!r}; this route takes none", field=name)
    return _posture_answer(await request.app[POSTURE].get(principal_of(request), team))


async def put_posture(request: web.Request) -> web.Response:
    team = check_team(request.match_info["team"])
    expected = check_if_match(request.headers.getall(IF_MATCH, []))
    body = decode_posture(await read_body(request))
    return _posture_answer(await request.app[POSTURE].put(principal_of(request), team, body, expected))


async def compare(request: web.Request) -> web.StreamResponse:
    """``POST /v1/compare``: refusals as JSON errors; then server-sent events as answers arrive.
    No content of it is kept, only its spend (sidecar.services.compare); no route reads a past compare."""
    service = request.app[COMPARE]
    try:
        plan = service.plan(principal_of(request), decode_compare(await read_body(request)))
    except ApiError:
        service.refused()
        raise
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                           "Cache-Control": "no-store", "X-Accel-Buffering": "no"})
    await response.prepare(request)
    async with aclosing(service.events(plan)) as events:  # a client gone: its calls are cancelled at once
        async for event in events:
            await response.write(event)
    await response.write_eof()
    return response


async def live(request: web.Request) -> web.Response:
    return _json(await request.app[WATCHES].live(principal_of(request)))


async def healthz(_request: web.Request) -> web.Response:
    return _json({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    rt = request.app[RUNTIME]
    status, body = readiness(rt.supervisor, ready=rt.ready, reason=rt.unready_reason)
    return _json(body, status)


async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition: content-free counters and gauges (docs/telemetry.md). No
    series carries a team, route, gateway, trial or model label: what a scraper sees names
    none. Counters are this sidecar's, its engine's process included; spend is fleet-wide."""
    rt = request.app[RUNTIME]
    values = rt.readings(await request.app[TRIALS].fleet_spend())
    lines: list[str] = []

    def metric(name: str, kind: str, help_: str, value: float, labels: str = "") -> None:
        if not any(line.startswith(f"# TYPE {name} ") for line in lines):
            lines.append(f"# HELP {name} {help_}")
            lines.append(f"# TYPE {name} {kind}")
        lines.append(f"{name}{labels} {value}")

    for m in METRICS:
        for labels, key in m.series:
            text = ",".join(f'{k}="{v}"' for k, v in labels)
            metric(m.prometheus, m.kind, m.help, values.get(key, 0), f"{{{text}}}" if text else "")
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain", charset="utf-8",
                        headers={"X-Content-Type-Options": "nosniff"})


async def expect_handler(request: web.Request) -> web.StreamResponse | None:
    """``Expect: 100-continue`` is honoured as aiohttp does; any other expectation is 417 in
    the API's error shape (aiohttp's own answer is plain text, and runs before any middleware)."""
    expect = request.headers.get("Expect", "")
    if expect.lower() != "100-continue":
        return _error(417, "expectation_failed", f"Expect {expect!r} is not understood; only 100-continue is", "Expect")
    if request.version == HttpVersion11:
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the interim answer is not part of the response's size
    return None


async def no_route(request: web.Request) -> web.StreamResponse:
    """What no route takes: 405 with the allowed methods where the path exists, else 404, as
    aiohttp answers, but as a route of this app, so that ``expect_handler`` covers it too."""
    allowed: set[str] = set()
    for resource in request.app.router.resources():
        if resource is not request.match_info.route.resource:
            allowed |= (await resource.resolve(request))[1]
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()


async def console_root(_request: web.Request) -> web.Response:
    return web.Response(status=308, headers={"Location": "/console/"})


async def openapi(_request: web.Request) -> web.Response:
    from sidecar.api.openapi import openapi_document  # built on the first request, not at start-up

    return _json(openapi_document())


def admin_app(rt: Any) -> web.Application:
    # auto_decompress off: aiohttp would otherwise decode (or fail on) a Content-Encoding before
    # any handler runs, answering plain text; read_body refuses encodings in the JSON shape.
    from sidecar.api.authn import VERIFIER, authn_middleware, build_verifier
    from sidecar.auth.revocations import Revocations
    from sidecar.console import CONSOLE_PREFIX, Console, console_app

    verifier = build_verifier(rt.config.auth)  # first: no request reaches anything unauthenticated
    revocations = Revocations(rt.config.auth.revoked_subjects_file)
    app = web.Application(
        middlewares=[
            # The console authenticates its own prefix with the same verifier (a cookie or a header).
            authn_middleware(verifier, revocations, delegated=(CONSOLE_PREFIX, FLAGGER_PREFIX)),
            errors_middleware,
            store_guard(rt.config.admin.request_timeout_seconds,
                        streams=frozenset({"/v1/compare", f"{CONSOLE_PREFIX}/compare/stream"})),
        ],
        client_max_size=1 << 20,
        handler_args={"auto_decompress": False},
    )
    app[RUNTIME] = rt
    contexts = rt.contexts  # each service gets its family's context, not the runtime
    app[TRIALS] = TrialService(contexts.trials)
    app[POSTURE] = PostureService(contexts.posture)
    app[COMPARE] = CompareService(contexts.compare)
    app[WATCHES] = WatchService(contexts.watches)
    app[PROMOTION] = PromotionService(contexts.promotion)
    app[GATES] = GateService(app[TRIALS], app[WATCHES], app[PROMOTION])
    app[REVOCATIONS] = revocations  # the Flagger webhooks authenticate themselves (sidecar.api.gate_routes)
    if verifier is not None:
        app[VERIFIER] = verifier
    routes: list[tuple[str, str, Handler]] = [
        ("POST", "/v1/trials", create_trial),
        ("GET", "/v1/trials", list_trials),
        ("GET", "/v1/trials/{trial_id}", get_trial),
        ("POST", "/v1/trials/{trial_id}/stop", stop_trial),
        ("POST", "/v1/trials/{trial_id}/resume", resume_trial),
        ("GET", "/v1/teams/{team}/posture", get_posture),
        ("PUT", "/v1/teams/{team}/posture", put_posture),
        ("POST", "/v1/compare", compare),
        ("GET", "/v1/live", live),
        *WATCH_ROUTES,
        *GATE_ROUTES,
        ("GET", "/healthz", healthz),
        ("GET", "/readyz", readyz),
        ("GET", "/metrics", metrics),
        ("GET", "/openapi.json", openapi),
    ]
    for method, path, handler in routes:
        app.router.add_route(method, path, handler, expect_handler=expect_handler)
        if method == "GET":  # as add_get does
            app.router.add_route("HEAD", path, handler, expect_handler=expect_handler)
    # The operator console (sidecar/console/): HTML over the same services, before the catch-all.
    app.router.add_get(CONSOLE_PREFIX, console_root)
    config = rt.config
    console = Console(
        app[TRIALS], app[POSTURE], app[WATCHES], app[PROMOTION], app[COMPARE], store=rt.store,
        teams=tuple(config.teams), models=tuple(sorted(config.models)), price_book=rt.price_book,
        judge_model=config.judge.model, control_plane_console=config.uplink.console_url,
    )
    app.add_subapp(CONSOLE_PREFIX, console_app(console, verifier, revocations))
    app.router.add_route("*", "/{tail:.*}", no_route, expect_handler=expect_handler)  # last: the rest
    return app
