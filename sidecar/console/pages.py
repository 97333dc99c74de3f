"""The console's pages: Live, Results, Trials (list, create, detail, stop), Teams (posture), login.

Each handler reads through :class:`~sidecar.services.trials.TrialService` or
:class:`~sidecar.services.posture.PostureService` with the request's principal, exactly
as the API's handlers do, and renders a template; a refusal from a service propagates
to the console's middleware, which answers it as an HTML page with the API's status.
Writes answer ``303`` to the page that shows their result (post/redirect/get).
"""

from __future__ import annotations

import datetime as dt
import secrets
import time
from typing import Any

from aiohttp import web

from policies.posture import may_set_posture
from policies.roles import WRITERS, Principal, decide
from sidecar.auth.errors import Unauthorized
from sidecar.console.app import CONSOLE_PREFIX, form, principal, redirect, render, shell, state
from sidecar.console.chart import decision_chart
from sidecar.console.confirm import ask, confirmed
from sidecar.console.estimate import duration, estimate
from sidecar.console.forms import TRIAL_FIELDS, decode_trial_form, field_names, label_of
from sidecar.console.session import SESSION_COOKIE, clear_cookie, set_cookie
from sidecar.console.slots import promote_slot
from sidecar.console.wording import product_words
from sidecar.errors import ApiError, BadRequest, Forbidden, NotFound
from sidecar.services.posture import PostureIn, check_if_match, check_team
from sidecar.services.trials import PAUSED
from sidecar.store.errors import IdempotencyConflict
from sidecar.trials.create import STATUSES


def can_write(p: Principal, team: str) -> bool:
    return decide(p, team, "write") == "allow"


def writes_any(p: Principal) -> bool:
    """Whether the principal may start a trial for some team (the New trial button)."""
    return p.is_super or bool(p.roles & WRITERS and p.teams)


async def visible_teams(request: web.Request) -> list[str]:
    """The teams the principal sees: its own, or for ``platform_admin`` every team the sidecar knows
    (configured, or with trials)."""
    p = principal(request)
    teams = p.visible_teams()
    if teams is not None:
        return sorted(teams)
    console = state(request)
    names = set(console.teams)
    names.update(r.team for r in await console.store.list_trials())
    return sorted(names)


# -- Live ------------------------------------------------------------------------------


async def _live_context(request: web.Request) -> dict[str, Any]:
    p = principal(request)
    live = await state(request).watches.live(p)  # GET /v1/live: firing alerts first, then the tiles
    return {"live": live, "tiles": {t["tile"]: t for t in live["tiles"]},
            "writes": {a["team"]: can_write(p, a["team"]) for a in live["alerts"]}}


async def live_page(request: web.Request) -> web.Response:
    return render(request, "live.html", nav="live", **await _live_context(request))


async def live_fragment(request: web.Request) -> web.Response:
    return render(request, "_live_body.html", **await _live_context(request))


# -- Results and the trial list ------------------------------------------------------------


def _date(query: Any, name: str) -> dt.date | None:
    text = query.get(name, "").strip()
    if not text:
        return None
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise BadRequest(f"{name} must be a date such as 2026-11-30, got {text!r}", field=name) from None


async def _filtered(request: web.Request) -> tuple[dict[str, str], list[dict[str, Any]]]:
    """The filter bar's values and the principal's trials they select (newest first)."""
    q = request.query
    filters = {k: q.get(k, "").strip() for k in ("team", "status", "model", "since", "until")}
    status = filters["status"] or None
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)}, got {status!r}", field="status")
    team = filters["team"] or None
    if team is not None:
        check_team(team)
    since, until = _date(q, "since"), _date(q, "until")
    items = await state(request).trials.list(principal(request), status=status, team=team)
    model = filters["model"].lower()
    out = []
    for t in items:
        if model and model not in t["candidate_model"].lower() and model not in t["incumbent_model"].lower():
            continue
        day = dt.datetime.fromtimestamp(t["created_at"], dt.timezone.utc).date()
        if (since is not None and day < since) or (until is not None and day > until):
            continue
        out.append(t)
    return filters, out


async def results_page(request: web.Request) -> web.Response:
    """``GET /v1/results``: its two lists, ``traffic`` and ``corpus``, never interleaved."""
    q = request.query
    filters = {k: q.get(k, "").strip() for k in ("team", "status", "model", "since", "until")}
    if filters["status"] and filters["status"] not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)}, got {filters['status']!r}", field="status")
    if filters["team"]:
        check_team(filters["team"])
    p = principal(request)
    answer = await state(request).watches.results(p, {k: v for k, v in filters.items() if v})
    # A paused row offers Resume and Stop where the role allows (Stop asks first, as on the trial page).
    actions = {"paused": PAUSED, "writable": {t["team"] for t in answer["traffic"] if can_write(p, t["team"])}}
    return render(request, "results.html", nav="results", filters=filters, traffic=answer["traffic"], actions=actions,
                  corpus=answer["corpus"], corpus_source=answer.get("corpus_source") or {},
                  note=answer.get("note", ""), teams=await visible_teams(request),
                  statuses=STATUSES)


