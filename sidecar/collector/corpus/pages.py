"""The console's Datasets and Comparisons, served by the control plane (``shadowtrial collector``).

Corpus evidence lives in the control plane, so these pages are a console of their own,
mounted at ``/console/`` on the collector's app when it runs with a config (see
:func:`sidecar.collector.server.CollectorServer`). They reuse the console's framework:
the same middleware (session cookie or bearer header, CSRF on every write, HTML errors,
the Content Security Policy), templates and login; and they call the very services the
corpus API (:mod:`sidecar.collector.corpus.api`) calls, with the request's principal.

- **Datasets**: the list, an import from a file (``static/upload.js`` sends it with
  progress; without script the form posts and redirects), a dataset's versions and a
  version's items (content permission). Seeding from traffic: a form for each team whose
  retention is on (the exchanges forwarded for its control-plane trials); unavailable,
  with the reason, for a team whose retention is off.
- **Comparisons**: the A/B comparisons table (Id, Suite, Baseline, Candidate, Verdict,
  Created; the 200 most recent), its suite filter, the empty state, a detail side panel
  with the metric rows, the *New comparison* panel with JSON fields (the API's
  ``comparison_invalid`` field named on error), and *Retry* when the read fails. The rows
  and the panel are the A/B comparisons API's (``/v1/evaluations/comparisons``): both
  sides, the delta, the comparator and the threshold per metric, and the verdict.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import msgspec
from aiohttp import web
from multidict import MultiDictProxy

from policies.posture import retention_features
from policies.roles import WRITERS, Principal, decide
from sidecar.auth.revocations import Revocations
from sidecar.auth.verify import Verifier
from sidecar.console.app import (
    CONSOLE_PREFIX, HERE, SHELL, Shell, console_middleware, form, principal, redirect, render, templates,
)
from sidecar.console.session import Sessions
from sidecar.collector.corpus.api import Services
from sidecar.collector.corpus.datasets import SeedIn
from sidecar.collector.corpus.items import FORMATS
from sidecar.errors import ApiError, BadRequest
from sidecar.ingest.wire import encode, split_path
from sidecar.store.errors import IdempotencyConflict

log = logging.getLogger("shadowtrial.console")



@dataclass(frozen=True, slots=True)
class CorpusConsole:
    """The corpus API's services, and the teams the config names (listed for ``platform_admin``)."""

    services: Services
    teams: tuple[str, ...] = ()


CORPUS_PAGES: web.AppKey[CorpusConsole] = web.AppKey("console_corpus", CorpusConsole)
#: A script's request (upload.js) asks for JSON answers instead of pages.
SCRIPT_HEADER = "X-Console-Script"
ITEMS_PAGE = 100
ARMS_TEMPLATE = json.dumps([{"name": "baseline", "model": ""}, {"name": "candidate", "model": ""}], indent=2)


def _svc(request: web.Request) -> Services:
    return request.config_dict[CORPUS_PAGES].services


def _writes(p: Principal, team: str) -> bool:
    return decide(p, team, "write") == "allow"


def _writes_any(p: Principal) -> bool:
    return p.is_super or bool(p.roles & WRITERS and p.teams)


async def _teams(request: web.Request) -> list[str]:
    """The principal's teams, or for ``platform_admin`` every team the config or the corpus names."""
    p = principal(request)
    own = p.visible_teams()
    if own is not None:
        return sorted(own)
    names = set(request.config_dict[CORPUS_PAGES].teams)
    names.update(d["team"] for d in await _svc(request).datasets.listing(p, None))
    return sorted(names)


# -- Datasets ----------------------------------------------------------------------------------


