"""The console's Promote action, Watches (list, detail, stop) and alert moves (acknowledge, resolve).

Each handler calls :class:`~sidecar.services.promotion.PromotionService` or
:class:`~sidecar.services.watches.WatchService` with the request's principal, exactly as
``POST /v1/trials/{id}/promote``, ``GET /v1/watches``, ``POST /v1/alerts/{id}/ack`` do.
There is no "new watch" page or route: a watch is born only by promotion.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sidecar.console.app import CONSOLE_PREFIX, form, principal, redirect, render, state
from sidecar.console.chart import detector_gauge, detector_history
from sidecar.console.confirm import ask, confirmed
from sidecar.console.pages import can_write, trial_page
from sidecar.errors import BadRequest, Forbidden, PromotionRefused
from sidecar.ingest.wire import encode
from sidecar.services.promotion import decode_promote
from sidecar.services.watch_periods import watch_periods
from sidecar.store.errors import IdempotencyConflict

#: The promote form's fields: (name, kind). A blank field is left out: the API's default applies.
PROMOTE_FIELDS = (("daily_cap_usd", float), ("sample_rate", float), ("min_judged", int), ("note", str))


def promote_body(fields: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for name, kind in PROMOTE_FIELDS:
        text = fields.get(name, "").strip()
        if not text:
            continue
        try:
            body[name] = kind(text)
        except ValueError:
            body[name] = text  # the API's decoder refuses it, naming the field
    acks = [v for k, v in sorted(fields.items()) if k.startswith("acknowledge_segment_") and v]
    if acks:  # the rejected segments ticked (issue 27)
        body["acknowledge_segments"] = acks
    return body


async def promote(request: web.Request) -> web.Response:
    trial_id = request.match_info["trial_id"]
    fields = form(request)
    try:
        body = decode_promote(encode(promote_body(fields)))
        watch, _created = await state(request).promotion.promote(
            principal(request), trial_id, body, encode(body), fields.get("request_key") or None)
    except BadRequest as exc:  # shown beside the form, the values kept
        return await trial_page(request, status=400, promote_error=exc, promote_values=fields,
                                promote_key=fields.get("request_key", ""))
    except PromotionRefused as exc:
        if exc.reason != "segments_unacknowledged":
            raise
        return await trial_page(request, status=409, promote_error=exc, promote_values=fields,
                                promote_key=fields.get("request_key", ""))
    except IdempotencyConflict:
        return await trial_page(request, status=409, promote_values=fields, promote_error=BadRequest(
            "this form was already submitted with other values; check them and submit again"))
    return redirect(f"{CONSOLE_PREFIX}/watches/{watch.id}")


# -- Watches ---------------------------------------------------------------------------------


async def watches_page(request: web.Request) -> web.Response:
    status = request.query.get("status", "").strip() or None
    if status is not None and status not in ("active", "stopped"):
        raise BadRequest(f"status must be active or stopped, got {status!r}", field="status")
    watches = await state(request).watches.list(principal(request), status=status)
    return render(request, "watches.html", nav="watches", watches=watches, wstatus=status or "")


async def _watch_context(request: web.Request) -> dict[str, Any]:
    p = principal(request)
    service = state(request).watches
    w = await service.get(p, request.match_info["watch_id"])
    alerts = [a for a in await service.alerts(p) if a["watch_id"] == w["id"]]
    history = detector_history(w, await service.detector_path(p, w["id"]))
    return {"w": w, "gauge": detector_gauge(w), "history": history, "alerts": alerts,
            "periods": watch_periods(w, alerts),
            "may_write": can_write(p, w["team"])}


async def watch_page(request: web.Request) -> web.Response:
    return render(request, "watch.html", nav="watches", **await _watch_context(request))


async def watch_fragment(request: web.Request) -> web.Response:
    return render(request, "_watch_body.html", **await _watch_context(request))


async def stop_watch(request: web.Request) -> web.Response:
    watch_id = request.match_info["watch_id"]
    if not confirmed(request):  # irreversible: asked first (sidecar.console.confirm)
        p = principal(request)
        w = await state(request).watches.get(p, watch_id)
        if not can_write(p, w["team"]):
            raise Forbidden(f"your roles may read watch {watch_id!r} but not stop it")
        return ask(request, heading=f"Stop watch {watch_id}?", button="Stop watch", button_id="confirm-stop-watch",
                   what=f"The sentinel ({w['old_model']}) stops judging {w['new_model']} for team {w['team']}: no drift "
                        "is detected from then on, and a stopped watch cannot be restarted.",
                   cancel=f"{CONSOLE_PREFIX}/watches/{watch_id}", nav="watches")
    await state(request).watches.stop(principal(request), watch_id)
    return redirect(f"{CONSOLE_PREFIX}/watches/{watch_id}")


def _back(fields: dict[str, str], default: str) -> str:
    target = fields.get("next", "")
    if target.startswith(f"{CONSOLE_PREFIX}/") and "//" not in target and "\\" not in target:
        return target
    return default


async def _move(request: web.Request, to: str) -> web.Response:
    alert = await state(request).watches.move_alert(principal(request), request.match_info["alert_id"], to)
    return redirect(_back(form(request), f"{CONSOLE_PREFIX}/watches/{alert['watch_id']}"))


async def ack_alert(request: web.Request) -> web.Response:
    return await _move(request, "acknowledged")


async def resolve_alert(request: web.Request) -> web.Response:
    return await _move(request, "resolved")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_post("/trials/{trial_id}/promote", promote)
    router.add_get("/watches", watches_page)
    router.add_get("/watches/{watch_id}", watch_page)
    router.add_get("/watches/{watch_id}/fragment", watch_fragment)
    router.add_post("/watches/{watch_id}/stop", stop_watch)
    router.add_post("/alerts/{alert_id}/ack", ack_alert)
    router.add_post("/alerts/{alert_id}/resolve", resolve_alert)