async def trials_page(request: web.Request) -> web.Response:
    filters, items = await _filtered(request)
    p = principal(request)
    return render(request, "trials.html", nav="trials", filters=filters, trials=items,
                  teams=await visible_teams(request), statuses=STATUSES, may_create=writes_any(p))


# -- Create ----------------------------------------------------------------------------------


def _price_hints(request: web.Request) -> list[dict[str, Any]]:
    console = state(request)
    hints = []
    for alias in console.models:
        price = console.price_book.price_for(alias)
        hints.append({
            "alias": alias,
            "input": None if price is None else price.input_per_mtok / 1_000_000,
            "output": None if price is None else price.output_per_mtok / 1_000_000,
        })
    return hints


async def _writable_teams(request: web.Request) -> list[str]:
    """The teams the principal may start a trial for: the new-trial form's Team choices."""
    p = principal(request)
    return [t for t in await visible_teams(request) if can_write(p, t)]


async def _estimate(request: web.Request, values: dict[str, str]) -> dict[str, Any]:
    """The form's estimate at the current traffic (:mod:`sidecar.console.estimate`)."""
    console = state(request)
    live = await console.watches.live(principal(request))
    week = live["evaluation_spend"]["last_7_days"]["evaluation"]
    est = estimate(received=int(live["counters"].get("exchanges_received", 0)),
                   elapsed_s=time.monotonic() - console.started,
                   charged_micros=int(week["by_source"]["trials_and_watches_micros"]), cases=int(week["cases"]), values=values)
    return {"e": est, "to_min": duration(est.to_min_s), "to_expected": duration(est.to_expected_s)}


async def _new_form(request: web.Request, *, values: dict[str, str], error: ApiError | None = None,
                    status: int = 200) -> web.Response:
    bad = field_names(error.field) if error is not None else ()
    message = None
    if error is not None:  # the product's words, led by the field's label (issue 28, item 5)
        message = product_words(error.message, label_of(bad[0]) if len(bad) == 1 else None)
    advanced = any(values.get(f.name, "").strip() for f in TRIAL_FIELDS if f.advanced) or any(
        f.advanced and f.name in bad for f in TRIAL_FIELDS)
    return render(
        request, "trial_new.html", status=status, nav="trials", fields=TRIAL_FIELDS, values=values,
        error=error, message=message, bad_fields=bad, hints=_price_hints(request),
        teams=await _writable_teams(request), advanced_open=advanced, estimate=await _estimate(request, values),
        request_key=values.get("request_key") or secrets.token_urlsafe(16), judge_model=state(request).judge_model,
    )


async def new_trial_page(request: web.Request) -> web.Response:
    if not writes_any(principal(request)):  # a viewer is not offered "Start trial" (issue 28, item 5)
        raise Forbidden("your roles may read trials but not start one; ask a team's admin or operator")
    values = {f.name: request.query.get(f.name, "") for f in TRIAL_FIELDS}
    return await _new_form(request, values=values)


async def create_trial(request: web.Request) -> web.Response:
    fields = form(request)
    try:
        body, raw = decode_trial_form(fields)
        key = fields.get("request_key") or None
        view, _created = await state(request).trials.create(principal(request), body, raw, key)
    except IdempotencyConflict:
        return await _new_form(request, values=dict(fields, request_key=""), status=409, error=BadRequest(
            "this form was already submitted with other values; check them and submit again"))
    except ApiError as exc:
        if exc.status in (401, 403):
            raise  # a refusal of the principal: the error page, as for every console write
        # 400, 409, 422 (a model without a list price): shown at the field, the typed input kept.
        return await _new_form(request, values=fields, error=exc, status=exc.status)
    return redirect(f"{CONSOLE_PREFIX}/trials/{view['id']}")


# -- Detail and stop --------------------------------------------------------------------------


async def _trial_context(request: web.Request) -> dict[str, Any]:
    p = principal(request)
    console = state(request)
    trial = await console.trials.get(p, request.match_info["trial_id"])
    watch = None
    if trial["status"] == "adopted":
        watch = next((w for w in await console.watches.list(p) if w["trial_id"] == trial["id"]), None)
    path = await console.trials.decision_path(p, trial["id"])
    return {"t": trial, "chart": decision_chart(trial["verdict"], path), "may_write": can_write(p, trial["team"]),
            "promote": promote_slot(p, trial, CONSOLE_PREFIX), "paused": trial["status"] in PAUSED, "watch": watch,
            "promote_key": secrets.token_urlsafe(16), "promote_error": None, "promote_values": {}}


async def trial_page(request: web.Request, *, status: int = 200, **over: Any) -> web.Response:
    context = await _trial_context(request)
    context.update(over)
    return render(request, "trial.html", status=status, nav="trials", **context)