async def _seeding(request: web.Request, teams: Sequence[str]) -> list[dict[str, Any]]:
    """Per team: whether a dataset may be seeded from the traffic the control plane holds, or why not."""
    ctx = _svc(request).ctx
    out = []
    for team in teams:
        retained = await ctx.prompt_retention(team)
        if not retained:
            reason = retention_features(False)["dataset_seeding"].reason
        elif ctx.retained is None:
            reason = ("the control plane holds no retained traffic: it stays in each sidecar's retention window; "
                      "import a JSONL or CSV file instead")
        elif not await _holds_any(ctx.retained, team):
            reason = ("the control plane holds no retained exchange of this team yet: its exchanges arrive once "
                      "the team is cut over and its gateways send traffic")
        else:
            reason = ""
        out.append({"team": team, "retention": retained, "available": not reason, "reason": reason})
    return out


async def _holds_any(source: Any, team: str) -> bool:
    """Whether the team's retained traffic has at least one exchange (read no further than the first)."""
    exchanges = source(team)
    try:
        async for _ in exchanges:
            return True
        return False
    finally:
        close = getattr(exchanges, "aclose", None)
        if close is not None:
            await close()


async def datasets_page(request: web.Request, *, error: ApiError | None = None, values: dict[str, str] | None = None,
                        status: int = 200, error_at: str = "import") -> web.Response:
    """``error_at``: the card a refusal is shown under, ``import`` or ``seed`` (issue 28)."""
    p = principal(request)
    team = request.query.get("team", "").strip() or None
    teams = await _teams(request)
    datasets = await _svc(request).datasets.listing(p, team)
    writable = [t for t in teams if _writes(p, t)]
    return render(request, "datasets.html", status=status, nav="datasets", datasets=datasets, teams=teams,
                  team=team or "", writable=writable, seeding=await _seeding(request, teams), error=error,
                  error_at=error_at, values=values or {}, formats=FORMATS)


def _format(filename: str, given: str) -> str:
    if given:
        if given not in FORMATS:
            raise BadRequest(f"format must be one of {', '.join(FORMATS)}, got {given!r}", field="format")
        return given
    for fmt in FORMATS:
        if filename.lower().endswith(f".{fmt}"):
            return fmt
    raise BadRequest("name the file .jsonl or .csv, or choose its format", field="format")


async def import_dataset(request: web.Request) -> web.StreamResponse:
    """An import from the form: team, name, optional format, the file. A script gets JSON."""
    posted: MultiDictProxy[Any] = await request.post()  # read (and CSRF-checked) by the middleware
    fields = form(request)
    scripted = request.headers.get(SCRIPT_HEADER) == "1"
    try:
        upload = posted.get("file")
        if not isinstance(upload, web.FileField):
            raise BadRequest("choose a file to import", field="file")
        team, name = fields.get("team", "").strip(), fields.get("name", "").strip()
        if not team:
            raise BadRequest("team is required", field="team")
        if not name:
            raise BadRequest("name is required", field="name")
        fmt = _format(upload.filename or "", fields.get("format", "").strip())
        view = await _svc(request).datasets.create(principal(request), team, name, fmt, upload.file.read())
    except ApiError as exc:
        if scripted:
            body = {"error": {"code": exc.code, "message": exc.message, "field": exc.field}}
            return web.Response(status=exc.status, body=encode(body), content_type="application/json")
        if exc.status in (401, 403):
            raise  # a refusal of the principal: the error page, as for every console write
        return await datasets_page(request, error=exc, values=fields, status=exc.status)
    location = f"{CONSOLE_PREFIX}/datasets/{view['id']}?imported=1"
    if scripted:
        return web.Response(status=201, body=encode({"location": location, "dataset": view}),
                            content_type="application/json")
    return redirect(location)


async def seed_dataset(request: web.Request) -> web.StreamResponse:
    """A dataset from the team's retained traffic at the control plane: team and name."""
    fields = form(request)
    try:
        try:
            body = msgspec.convert({"team": fields.get("seed_team", "").strip(),
                                    "name": fields.get("seed_name", "").strip()}, SeedIn)
        except msgspec.ValidationError as exc:
            message, path = split_path(str(exc))
            raise BadRequest(message, field=path) from None
        view = await _svc(request).datasets.seed(principal(request), body)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise
        return await datasets_page(request, error=exc, values=fields, status=exc.status, error_at="seed")
    return redirect(f"{CONSOLE_PREFIX}/datasets/{view['id']}?seeded={view['skipped']}")


