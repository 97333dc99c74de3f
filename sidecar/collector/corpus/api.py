"""The corpus API: datasets, slices, suites and comparison groups (issue 13).

Two ways in:

- :func:`corpus_app` — an application with the admin API's middleware stack (bearer-JWT
  authentication, the JSON error shape, the store guard's ``503``), its routes under
  ``prefix`` (default ``/v1``). Mount it in the control plane with
  ``parent.add_subapp("/v1", corpus_app(ctx, verifier, prefix=""))``, or serve it alone.
- :func:`install` — add the routes to an existing app whose middlewares already set the
  principal (:data:`sidecar.api.principal.PRINCIPAL`) and map :class:`sidecar.errors.ApiError`.

Routes (``prefix`` = ``/v1``)::

    POST /v1/datasets                                  import (raw body or multipart), new dataset
    GET  /v1/datasets                                  ?team=
    POST /v1/datasets/seed                             from retained traffic (refused with retention off)
    GET  /v1/datasets/{id}                             with its versions
    GET  /v1/datasets/{id}/versions
    POST /v1/datasets/{id}/versions                    re-import: a new version (?format=&base_version=)
    GET  /v1/datasets/{id}/versions/{v}/items          ?offset=&limit=  (content permission)
    POST /v1/datasets/{id}/edits                       upsert / remove over base_version
    POST /v1/datasets/{id}/slices, GET …/slices
    POST /v1/suites, GET /v1/suites, GET /v1/suites/{id}
    POST /v1/comparisons/readiness                     read-only, no provider call
    POST /v1/comparisons                               start (Idempotency-Key required)
    GET  /v1/comparisons                               ?suite_id=&team= (200 most recent)
    GET  /v1/comparisons/{id}                          with its run: progress, denominators, spend, results
    GET  /v1/comparisons/{id}/attempts                 every attempt and its scores (no content)
    POST /v1/comparisons/{id}/retry                    an explicit linked retry of one attempt
    POST /v1/comparisons/{id}/arms/{arm}/cancel        the arm stops; its peers carry on
    POST /v1/comparisons/{id}/promote                  always 409 promotion_refused (corpus_evidence)
    POST /v1/evaluations/comparisons                   an A/B comparison (sidecar/collector/corpus/ab.py)
    GET  /v1/evaluations/comparisons                   ?suite_id= (200 most recent)
    GET  /v1/evaluations/comparisons/{id}              both run ids, per-metric rows, verdict
    GET  /v1/evaluations/evidence                      ?baseline=GROUP:ARM&candidate=GROUP:ARM (item 5)
    POST /v1/comparisons/{id}/archive                  archived: kept, no longer comparable (issue 24)
    POST /v1/comparison-templates                      a new template, version 1 (Idempotency-Key required)
    GET  /v1/comparison-templates                      ?team=
    GET  /v1/comparison-templates/{id}                 with every version
    POST /v1/comparison-templates/{id}/versions        the next version against expected_revision

An import's body is the file itself with ``?team=&name=&format=jsonl|csv`` (the format may
come from the content type instead: ``text/csv``, ``application/x-ndjson``,
``application/jsonl``), or ``multipart/form-data`` with fields ``team``, ``name``,
optional ``format`` and ``file`` (a ``.csv`` / ``.jsonl`` file name sets the format).
Imports are read up to :data:`MAX_IMPORT_BYTES` whatever the hosting app's own limit.
"""

from __future__ import annotations

import json
from typing import Any, Awaitable, Callable

from aiohttp import BodyPartReader, web

from sidecar.api.kit import errors_middleware, read_body
from sidecar.api.authn import authn_middleware
from sidecar.api.guard import store_guard
from sidecar.api.principal import principal_of
from sidecar.auth.revocations import Revocations
from sidecar.auth.verify import Verifier
from sidecar.collector.corpus.comparisons import ComparisonIn, ComparisonService
from sidecar.collector.corpus.evidence import EvidenceService
from sidecar.collector.corpus.ab import ABService
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.run_service import RetryIn, RunService
from sidecar.collector.corpus.errors import BodyTooLarge
from sidecar.collector.corpus.datasets import MAX_PAGE, DatasetService, EditIn, SeedIn, SliceIn, decode
from sidecar.collector.corpus.items import FORMATS
from sidecar.collector.corpus.suites import SuiteIn, SuiteService
from sidecar.collector.corpus.templates import TemplateIn, TemplateService, TemplateVersionIn
from sidecar.errors import BadRequest
from sidecar.ingest.wire import encode
from sidecar.trials.create import IDEMPOTENCY_KEY, check_idempotency_key

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

