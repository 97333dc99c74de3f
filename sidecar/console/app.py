"""The console's aiohttp sub-application: routes, its middleware, HTML errors.

Mounted by :func:`sidecar.api.admin.admin_app` at :data:`CONSOLE_PREFIX`, before the
API's catch-all. The admin app's authentication middleware delegates this prefix here
(:mod:`sidecar.console.session` authenticates with the same verifier). Every answer
is HTML — a refusal too, with the status the API would give — and carries a Content
Security Policy that lets a page load nothing but this sidecar's own files.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field as dc_field
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import quote

import jinja2
from aiohttp import web

from policies.roles import Principal
from sidecar.api.guard import RETRY_AFTER_S, store_failure
from sidecar.api.principal import PRINCIPAL
from sidecar.console.fmt import FILTERS
from sidecar.console.session import (
    BROWSER_COOKIE, CSRF_FIELD, SAFE_METHODS, SESSION_COOKIE, Sessions, Who, clear_cookie, new_browser_id,
    same_origin, set_cookie,
)
from sidecar.errors import ApiError
from sidecar.prices import PriceBook
from sidecar.services.compare import CompareService
from sidecar.services.posture import PostureService
from sidecar.services.promotion import PromotionService
from sidecar.services.trials import TrialService
from sidecar.services.watches import WatchService
from sidecar.store.base import Store

log = logging.getLogger("shadowtrial.console")

CONSOLE_PREFIX = "/console"
HERE = Path(__file__).parent
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Nothing but this sidecar's own files; no inline script or style.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "X-Frame-Options": "DENY",
}


@dataclass(frozen=True, slots=True)
class Shell:
    """What every console page needs, wherever it is served: the sessions, the templates, and
    which service serves it (``sidecar``, or ``control_plane`` for the corpus pages)."""

    sessions: Sessions
    templates: jinja2.Environment
    site: str = "sidecar"
    #: Where the other half of the console is, if known (a link in the navigation), else "".
    elsewhere: str = ""


@dataclass(frozen=True, slots=True)
class Console:
    """What the sidecar console's handlers use: the admin API's own services, and for the forms
    the configured teams, models, their prices and the judge's default model (not the runtime)."""

    trials: TrialService
    posture: PostureService
    watches: WatchService
    promotion: PromotionService
    compare: CompareService
    #: Lists every trial's team, for ``platform_admin``'s team choices.
    store: Store
    #: ``[teams.NAME]``, ``[models.ALIAS]`` (sorted) and ``[judge] model``.
    teams: tuple[str, ...]
    models: tuple[str, ...]
    price_book: PriceBook
    judge_model: str
    #: The control plane's console (``[uplink] console_url``), linked in the navigation; "" if none.
    control_plane_console: str = ""
    #: When the console was built (monotonic seconds, about when the process started): the
    #: tap's received count over the time since is the new-trial form's traffic rate.
    started: float = dc_field(default_factory=time.monotonic)


SHELL: web.AppKey[Shell] = web.AppKey("console_shell", Shell)
STATE: web.AppKey[Console] = web.AppKey("console", Console)
BROWSER: web.RequestKey[str] = web.RequestKey("console_browser", str)
WHO: web.RequestKey[Who] = web.RequestKey("console_who", Who)
FORM: web.RequestKey[dict[str, str]] = web.RequestKey("console_form", dict)


def templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(HERE / "templates")),
        autoescape=True,  # every template, whatever its name: content is text, never HTML
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(FILTERS)
    return env


def state(request: web.Request) -> Console:
    return request.config_dict[STATE]


def shell(request: web.Request) -> Shell:
    return request.config_dict[SHELL]


def principal(request: web.Request) -> Principal:
    p = request.get(PRINCIPAL)
    if not isinstance(p, Principal):
        raise RuntimeError("no principal on a console request: the console's middleware did not run")
    return p


def form(request: web.Request) -> dict[str, str]:
    """The write's form fields (read and CSRF-checked by the middleware)."""
    return request.get(FORM) or {}


