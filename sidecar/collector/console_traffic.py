"""The control plane's console: the traffic views across every gateway that reports to it.

Live, Results, Trials (with each trial's detail) and Watches, read-only, from the uplink
records the collector keeps (:class:`~sidecar.collector.operator_views.OperatorViews`). They
sit in one navigation with Experiments, Datasets and Comparisons, behind the same sign-in
and role model (:mod:`sidecar.collector.corpus.pages` builds the app;
:func:`add_routes` adds these). Writes to a trial (stop, resume, promote) stay with the
sidecar that runs it: a trial's page names the sidecars that reported it.

Results shows two lists side by side that never interleave: traffic evidence in the traffic
table's words, corpus evidence (experiments, A/B comparisons) in the corpus table's.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sidecar.collector.operator_views import RESULT_FILTERS, OperatorViews
from sidecar.console.app import principal, render
from sidecar.api.principal import principal_of
from sidecar.errors import BadRequest, NotFound
from sidecar.ingest.wire import encode

OPERATOR: web.AppKey[OperatorViews] = web.AppKey("console_operator", OperatorViews)
#: The statuses a traffic row may have (a filter's choices).
STATUSES = ("running", "stopped", "cap_reached", "adopted", "posture_changed", "starter_unauthorized")


def views(request: web.Request) -> OperatorViews:
    return request.config_dict[OPERATOR]


def _filters(request: web.Request) -> dict[str, str]:
    return {k: request.query.get(k, "").strip() for k in RESULT_FILTERS}


def _teams(rows: list[dict[str, Any]]) -> list[str]:
    return sorted({str(r["team"]) for r in rows if r.get("team")})


async def live_page(request: web.Request) -> web.Response:
    live = await views(request).live(principal(request))
    return render(request, "cp_live.html", nav="live", live=live, tiles={t["tile"]: t for t in live["tiles"]})


async def live_fragment(request: web.Request) -> web.Response:
    live = await views(request).live(principal(request))
    return render(request, "_cp_live_body.html", live=live, tiles={t["tile"]: t for t in live["tiles"]})


async def results_page(request: web.Request) -> web.Response:
    filters = _filters(request)
    answer = await views(request).results(principal(request), {k: v for k, v in filters.items() if v})
    return render(request, "cp_results.html", nav="results", filters=filters, traffic=answer["traffic"],
                  corpus=answer["corpus"], note=answer["note"],
                  teams=_teams(answer["traffic"] + answer["corpus"]) or sorted(filter(None, [filters["team"]])),
                  statuses=STATUSES)


async def trials_page(request: web.Request) -> web.Response:
    rows = await views(request).traffic(principal(request))
    return render(request, "cp_trials.html", nav="trials", rows=rows)


async def trial_page(request: web.Request) -> web.Response:
    trial_id = request.match_info["trial_id"]
    rows = [r for r in await views(request).traffic(principal(request)) if r["id"] == trial_id]
    if not rows:
        raise NotFound(f"no trial {trial_id!r} reported to this control plane")
    return render(request, "cp_trial.html", nav="trials", t=rows[0])


async def watches_page(request: web.Request) -> web.Response:
    p = principal(request)
    return render(request, "cp_watches.html", nav="watches", watches=await views(request).watches(p),
                  alerts=await views(request).alerts(p))


async def results_api(request: web.Request) -> web.Response:
    """``GET /v1/results`` on the collector (the corpus API's middlewares set the principal)."""
    unknown = [k for k in request.query if k not in RESULT_FILTERS]
    if unknown:
        raise BadRequest(f"unknown query parameter {unknown[0]!r}; this route takes {', '.join(RESULT_FILTERS)}",
                         field=unknown[0])
    answer = await request.config_dict[OPERATOR].results(principal_of(request), dict(request.query))
    return web.Response(body=encode(answer), content_type="application/json")


def add_routes(app: web.Application) -> None:
    router = app.router
    router.add_get("/live", live_page)
    router.add_get("/live/fragment", live_fragment)
    router.add_get("/results", results_page)
    router.add_get("/trials", trials_page)
    router.add_get("/trials/{trial_id}", trial_page)
    router.add_get("/watches", watches_page)


__all__ = ["OPERATOR", "add_routes", "results_api"]
