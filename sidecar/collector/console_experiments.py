"""The control plane's console: Experiments (comparison groups), over the corpus API's services.

- **List**: every group the principal sees, with its status, arms and primary result in the
  corpus table's words only (*Candidate ahead*, *Parity*, *Candidate behind*, *Inconclusive*).
- **New**: *Pin a suite* (a dataset version, optionally a slice version, and its graders, each
  pinned to its exact version: ``POST /v1/suites``), then the experiment: its suite, 2-5 arms
  (name, model, optional system prompt), repetitions, primary metric, optional spend cap and
  tolerance. *Check readiness* is the API's read-only readiness (no provider call): each arm's
  resolved model and route, prompt hash and settings, what differs beyond the model, the
  planned invocations and the admission, the problems that refuse a start. *Back* keeps every
  field; *Start experiment* starts with the readiness token and the form's request key (the
  API's ``Idempotency-Key``: a lost answer retried is the same group).
- **Detail**: progress (refreshed while it runs), the six summary cards (generation
  reliability, grading completion, per-grader coverage, paired quality, full-run spend, paired
  completed-case latency), the coverage tables, per-case means and ranges, and the
  configuration facts and differences.

Nothing here decides anything: the figures are the API's (``GET /v1/comparisons/{id}`` and
``…/attempts``), laid out; per-case means and ranges and the latency card are read from the
attempts (repetitions of a case collapse to its mean first).
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from typing import Any, Sequence

import msgspec
from aiohttp import web

from policies.roles import Principal, decide
from sidecar.collector.corpus.api import Services
from sidecar.collector.corpus.comparisons import ComparisonIn
from sidecar.collector.corpus.pages import CORPUS_PAGES
from sidecar.collector.corpus.suites import SuiteIn
from sidecar.collector.operator_views import corpus_words
from sidecar.console.app import CONSOLE_PREFIX, form, principal, redirect, render
from sidecar.errors import ApiError, BadRequest
from sidecar.ingest.wire import split_path
from sidecar.store.errors import IdempotencyConflict

MAX_ARMS = 5
DEFAULT_METRICS = '[{"name": "pref", "kind": "paired_judge"}]'
ENDED = ("completed", "cancelled", "cap_reached", "failed")


def _svc(request: web.Request) -> Services:
    return request.config_dict[CORPUS_PAGES].services


def _writes(p: Principal, team: str) -> bool:
    return decide(p, team, "write") == "allow"


# -- list ------------------------------------------------------------------------------------


async def experiments_page(request: web.Request) -> web.Response:
    p = principal(request)
    svc = _svc(request)
    suites = {s["id"]: s for s in await svc.suites.listing(p, None)}
    rows = []
    for listed in await svc.comparisons.listing(p, None, None):
        if listed["kind"] != "group":
            continue
        g = await svc.comparisons.get(p, listed["id"])
        run = g.get("run") or {}
        rows.append({"g": g, "suite": suites.get(g["suite_id"], {}), "progress": run.get("progress"),
                     "results": [(r["arm"], corpus_words(r["code"])) for r in run.get("primary") or []]})
    writable = sorted({s["team"] for s in suites.values() if _writes(p, s["team"])})
    datasets = await svc.datasets.listing(p, None)
    may_create = p.is_super or bool(writable) or any(_writes(p, d["team"]) for d in datasets)
    return render(request, "experiments.html", nav="experiments", rows=rows, may_create=may_create)


# -- new: suite, form, readiness, start --------------------------------------------------------


def _blank_values() -> dict[str, str]:
    values = {"repetitions": "1", "primary_metric": "pref", "arm0_name": "baseline", "arm1_name": "candidate",
              "metrics": DEFAULT_METRICS, "dataset_version": "1"}
    return values


async def _new_form(request: web.Request, *, values: dict[str, str], error: ApiError | None = None,
                    suite_error: ApiError | None = None, status: int = 200) -> web.Response:
    p = principal(request)
    svc = _svc(request)
    suites = await svc.suites.listing(p, None)
    datasets = [d for d in await svc.datasets.listing(p, None) if _writes(p, d["team"])]
    return render(request, "experiment_new.html", status=status, nav="experiments", values=values, suites=suites,
                  datasets=datasets, error=error, suite_error=suite_error, arms=range(MAX_ARMS),
                  bad_field=None if error is None else error.field,
                  request_key=values.get("request_key") or secrets.token_urlsafe(16))


async def new_page(request: web.Request) -> web.Response:
    values = _blank_values()
    values.update({k: v for k, v in request.query.items() if isinstance(v, str)})
    return await _new_form(request, values=values)


async def edit_page(request: web.Request) -> web.Response:
    """*Back* from readiness: the form again with every field as it was."""
    return await _new_form(request, values=dict(form(request)))


def suite_body(fields: dict[str, str]) -> SuiteIn:
    body: dict[str, Any] = {"name": fields.get("suite_name", "").strip(),
                            "dataset_id": fields.get("dataset_id", "").strip()}
    try:
        body["dataset_version"] = int(fields.get("dataset_version", "").strip() or "0")
    except ValueError:
        raise BadRequest("dataset version is a whole number", field="$.dataset_version") from None
    slice_name = fields.get("slice_name", "").strip()
    if slice_name:
        try:
            body["slice"] = {"name": slice_name, "version": int(fields.get("slice_version", "").strip() or "0")}
        except ValueError:
            raise BadRequest("slice version is a whole number", field="$.slice.version") from None
    try:
        body["metrics"] = msgspec.json.decode(fields.get("metrics", "").strip() or "null")
    except msgspec.DecodeError as exc:
        raise BadRequest(f"graders are not JSON: {exc}", field="$.metrics") from None
    suite: SuiteIn = _convert(body, SuiteIn)
    return suite


def _convert(body: dict[str, Any], kind: type[Any]) -> Any:
    try:
        return msgspec.convert(body, kind)
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        raise BadRequest(message, field=path) from None


async def create_suite(request: web.Request) -> web.Response:
    """*Pin a suite*: ``POST /v1/suites`` from the form, then the form with it chosen."""
    fields = dict(form(request))
    try:
        view = await _svc(request).suites.create(principal(request), suite_body(fields))
    except ApiError as exc:
        if exc.status in (401, 403):
            raise
        return await _new_form(request, values=fields, suite_error=exc, status=exc.status)
    fields["suite_id"] = view["id"]
    metrics = [m for m in view["metrics"] if m.get("direction") != "categorical"]
    if metrics and fields.get("primary_metric") not in {m["name"] for m in metrics}:
        fields["primary_metric"] = metrics[0]["name"]
    return await _new_form(request, values=fields)


def comparison_body(fields: dict[str, str], *, token: bool = False) -> dict[str, Any]:
    """The API's body from the form's fields: blank arm rows are left out."""
    arms = []
    for n in range(MAX_ARMS):
        name, model = fields.get(f"arm{n}_name", "").strip(), fields.get(f"arm{n}_model", "").strip()
        prompt = fields.get(f"arm{n}_prompt", "").strip()
        if not model and not prompt and (not name or n >= 2):
            continue
        arm: dict[str, Any] = {"name": name, "model": model}
        if prompt:
            arm["system_prompt"] = prompt
        arms.append(arm)
    body: dict[str, Any] = {"suite_id": fields.get("suite_id", "").strip(), "arms": arms,
                            "primary_metric": fields.get("primary_metric", "").strip()}
    for name, cast in (("repetitions", int), ("spend_cap_usd", float), ("tolerance", float)):
        text = fields.get(name, "").strip()
        if text:
            try:
                body[name] = cast(text)
            except ValueError:
                raise BadRequest(f"{name.replace('_', ' ')} must be a number", field=f"$.{name}") from None
    if token:
        body["readiness_token"] = fields.get("readiness_token", "")
    return body


async def readiness_page(request: web.Request, *, error: ApiError | None = None, status: int = 200) -> web.Response:
    """*Check readiness*: the API's read-only answer, laid out, with Back and Start."""
    fields = dict(form(request))
    try:
        body = _convert(comparison_body(fields), ComparisonIn)
        answer = await _svc(request).comparisons.readiness(principal(request), body)
    except ApiError as exc:
        if exc.status in (401, 403):
            raise
        return await _new_form(request, values=fields, error=exc, status=exc.status)
    fields["readiness_token"] = answer["readiness_token"]
    fields.setdefault("request_key", secrets.token_urlsafe(16))
    return render(request, "experiment_ready.html", status=status, nav="experiments", r=answer, values=fields,
                  error=error, may_start=not answer["problems"] and answer["admission"]["admitted"])