def render(request: web.Request, template: str, status: int = 200, **context: Any) -> web.Response:
    console = shell(request)
    who = request.get(WHO)
    browser = request.get(BROWSER, "")
    context.setdefault("nav", "")
    page = console.templates.get_template(template).render(
        site=console.site, elsewhere=console.elsewhere,
        principal=request.get(PRINCIPAL), auth_on=console.sessions.auth_on,
        via=None if who is None else who.via, csrf=console.sessions.csrf_token(browser) if browser else "",
        csrf_field=CSRF_FIELD, prefix=CONSOLE_PREFIX, **context,
    )
    return web.Response(status=status, text=page, content_type="text/html", charset="utf-8")


def redirect(location: str) -> web.Response:
    return web.Response(status=303, headers={"Location": location})


def error_page(request: web.Request, status: int, code: str, message: str, field: str | None = None) -> web.Response:
    return render(request, "error.html", status=status, http_status=status, code=code, message=message, field=field)


#: Served without a principal: the login form and the static assets (content-free).
def _public(path: str) -> bool:
    return path in (f"{CONSOLE_PREFIX}/login",) or path.startswith(f"{CONSOLE_PREFIX}/static/")


def _fragment(path: str) -> bool:
    return path.endswith("/fragment")


@web.middleware
async def console_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    browser = request.cookies.get(BROWSER_COOKIE)
    fresh = None
    if not browser:
        browser = fresh = new_browser_id()
    request[BROWSER] = browser
    try:
        response = await _guarded(request, handler)
    except ApiError as exc:
        response = error_page(request, exc.status, exc.code, exc.message, exc.field)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        response = error_page(request, exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
    except Exception as exc:
        if not store_failure(exc):
            log.exception("console %s %s failed", request.method, request.path)
            response = error_page(request, 500, "internal_error", "the sidecar failed on this page; its log has the details")
        else:
            log.warning("console %s %s: the store failed; answered 503", request.method, request.path)
            response = error_page(request, 503, "store_unavailable", "the store did not answer; try again shortly")
            response.headers["Retry-After"] = str(RETRY_AFTER_S)
    if response.prepared:  # a stream (compare) set its own headers before its first byte
        return response
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if not request.path.startswith(f"{CONSOLE_PREFIX}/static/"):
        response.headers["Cache-Control"] = "no-store"
    if fresh is not None and not response.prepared:
        set_cookie(response, request, BROWSER_COOKIE, fresh)
    return response


#: A script's write (a JSON body, an upload) carries the form's CSRF token in this header.
CSRF_HEADER = "X-CSRF-Token"


async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    console = shell(request)
    if request.method not in SAFE_METHODS:
        if not same_origin(request):
            return error_page(request, 403, "cross_origin", "a write from another origin is refused")
        try:
            posted = await request.post()
        except ValueError:
            return error_page(request, 400, "invalid_request", "the form could not be read")
        fields = {k: v for k, v in posted.items() if isinstance(v, str)}
        if not console.sessions.csrf_ok(request, fields.get(CSRF_FIELD) or request.headers.get(CSRF_HEADER)):
            return error_page(request, 403, "csrf_failed",
                              "the form's CSRF token is missing or does not match this browser; reload the page and try again")
        request[FORM] = fields
    if _public(request.path):
        return await handler(request)
    who = console.sessions.who(request)
    request[WHO] = who
    if who.principal is None:
        if who.via == "cookie":
            response: web.StreamResponse = (
                web.Response(status=401, text="session ended") if _fragment(request.path)
                else redirect(f"{CONSOLE_PREFIX}/login?reason=expired&next={quote(request.path_qs)}")
            )
            clear_cookie(response, SESSION_COOKIE)
            return response
        if who.via == "header":
            return error_page(request, 401, "unauthorized", who.refused or "the token was refused")
        if _fragment(request.path):
            return error_page(request, 401, "unauthorized", "sign in again")
        return redirect(f"{CONSOLE_PREFIX}/login?next={quote(request.path_qs)}")
    request[PRINCIPAL] = who.principal
    return await handler(request)