MAX_IMPORT_BYTES = 64 << 20
MAX_JSON_BYTES = 8 << 20


class Services:
    def __init__(self, ctx: CorpusContext) -> None:
        self.ctx = ctx
        self.datasets = DatasetService(ctx)
        self.suites = SuiteService(ctx)
        self.comparisons = ComparisonService(ctx, self.suites)
        self.runs = RunService(ctx)
        self.ab = ABService(ctx)
        self.evidence = EvidenceService(ctx)
        self.templates = TemplateService(ctx, self.suites)


CORPUS: web.AppKey[Services] = web.AppKey("corpus", Services)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=encode(data), content_type="application/json")


def _svc(request: web.Request) -> Services:
    return request.config_dict[CORPUS]


async def _read(request: web.Request, limit: int) -> bytes:
    """The body, read here up to ``limit`` bytes (the hosting app's ``client_max_size`` is
    meant for small JSON); 413 past it. Compressed bodies are refused as the admin API does."""
    if request.headers.get("Content-Encoding", "identity").strip().lower() not in ("", "identity"):
        await read_body(request)  # raises UnsupportedEncoding in the API's shape
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(f"the body is larger than {limit:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def _query(request: web.Request, allowed: tuple[str, ...]) -> dict[str, str]:
    for name in request.query:
        if name not in allowed:
            raise BadRequest(f"unknown query parameter {name!r}; this route takes {', '.join(allowed) or 'none'}",
                             field=name)
        if len(request.query.getall(name)) > 1:
            raise BadRequest(f"give {name} once", field=name)
    return dict(request.query)


def _int(value: str | None, name: str, *, default: int, low: int, high: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{name} must be an integer", field=name) from None
    if not low <= number <= high:
        raise BadRequest(f"{name} must be {low} to {high:,}", field=name)
    return number


def _format(given: str | None, content_type: str, filename: str | None = None) -> str:
    if given is not None:
        if given not in FORMATS:
            raise BadRequest(f"format must be one of {', '.join(FORMATS)}, got {given!r}", field="format")
        return given
    if filename:
        for fmt in FORMATS:
            if filename.lower().endswith(f".{fmt}"):
                return fmt
    if content_type in ("text/csv", "application/csv"):
        return "csv"
    if content_type in ("application/x-ndjson", "application/jsonl", "application/x-jsonlines", "application/jsonlines"):
        return "jsonl"
    raise BadRequest("say which format the file is: ?format=jsonl or ?format=csv (or a text/csv or "
                     "application/x-ndjson content type)", field="format")


async def _upload(request: web.Request) -> tuple[dict[str, str], bytes, str]:
    """(fields, file bytes, format) of an import, raw or multipart."""
    if request.content_type == "multipart/form-data":
        fields: dict[str, str] = {}
        data: bytes | None = None
        filename: str | None = None
        file_type = ""
        reader = await request.multipart()
        size = 0
        while True:
            part = await reader.next()
            if part is None:
                break
            if not isinstance(part, BodyPartReader) or part.name is None:
                raise BadRequest("multipart parts must be named fields", field="file")
            chunks: list[bytes] = []
            while chunk := await part.read_chunk(1 << 16):
                size += len(chunk)
                if size > MAX_IMPORT_BYTES:
                    raise BodyTooLarge(f"the body is larger than {MAX_IMPORT_BYTES:,} bytes")
                chunks.append(chunk)
            if part.name == "file":
                data, filename = b"".join(chunks), part.filename
                file_type = part.headers.get("Content-Type", "").split(";")[0].strip().lower()
            elif part.name in ("team", "name", "format", "base_version"):
                fields[part.name] = b"".join(chunks).decode("utf-8", "replace")
            else:
                raise BadRequest(f"unknown multipart field {part.name!r}; fields are team, name, format, file",
                                 field=part.name)
        if data is None:
            raise BadRequest("the multipart body has no file part", field="file")
        return fields, data, _format(fields.get("format"), file_type, filename)
    fields = _query(request, ("team", "name", "format", "base_version"))
    data = await _read(request, MAX_IMPORT_BYTES)
    return fields, data, _format(fields.get("format"), request.content_type)


def _name(fields: dict[str, str], key: str) -> str:
    value = fields.get(key)
    if not value:
        raise BadRequest(f"{key} is required", field=key)
    return value


async def create_dataset(request: web.Request) -> web.Response:
    fields, data, fmt = await _upload(request)
    view = await _svc(request).datasets.create(principal_of(request), _name(fields, "team"), _name(fields, "name"),
                                              fmt, data)
    return _json(view, 201)


async def list_datasets(request: web.Request) -> web.Response:
    team = _query(request, ("team",)).get("team")
    return _json({"datasets": await _svc(request).datasets.listing(principal_of(request), team)})


async def seed_dataset(request: web.Request) -> web.Response:
    body: SeedIn = decode(await _read(request, MAX_JSON_BYTES), SeedIn)
    return _json(await _svc(request).datasets.seed(principal_of(request), body), 201)


async def get_dataset(request: web.Request) -> web.Response:
    return _json(await _svc(request).datasets.get(principal_of(request), request.match_info["dataset_id"]))


async def list_versions(request: web.Request) -> web.Response:
    versions = await _svc(request).datasets.versions(principal_of(request), request.match_info["dataset_id"])
    return _json({"versions": versions})


async def reimport(request: web.Request) -> web.Response:
    fields, data, fmt = await _upload(request)
    base = fields.get("base_version")
    view = await _svc(request).datasets.reimport(
        principal_of(request), request.match_info["dataset_id"], fmt, data,
        None if base is None else _int(base, "base_version", default=1, low=1, high=1 << 40))
    return _json(view, 201)


async def version_items(request: web.Request) -> web.Response:
    query = _query(request, ("offset", "limit"))
    version = _int(request.match_info["version"], "version", default=1, low=1, high=1 << 40)
    answer = await _svc(request).datasets.items(
        principal_of(request), request.match_info["dataset_id"], version,
        offset=_int(query.get("offset"), "offset", default=0, low=0, high=1 << 40),
        limit=_int(query.get("limit"), "limit", default=1000, low=1, high=MAX_PAGE))
    return _json(answer)


async def edit_dataset(request: web.Request) -> web.Response:
    body: EditIn = decode(await _read(request, MAX_IMPORT_BYTES), EditIn)
    return _json(await _svc(request).datasets.edit(principal_of(request), request.match_info["dataset_id"], body), 201)


async def save_slice(request: web.Request) -> web.Response:
    body: SliceIn = decode(await _read(request, MAX_JSON_BYTES), SliceIn)
    view = await _svc(request).datasets.save_slice(principal_of(request), request.match_info["dataset_id"], body)
    return _json(view, 201)


async def list_slices(request: web.Request) -> web.Response:
    slices = await _svc(request).datasets.slices(principal_of(request), request.match_info["dataset_id"])
    return _json({"slices": slices})


async def create_suite(request: web.Request) -> web.Response:
    body: SuiteIn = decode(await _read(request, MAX_JSON_BYTES), SuiteIn)
    return _json(await _svc(request).suites.create(principal_of(request), body), 201)


async def list_suites(request: web.Request) -> web.Response:
    team = _query(request, ("team",)).get("team")
    return _json({"suites": await _svc(request).suites.listing(principal_of(request), team)})


async def get_suite(request: web.Request) -> web.Response:
    return _json(await _svc(request).suites.get(principal_of(request), request.match_info["suite_id"]))


async def readiness(request: web.Request) -> web.Response:
    body: ComparisonIn = decode(await _read(request, MAX_JSON_BYTES), ComparisonIn)
    return _json(await _svc(request).comparisons.readiness(principal_of(request), body))


async def start_comparison(request: web.Request) -> web.Response:
    key = check_idempotency_key(request.headers.getall(IDEMPOTENCY_KEY, []))
    if key is None:
        raise BadRequest(f"a start needs an {IDEMPOTENCY_KEY} header (retry with the same one after a lost answer)",
                         field=IDEMPOTENCY_KEY)
    body: ComparisonIn = decode(await _read(request, MAX_JSON_BYTES), ComparisonIn)
    view, created = await _svc(request).comparisons.start(principal_of(request), body, key)
    return _json(view, 201 if created else 200)


async def list_comparisons(request: web.Request) -> web.Response:
    query = _query(request, ("suite_id", "team"))
    comparisons = await _svc(request).comparisons.listing(principal_of(request), query.get("team"),
                                                          query.get("suite_id"))
    return _json({"comparisons": comparisons})


async def get_comparison(request: web.Request) -> web.Response:
    return _json(await _svc(request).comparisons.get(principal_of(request), request.match_info["comparison_id"]))


async def comparison_attempts(request: web.Request) -> web.Response:
    return _json(await _svc(request).runs.attempts(principal_of(request), request.match_info["comparison_id"]))


async def retry_attempt(request: web.Request) -> web.Response:
    body: RetryIn = decode(await _read(request, MAX_JSON_BYTES), RetryIn)
    view, created = await _svc(request).runs.retry(principal_of(request), request.match_info["comparison_id"], body)
    return _json(view, 201 if created else 200)


async def cancel_arm(request: web.Request) -> web.Response:
    return _json(await _svc(request).runs.cancel_arm(principal_of(request), request.match_info["comparison_id"],
                                                     request.match_info["arm"]))


async def promote_comparison(request: web.Request) -> web.Response:
    await _svc(request).runs.promote(principal_of(request), request.match_info["comparison_id"])
    raise AssertionError("unreachable: corpus evidence is always refused")


async def create_ab(request: web.Request) -> web.Response:
    raw = await _read(request, MAX_JSON_BYTES)
    try:
        body = json.loads(raw) if raw else None
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}", field="$") from exc
    key = check_idempotency_key(request.headers.getall(IDEMPOTENCY_KEY, []))
    view, created = await _svc(request).ab.create(principal_of(request), body, key)
    return _json(view, 201 if created else 200)


async def compare_evidence_route(request: web.Request) -> web.Response:
    q = request.query
    return _json(await _svc(request).evidence.compare(principal_of(request), q.get("baseline"), q.get("candidate")))


async def list_ab(request: web.Request) -> web.Response:
    query = _query(request, ("suite_id",))
    return _json({"comparisons": await _svc(request).ab.listing(principal_of(request), query.get("suite_id"))})


async def get_ab(request: web.Request) -> web.Response:
    return _json(await _svc(request).ab.get(principal_of(request), request.match_info["comparison_id"]))


def _request_key(request: web.Request, what: str) -> str:
    key = check_idempotency_key(request.headers.getall(IDEMPOTENCY_KEY, []))
    if key is None:
        raise BadRequest(f"{what} needs an {IDEMPOTENCY_KEY} header (retry with the same one after a lost answer)",
                         field=IDEMPOTENCY_KEY)
    return key


async def archive_comparison(request: web.Request) -> web.Response:
    return _json(await _svc(request).templates.archive(principal_of(request), request.match_info["comparison_id"]))


async def create_template(request: web.Request) -> web.Response:
    key = _request_key(request, "a template save")
    body: TemplateIn = decode(await _read(request, MAX_JSON_BYTES), TemplateIn)
    view, created = await _svc(request).templates.create(principal_of(request), body, key)
    return _json(view, 201 if created else 200)


async def save_template_version(request: web.Request) -> web.Response:
    key = _request_key(request, "a template save")
    body: TemplateVersionIn = decode(await _read(request, MAX_JSON_BYTES), TemplateVersionIn)
    view, created = await _svc(request).templates.save_version(principal_of(request),
                                                               request.match_info["template_id"], body, key)
    return _json(view, 201 if created else 200)


async def list_templates(request: web.Request) -> web.Response:
    team = _query(request, ("team",)).get("team")
    return _json({"templates": await _svc(request).templates.listing(principal_of(request), team)})


async def get_template(request: web.Request) -> web.Response:
    return _json(await _svc(request).templates.get(principal_of(request), request.match_info["template_id"]))


def corpus_routes(prefix: str = "/v1") -> list[tuple[str, str, Handler]]:
    """(method, path, handler) of every corpus route; the handlers read :data:`CORPUS` from
    their app (or a parent's)."""
    p = prefix
    return [
        ("POST", f"{p}/datasets", create_dataset),
        ("GET", f"{p}/datasets", list_datasets),
        ("POST", f"{p}/datasets/seed", seed_dataset),
        ("GET", f"{p}/datasets/{{dataset_id}}", get_dataset),
        ("GET", f"{p}/datasets/{{dataset_id}}/versions", list_versions),
        ("POST", f"{p}/datasets/{{dataset_id}}/versions", reimport),
        ("GET", f"{p}/datasets/{{dataset_id}}/versions/{{version}}/items", version_items),
        ("POST", f"{p}/datasets/{{dataset_id}}/edits", edit_dataset),
        ("POST", f"{p}/datasets/{{dataset_id}}/slices", save_slice),
        ("GET", f"{p}/datasets/{{dataset_id}}/slices", list_slices),
        ("POST", f"{p}/suites", create_suite),
        ("GET", f"{p}/suites", list_suites),
        ("GET", f"{p}/suites/{{suite_id}}", get_suite),
        ("POST", f"{p}/comparisons/readiness", readiness),
        ("POST", f"{p}/comparisons", start_comparison),
        ("GET", f"{p}/comparisons", list_comparisons),
        ("GET", f"{p}/comparisons/{{comparison_id}}", get_comparison),
        ("GET", f"{p}/comparisons/{{comparison_id}}/attempts", comparison_attempts),
        ("POST", f"{p}/comparisons/{{comparison_id}}/retry", retry_attempt),
        ("POST", f"{p}/comparisons/{{comparison_id}}/arms/{{arm}}/cancel", cancel_arm),
        ("POST", f"{p}/comparisons/{{comparison_id}}/promote", promote_comparison),
        ("POST", f"{p}/evaluations/comparisons", create_ab),
        ("GET", f"{p}/evaluations/comparisons", list_ab),
        ("GET", f"{p}/evaluations/comparisons/{{comparison_id}}", get_ab),
        ("GET", f"{p}/evaluations/evidence", compare_evidence_route),
        ("POST", f"{p}/comparisons/{{comparison_id}}/archive", archive_comparison),
        ("POST", f"{p}/comparison-templates", create_template),
        ("GET", f"{p}/comparison-templates", list_templates),
        ("GET", f"{p}/comparison-templates/{{template_id}}", get_template),
        ("POST", f"{p}/comparison-templates/{{template_id}}/versions", save_template_version),
    ]


def install(app: web.Application, ctx: CorpusContext, *, prefix: str = "/v1") -> None:
    """Add the corpus routes to ``app``, whose middlewares set the principal and map errors."""
    app[CORPUS] = Services(ctx)
    for method, path, handler in corpus_routes(prefix):
        app.router.add_route(method, path, handler)


def corpus_app(
    ctx: CorpusContext, verifier: Verifier | None, *, revocations: Revocations | None = None,
    request_timeout_s: float = 30.0, prefix: str = "/v1",
) -> web.Application:
    """The corpus routes behind the admin API's middlewares. ``verifier`` None: authentication
    off (every request is the local-development principal — loopback only)."""
    app = web.Application(
        middlewares=[authn_middleware(verifier, revocations), errors_middleware, store_guard(request_timeout_s)],
        handler_args={"auto_decompress": False},
    )
    install(app, ctx, prefix=prefix)
    return app