async def dataset_page(request: web.Request) -> web.Response:
    p = principal(request)
    datasets = _svc(request).datasets
    dataset = await datasets.get(p, request.match_info["dataset_id"])
    versions = dataset["versions"]
    chosen = request.query.get("version", "").strip()
    try:
        version = int(chosen) if chosen else int(dataset["latest_version"])
        offset = max(0, int(request.query.get("offset", "0") or 0))
    except ValueError:
        raise BadRequest("version and offset are whole numbers", field="version") from None
    may_read = decide(p, dataset["team"], "content") == "allow"
    items = await datasets.items(p, dataset["id"], version, offset=offset, limit=ITEMS_PAGE) if may_read else None
    return render(request, "dataset.html", nav="datasets", d=dataset, versions=versions, version=version,
                  items=items, may_read=may_read, offset=offset, page=ITEMS_PAGE,
                  imported=request.query.get("imported") == "1", item_text=item_text)


def item_text(messages: Sequence[dict[str, Any]]) -> str:
    """An item's input as plain text (rendered escaped: content is text, never HTML)."""
    return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in messages)


# -- Comparisons -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricRow:
    """One metric row of an A/B comparison: both sides, the delta, how it is read and its threshold."""

    name: str
    kind: str
    baseline: str
    candidate: str
    delta: str
    comparator: str
    threshold: str


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One row of the A/B comparisons table and its side panel."""

    id: str
    team: str
    suite_id: str
    suite_name: str
    baseline: str
    candidate: str
    verdict: str
    status: str
    created_at: float
    created_by: str | None
    metrics: tuple[MetricRow, ...]
    facts: tuple[tuple[str, str], ...]


def _side(side: Mapping[str, Any]) -> str:
    version = side.get("version")
    return f"{side.get('type')} {side.get('ref')}" + (f" @{version}" if version else "")


def _figure(value: Any) -> str:
    return "—" if value is None else f"{float(value):.4g}"


async def comparison_rows(services: Services, p: Principal, suite_id: str | None,
                          suites: dict[str, dict[str, Any]]) -> list[ComparisonRow]:
    """The table's rows: the A/B comparisons (``GET /v1/evaluations/comparisons``, the 200 most
    recent, newest first), each with its metric rows and verdict (``GET …/{id}``)."""
    rows = []
    for listed in await services.ab.listing(p, suite_id):
        c = await services.ab.get(p, listed["id"])
        suite = suites.get(c["suite_id"], {})
        metrics = tuple(MetricRow(m["metric"], m["kind"], _figure(m["baseline"]), _figure(m["candidate"]),
                                  _figure(m["delta"]), m["comparator"].replace("_", " "), _figure(m["threshold"]))
                        for m in c.get("metrics", []))
        verdict = c.get("verdict")
        facts = (("Status", str(c["status"]).replace("_", " ")), ("Tolerance", f"{c['tolerance']:g}"),
                 ("Runs", f"{c['baseline_run_id']}, {c['candidate_run_id']}"))
        rows.append(ComparisonRow(
            c["id"], c["team"], c["suite_id"], str(suite.get("name", c["suite_id"])), _side(c["baseline"]),
            _side(c["candidate"]),
            str(verdict).replace("_", " ").capitalize() if verdict else "Running",
            c["status"], c["created_at"], c["created_by"], metrics, facts))
    return rows


async def comparisons_page(request: web.Request, *, error: ApiError | None = None,
                           values: dict[str, str] | None = None, status: int = 200) -> web.Response:
    p = principal(request)
    services = _svc(request)
    suite_id = request.query.get("suite", "").strip() or None
    failed = None
    rows: list[ComparisonRow] = []
    suites: list[dict[str, Any]] = []
    try:
        suites = await services.suites.listing(p, None)
        rows = await comparison_rows(services, p, suite_id, {s["id"]: s for s in suites})
    except ApiError:
        raise
    except Exception as exc:  # a failed read: the page stays, with Retry
        log.warning("console comparisons: the read failed: %s", type(exc).__name__)
        failed = "The comparisons could not be read (the store did not answer)."
    opened = request.query.get("open", "")
    writable = sorted({s["team"] for s in suites if _writes(p, s["team"])})
    return render(request, "comparisons.html", status=503 if failed else status, nav="comparisons", rows=rows, suites=suites,
                  suite_id=suite_id or "", failed=failed, opened=opened,
                  may_create=_writes_any(p) and (bool(writable) or p.is_super), error=error,
                  bad_field=None if error is None else error.field,
                  values=values or {"arms": ARMS_TEMPLATE, "repetitions": "1"},
                  request_key=(values or {}).get("request_key") or secrets.token_urlsafe(16),
                  retry=request.path_qs, show_new=error is not None or request.query.get("new") == "1")


def comparison_body(fields: dict[str, str]) -> dict[str, Any]:
    """The A/B request from the panel's fields: the sides and outputs are JSON, as the API takes them."""
    body: dict[str, Any] = {"suite_id": fields.get("suite_id", "").strip()}
    for name in ("baseline", "candidate", "outputs"):
        text = fields.get(name, "").strip()
        if not text:
            continue
        try:
            body[name] = json.loads(text)
        except ValueError as exc:
            raise BadRequest(f"{name} is not JSON: {exc}", field=f"$.{name}") from None
    tolerance = fields.get("tolerance", "").strip()
    if tolerance:
        try:
            body["tolerance"] = float(tolerance)
        except ValueError:
            body["tolerance"] = tolerance  # the API names it
    return body