async def trial_fragment(request: web.Request) -> web.Response:
    return render(request, "_trial_body.html", **await _trial_context(request))


async def stop_trial(request: web.Request) -> web.Response:
    trial_id = request.match_info["trial_id"]
    if not confirmed(request):  # irreversible: asked first (sidecar.console.confirm)
        p = principal(request)
        t = await state(request).trials.get(p, trial_id)
        if not can_write(p, t["team"]):
            raise Forbidden(f"your roles may read trial {trial_id!r} but not stop it")
        return ask(request, heading=f"Stop trial {trial_id}?", button="Stop trial", button_id="confirm-stop-trial",
                   what=f"{t['candidate_model']} against {t['incumbent_model']} for team {t['team']} stops for good: "
                        "nothing more is sampled or spent, and it cannot be resumed. Its evidence is kept.",
                   cancel=f"{CONSOLE_PREFIX}/trials/{trial_id}", nav="trials")
    await state(request).trials.stop(principal(request), trial_id)
    return redirect(f"{CONSOLE_PREFIX}/trials/{trial_id}")


async def resume_trial(request: web.Request) -> web.Response:
    trial_id = request.match_info["trial_id"]
    await state(request).trials.resume(principal(request), trial_id)
    return redirect(f"{CONSOLE_PREFIX}/trials/{trial_id}")


# -- Teams' posture ------------------------------------------------------------------------------


async def teams_page(request: web.Request) -> web.Response:
    chosen = request.query.get("team", "").strip()
    if chosen:
        check_team(chosen)
        return redirect(f"{CONSOLE_PREFIX}/teams/{chosen}")
    return render(request, "teams.html", nav="teams", teams=await visible_teams(request))


async def _team(request: web.Request, *, saved: dict[str, Any] | None = None, status: int = 200) -> web.Response:
    p = principal(request)
    team = check_team(request.match_info["team"])
    posture = await state(request).posture.get(p, team)
    return render(request, "team.html", status=status, nav="teams", posture=posture, saved=saved,
                  may_set=may_set_posture(p, team))


async def team_page(request: web.Request) -> web.Response:
    return await _team(request)


async def set_posture(request: web.Request) -> web.Response:
    fields = form(request)
    team = check_team(request.match_info["team"])
    body = PostureIn(prompt_retention=fields.get("prompt_retention") == "on", cut_over=fields.get("cut_over") == "on")
    expected = check_if_match([fields["revision"]] if fields.get("revision") else [])
    answer = await state(request).posture.put(principal(request), team, body, expected)
    return await _team(request, saved=answer)


# -- Login ----------------------------------------------------------------------------------------


def _next(target: str | None) -> str:
    """Only a console path is a place to go after signing in (no open redirect)."""
    if target and target.startswith(f"{CONSOLE_PREFIX}/") and "//" not in target and "\\" not in target:
        return target
    return f"{CONSOLE_PREFIX}/"


async def login_page(request: web.Request, *, message: str | None = None, status: int = 200) -> web.Response:
    if not shell(request).sessions.auth_on:
        return redirect(f"{CONSOLE_PREFIX}/")
    reason = request.query.get("reason")
    if message is None and reason == "expired":
        message = "Your session ended (the token expired or was revoked). Sign in again."
    return render(request, "login.html", status=status, nav="login", message=message,
                  next=_next(request.query.get("next")))


async def login(request: web.Request) -> web.Response:
    fields = form(request)
    sessions = shell(request).sessions
    token = fields.get("token", "").strip()
    if not sessions.auth_on:
        return redirect(f"{CONSOLE_PREFIX}/")
    try:
        sessions.login(token)
    except Unauthorized as exc:
        return await login_page(request, message=f"Sign-in refused: {exc.message}.", status=401)
    response = redirect(_next(fields.get("next")))
    set_cookie(response, request, SESSION_COOKIE, token)
    return response


async def logout(request: web.Request) -> web.Response:
    response = redirect(f"{CONSOLE_PREFIX}/login")
    clear_cookie(response, SESSION_COOKIE)
    return response


async def not_found(request: web.Request) -> web.Response:
    raise NotFound(f"no console page {request.path!r}")


def add_routes(router: web.UrlDispatcher) -> None:
    router.add_get("/", live_page)
    router.add_get("/live/fragment", live_fragment)
    router.add_get("/results", results_page)
    router.add_get("/trials", trials_page)
    router.add_post("/trials", create_trial)
    router.add_get("/trials/new", new_trial_page)
    router.add_get("/trials/{trial_id}", trial_page)
    router.add_get("/trials/{trial_id}/fragment", trial_fragment)
    router.add_post("/trials/{trial_id}/stop", stop_trial)
    router.add_post("/trials/{trial_id}/resume", resume_trial)
    router.add_get("/teams", teams_page)
    router.add_get("/teams/{team}", team_page)
    router.add_post("/teams/{team}", set_posture)
    router.add_get("/login", login_page)
    router.add_post("/login", login)
    router.add_post("/logout", logout)