async def start(request: web.Request) -> web.Response:
    """*Start experiment*: ``POST /v1/comparisons`` with the token and the form's request key."""
    fields = dict(form(request))
    key = fields.get("request_key") or secrets.token_urlsafe(16)
    try:
        body = _convert(comparison_body(fields, token=True), ComparisonIn)
        view, _created = await _svc(request).comparisons.start(principal(request), body, key)
    except IdempotencyConflict:
        request_fields = dict(fields, request_key="")
        return await _new_form(request, values=request_fields, status=409, error=BadRequest(
            "this form was already submitted with other values; check them and start again"))
    except ApiError as exc:
        if exc.status in (401, 403):
            raise
        return await readiness_page(request, error=exc, status=exc.status)
    wake = _svc(request).ctx.on_change
    if wake is not None:
        wake()
    return redirect(f"{CONSOLE_PREFIX}/experiments/{view['id']}")


# -- detail ----------------------------------------------------------------------------------


def case_table(attempts: Sequence[dict[str, Any]], arms: Sequence[str], metric: str) -> list[dict[str, Any]]:
    """Per case (item revision): each arm's mean of its repetitions' scored values on ``metric``,
    their range and count; only completed attempts, the latest of each repetition."""
    latest: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for a in attempts:
        k = (a["arm"], a["item_id"], a["revision_id"], a["repetition"])
        if k not in latest or latest[k]["attempt"] < a["attempt"]:
            latest[k] = a
    values: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (arm, item, revision, _rep), a in latest.items():
        if a["status"] != "completed":
            continue
        for s in a["scores"]:
            if s["metric"] == metric and s["status"] == "scored" and s["value"] is not None:
                values[(item, revision)][arm].append(float(s["value"]))
    rows = []
    for (item, revision), per_arm in sorted(values.items()):
        cells = []
        for arm in arms:
            v = per_arm.get(arm, [])
            cells.append(None if not v else {"mean": sum(v) / len(v), "low": min(v), "high": max(v), "n": len(v)})
        rows.append({"item_id": item, "revision_id": revision, "cells": cells})
    return rows