async def create_comparison(request: web.Request) -> web.Response:
    """``POST /v1/evaluations/comparisons`` from the panel, with the form's request key (as the API)."""
    fields = form(request)
    try:
        view, _created = await _svc(request).ab.create(principal(request), comparison_body(fields),
                                                       fields.get("request_key") or None)
    except IdempotencyConflict:
        return await comparisons_page(request, values=dict(fields, request_key=""), status=409, error=BadRequest(
            "this form was already submitted with other values; check them and submit again"))
    except ApiError as exc:
        if exc.status in (401, 403) or (exc.status == 404 and exc.field is None):
            raise  # a refusal of the principal: the error page, as for every console write
        return await comparisons_page(request, error=exc, values=fields, status=exc.status)
    return redirect(f"{CONSOLE_PREFIX}/comparisons?open={view['id']}")


def corpus_console_app(services: Services, verifier: Verifier | None, revocations: Revocations | None, *,
                       teams: Sequence[str] = (), more: Sequence[Callable[[web.Application], None]] = (),
                       home: str = "/datasets") -> web.Application:
    """The Datasets and Comparisons console, to mount at ``/console`` on the control plane's app.
    ``more``: each adds its screens' routes (the control plane's traffic views, Experiments)
    before the catch-all; ``home``: where ``/console/`` leads."""
    from sidecar.console import pages

    async def home_page(request: web.Request) -> web.Response:
        return redirect(f"{CONSOLE_PREFIX}{home}")

    app = web.Application(middlewares=[console_middleware])
    app[SHELL] = Shell(Sessions(verifier, revocations), templates(), "control_plane")
    app[CORPUS_PAGES] = CorpusConsole(services, tuple(teams))
    app.router.add_get("/", home_page)
    for add in more:
        add(app)
    app.router.add_get("/datasets", datasets_page)
    app.router.add_post("/datasets", import_dataset)
    app.router.add_post("/datasets/seed", seed_dataset)
    app.router.add_get("/datasets/{dataset_id}", dataset_page)
    app.router.add_get("/comparisons", comparisons_page)
    app.router.add_post("/comparisons", create_comparison)
    app.router.add_get("/login", pages.login_page)
    app.router.add_post("/login", pages.login)
    app.router.add_post("/logout", pages.logout)
    app.router.add_static("/static", HERE / "static", append_version=False)
    app.router.add_route("*", "/{tail:.*}", pages.not_found)
    return app


__all__ = ["comparison_rows", "corpus_console_app"]
