"""The console's Compare: one prompt, several models, answers streaming side by side.

``GET /console/compare`` is the form; ``static/compare.js`` posts it as JSON to
``POST /console/compare/stream``, which runs the very :class:`~sidecar.services.compare.CompareService`
that ``POST /v1/compare`` runs, with the request's principal (write role *and* content
permission: the answers are content), and answers the same server-sent events. It is
the console's own route because a browser session holds its token in an HttpOnly
cookie the API does not read; the write carries the page's CSRF token in
``X-CSRF-Token``. Nothing is stored: there is no list, history or detail route, and
"make it a trial" only pre-fills the trial form.
"""

from __future__ import annotations

from contextlib import aclosing

from aiohttp import web

from policies.roles import decide
from sidecar.console.app import SECURITY_HEADERS, principal, render, state
from sidecar.console.pages import visible_teams
from sidecar.console.wording import product_words
from sidecar.errors import ApiError
from sidecar.ingest.wire import encode
from sidecar.services.compare import DEFAULT_COMPARE_CAP_USD, MAX_MODELS, MIN_MODELS, decode_compare


#: A refused compare's field, as the page names it.
FIELD_LABELS = {"$.models": "Models", "$.team": "Team", "$.spend_cap_usd": "Spend cap",
                "$.max_tokens": "Max tokens per answer", "$.messages": "Prompt"}


async def compare_page(request: web.Request) -> web.Response:
    p = principal(request)
    teams = await visible_teams(request)
    allowed = [t for t in teams if decide(p, t, "write") == "allow" and decide(p, t, "content") == "allow"]
    console = state(request)
    return render(request, "compare.html", nav="compare", teams=allowed, content=p.content,
                  writes=any(decide(p, t, "write") == "allow" for t in teams) or p.is_super,
                  models=list(console.models), min_models=MIN_MODELS, max_models=MAX_MODELS,
                  default_cap=DEFAULT_COMPARE_CAP_USD)


async def compare_stream(request: web.Request) -> web.StreamResponse:
    """The compare's server-sent events, or its refusal in the API's JSON error shape."""
    console = state(request)
    try:
        plan = console.compare.plan(principal(request), decode_compare(await request.read()))
    except ApiError as exc:
        console.compare.refused()
        # The product's words (issue 28), led by the field's label: "Models must list at least 2 items."
        message = product_words(exc.message, FIELD_LABELS.get(exc.field or ""))
        body = {"error": {"code": exc.code, "message": message, "field": exc.field}}
        return web.Response(status=exc.status, body=encode(body), content_type="application/json")
    response = web.StreamResponse(headers={
        "Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-store", "X-Accel-Buffering": "no",
        **SECURITY_HEADERS})
    await response.prepare(request)
    async with aclosing(console.compare.events(plan)) as events:  # a browser gone: its calls are cancelled
        async for event in events:
            await response.write(event)
    await response.write_eof()
    return response


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/compare", compare_page)
    router.add_post("/compare/stream", compare_stream)