def paired_latency(attempts: Sequence[dict[str, Any]], baseline: str, arm: str) -> dict[str, Any]:
    """Equal-weight case means of paired completed generations' measured latency (ms)."""
    per: dict[str, dict[tuple[str, str], list[float]]] = {baseline: defaultdict(list), arm: defaultdict(list)}
    done: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for a in attempts:
        k = (a["arm"], a["item_id"], a["revision_id"], a["repetition"])
        if k not in done or done[k]["attempt"] < a["attempt"]:
            done[k] = a
    for (who, item, revision, rep), a in done.items():
        if who not in per or a["status"] != "completed" or a["latency_ms"] is None:
            continue
        other = done.get((arm if who == baseline else baseline, item, revision, rep))
        if other is None or other["status"] != "completed" or other["latency_ms"] is None:
            continue
        per[who][(item, revision)].append(float(a["latency_ms"]))
    cases = sorted(set(per[baseline]) & set(per[arm]))

    def mean(who: str) -> float | None:
        if not cases:
            return None
        return sum(sum(per[who][c]) / len(per[who][c]) for c in cases) / len(cases)

    return {"cases": len(cases), "baseline_ms": mean(baseline), "arm_ms": mean(arm)}


async def _detail(request: web.Request) -> dict[str, Any]:
    p = principal(request)
    svc = _svc(request)
    g = await svc.comparisons.get(p, request.match_info["comparison_id"])
    if g["kind"] != "group":
        raise BadRequest(f"{g['id']} is an A/B comparison: it is on the Comparisons screen", field="comparison_id")
    run = g.get("run")
    attempts = (await svc.runs.attempts(p, g["id"]))["attempts"] if run is not None else []
    arm_names = [a["name"] for a in g["arms"]]
    suite = await svc.suites.get(p, g["suite_id"])
    metrics = [m for m in suite["metrics"] if m.get("direction") != "categorical"
               and m["kind"] not in ("cost",)]
    cases = {m["name"]: case_table(attempts, arm_names, m["name"]) for m in metrics}
    latency = [dict(arm=a, **paired_latency(attempts, arm_names[0], a)) for a in arm_names[1:]]
    results = []
    for r in (run or {}).get("results", []):
        results.append({**r, "words": None if r.get("code") is None and r["direction"] == "categorical"
                        else corpus_words(r.get("code"))})
    return {"g": g, "run": run, "suite": suite, "results": results, "cases": cases, "latency": latency,
            "arm_names": arm_names, "live": g["status"] not in ENDED and (run is None or run.get("ended_at") is None)}


async def experiment_page(request: web.Request) -> web.Response:
    return render(request, "experiment.html", nav="experiments", **await _detail(request))


async def experiment_fragment(request: web.Request) -> web.Response:
    return render(request, "_experiment_body.html", **await _detail(request))


def add_routes(app: web.Application) -> None:
    router = app.router
    router.add_get("/experiments", experiments_page)
    router.add_get("/experiments/new", new_page)
    router.add_post("/experiments/edit", edit_page)
    router.add_post("/experiments/suites", create_suite)
    router.add_post("/experiments/readiness", readiness_page)
    router.add_post("/experiments", start)
    router.add_get("/experiments/{comparison_id}", experiment_page)
    router.add_get("/experiments/{comparison_id}/fragment", experiment_fragment)


__all__ = ["add_routes", "case_table", "comparison_body", "paired_latency"]
