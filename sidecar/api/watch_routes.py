"""Admin routes of promotion, watches, alerts and results (the services do the work).

A watch is born only by promotion: ``POST /v1/watches`` answers ``405`` in the API's error
shape, saying so.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from aiohttp import web

from sidecar.api.kit import PROMOTION, WATCHES, read_body
from sidecar.api.principal import principal_of
from sidecar.errors import BadRequest
from sidecar.ingest.wire import encode
from sidecar.services.watches import RESULT_PARAMS
from sidecar.trials.create import IDEMPOTENCY_KEY, STATUSES, check_idempotency_key

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

WATCH_STATUSES = ("active", "stopped")
ALERT_STATUSES = ("firing", "acknowledged", "resolved")


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=encode(data), content_type="application/json")


def _services(request: web.Request) -> Any:
    return request.app[WATCHES], request.app[PROMOTION]


def _only(request: web.Request, allowed: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for name in request.query:
        if name not in allowed:
            raise BadRequest(f"unknown query parameter {name!r}; filters are {', '.join(allowed) or 'none'}", field=name)
        if len(request.query.getall(name)) > 1:
            raise BadRequest(f"give {name} once", field=name)
        out[name] = request.query[name]
    return out


def _status(query: dict[str, str], allowed: tuple[str, ...]) -> str | None:
    status = query.get("status")
    if status is not None and status not in allowed:
        raise BadRequest(f"status must be one of {', '.join(allowed)}, got {status!r}", field="status")
    return status


async def promote(request: web.Request) -> web.Response:
    from sidecar.services.promotion import decode_promote

    key = check_idempotency_key(request.headers.getall(IDEMPOTENCY_KEY, []))
    body = decode_promote(await read_body(request))
    watches, promotion = _services(request)
    principal = principal_of(request)
    # The key's fingerprint is the decoded body re-encoded, as for trial creation.
    watch, created = await promotion.promote(principal, request.match_info["trial_id"], body, encode(body), key)
    return _json({"watch": await watches.view(watch), "trial_id": watch.trial_id}, 201 if created else 200)


async def no_create_watch(_request: web.Request) -> web.Response:
    response = _json({"error": {
        "code": "method_not_allowed",
        "message": "watches are created only by promoting a trial: POST /v1/trials/{trial_id}/promote",
        "field": None,
    }}, 405)
    response.headers["Allow"] = "GET, HEAD"
    return response


async def list_watches(request: web.Request) -> web.Response:
    status = _status(_only(request, ("status",)), WATCH_STATUSES)
    watches, _ = _services(request)
    return _json({"watches": await watches.list(principal_of(request), status=status)})


async def get_watch(request: web.Request) -> web.Response:
    watches, _ = _services(request)
    return _json(await watches.get(principal_of(request), request.match_info["watch_id"]))


async def stop_watch(request: web.Request) -> web.Response:
    watches, _ = _services(request)
    return _json(await watches.stop(principal_of(request), request.match_info["watch_id"]))


async def list_alerts(request: web.Request) -> web.Response:
    status = _status(_only(request, ("status",)), ALERT_STATUSES)
    watches, _ = _services(request)
    return _json({"alerts": await watches.alerts(principal_of(request), status=status)})


async def ack_alert(request: web.Request) -> web.Response:
    watches, _ = _services(request)
    return _json(await watches.move_alert(principal_of(request), request.match_info["alert_id"], "acknowledged"))


async def resolve_alert(request: web.Request) -> web.Response:
    watches, _ = _services(request)
    return _json(await watches.move_alert(principal_of(request), request.match_info["alert_id"], "resolved"))


async def results(request: web.Request) -> web.Response:
    query = _only(request, RESULT_PARAMS)
    _status(query, STATUSES)
    watches, _ = _services(request)
    return _json(await watches.results(principal_of(request), query))


WATCH_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("POST", "/v1/trials/{trial_id}/promote", promote),
    ("GET", "/v1/watches", list_watches),
    ("POST", "/v1/watches", no_create_watch),
    ("GET", "/v1/watches/{watch_id}", get_watch),
    ("POST", "/v1/watches/{watch_id}/stop", stop_watch),
    ("GET", "/v1/alerts", list_alerts),
    ("POST", "/v1/alerts/{alert_id}/ack", ack_alert),
    ("POST", "/v1/alerts/{alert_id}/resolve", resolve_alert),
    ("GET", "/v1/results", results),
)
