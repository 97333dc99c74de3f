"""The A/B comparisons API (issue 13, item 6): a baseline and a candidate scored on one suite.

::

    POST /v1/evaluations/comparisons        {"suite_id", "baseline": {"type", "ref", "version"},
                                             "candidate": {…}, "tolerance": 0.05, "outputs": {…}}
    GET  /v1/evaluations/comparisons        ?suite_id=  (the 200 most recent)
    GET  /v1/evaluations/comparisons/{id}

An A/B comparison is a two-arm comparison group (arms ``baseline`` and ``candidate``, one
repetition, the suite's metrics) run by the same runner (:mod:`sidecar.collector.corpus.runner`):
corpus evidence, spend capped at the plan's worst case, never promotable. What a side calls —
a model alias at a pinned ``version``, a registered agent, a prompt template rendered over each
item and sent to a model — and how ``outputs`` are given (a list in item order or a map by
item id; empty: the side runs) is :mod:`sidecar.collector.corpus.ab_sides`. Given outputs are
scored instead of calling that side's target (no generation call; model graders still grade).
The view's ``pinned`` shows what each side ran (provider, upstream model, cost basis, template hash).

Each per-metric row: ``metric``, ``baseline``, ``candidate`` (each side's mean score; for the
paired judge the win rates, parity 0.5 against the candidate's), ``delta``, ``comparator``
(``higher_is_better`` / ``lower_is_better``) and ``threshold`` (the tolerance on the metric's
scale, :func:`policies.corpus_verdict.band_for`), ``paired_items``, ``interval`` (candidate -
baseline over the paired items, at ``interval_level`` = 1 - 0.05 / m for m numeric metrics, so the
verdict keeps a 5% family-wise error; :func:`policies.corpus_verdict.corpus_interval`: the
expanded case-cluster bootstrap, none below 20 items, never of zero width), ``interval_note``
and the metric's ``code``. The verdict (:func:`policies.corpus_verdict.ab_verdict`) is given
once the run has ended, on the intervals: ``regression`` (a metric's interval below
-threshold), ``equivalent`` (every interval within +-threshold), ``candidate_better`` (every
metric better by more or within, one better by more), or ``inconclusive`` (the intervals do not
settle it, fewer than 20 items, a run errored — a generation failed or was left indeterminate,
or the cap ended it — or a metric has no score on a side).
Categorical metrics have no numeric winner and are not rows; a metric not applicable to a
side at all (latency of given outputs) is listed with ``applicable: false`` and left out.

Errors: ``422 comparison_invalid`` naming the field — a side without ``ref``, a bad
``type``, equal sides, ``tolerance`` outside [0, 1], ``outputs`` not an object (or a side's
neither a list nor a map of texts, or a list whose length is not the number of items), an
unknown field, a version that cannot be pinned, an unregistered agent, a prompt side without
template or model (and without outputs); ``404 not_found`` for an unknown suite. Roles:
writers (``tenant_admin``, ``developer``, ``security_officer``) create; readers add
``auditor``, ``viewer``, ``finops``; ``platform_admin`` passes.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from typing import Any, Mapping

from policies.bootstrap import Interval, bootstrap_identity
from policies.corpus_verdict import ABRow, ab_verdict, band_for, corpus_interval, delta_bounds
from policies.experiments import admit, plan_arm
from policies.graders import MODEL_GRADERS, canonical, content_hash
from policies.roles import Principal
from sidecar.collector.corpus.ab_sides import (
    SIDES,
    check_outputs,
    check_pair,
    check_side,
    outputs_by_item,
    pinned,
    side_target,
)
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.datasets import require_write
from sidecar.collector.corpus.errors import ComparisonInvalid, Unprocessable
from sidecar.collector.corpus.plan import Arm, arm_targets, plan_worst_case, suite_items
from sidecar.collector.corpus.runs import latest_attempts
from sidecar.errors import NotFound
from sidecar.services.access import visible
from sidecar.collector.store.corpus_records import ComparisonRecord

_FIELDS = ("suite_id", "baseline", "candidate", "tolerance", "outputs")
DEFAULT_TOLERANCE = 0.05
LISTED = 200


def _invalid(message: str, field: str) -> ComparisonInvalid:
    return ComparisonInvalid(message, field=field)


def check_body(body: Any) -> dict[str, Any]:
    """The request, checked: every refusal is ``comparison_invalid`` naming its field
    (the sides and outputs: :mod:`sidecar.collector.corpus.ab_sides`)."""
    if not isinstance(body, dict):
        raise _invalid("the body must be a JSON object", "$")
    for name in body:
        if name not in _FIELDS:
            raise _invalid(f"a comparison takes {', '.join(_FIELDS)}; {name!r} is unknown", f"$.{name}")
    suite_id = body.get("suite_id")
    if not isinstance(suite_id, str) or not suite_id:
        raise _invalid("suite_id is required", "$.suite_id")
    sides = {side: check_side(body, side) for side in SIDES}
    tolerance = body.get("tolerance", DEFAULT_TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0.0 <= tolerance <= 1.0:
        raise _invalid(f"tolerance must be a number in [0, 1], got {tolerance!r}", "$.tolerance")
    given = check_outputs(body.get("outputs"))
    check_pair(sides, given)
    return {"suite_id": suite_id, "sides": sides, "tolerance": float(tolerance), "outputs": given}


class ABService:
    def __init__(self, ctx: CorpusContext) -> None:
        self._ctx = ctx

    async def create(self, principal: Principal, raw: Any, request_key: str | None) -> tuple[dict[str, Any], bool]:
        body = check_body(raw)
        store = self._ctx.store
        suite = await store.get_suite(body["suite_id"])
        if suite is None or not principal.sees(suite.team):
            raise NotFound(f"no suite {body['suite_id']!r}", field="$.suite_id")
        require_write(principal, suite.team, "comparisons")
        body_hash = content_hash(raw)
        if request_key is not None:
            found = await store.find_request_key(request_key)
            if found is not None and found[0] == body_hash and principal.sees(found[1].team):
                return await self.view(found[1]), False
        metrics, items = await suite_items(store, suite.id)
        numeric = [m for m in metrics if m["direction"] != "categorical"]
        arms_spec: list[dict[str, Any]] = []
        arms: list[Arm] = []
        readiness_arms: list[dict[str, Any]] = []
        for side in SIDES:
            s = body["sides"][side]
            answers = body["outputs"].get(side)
            outputs = None if answers is None else outputs_by_item(side, answers, items)
            kind, name, version, goes_to = "model", s["ref"], s["version"], None
            if outputs is None:
                kind, name, version, goes_to = side_target(side, s, self._ctx.targets, self._ctx.resolve)
            template = s.get("template") if outputs is None else None
            settings = {"max_tokens": self._ctx.defaults.candidate_max_tokens}
            arms_spec.append({"name": side, "model": name, "system_prompt": None, "params": {},
                              "outputs": outputs, "target_kind": kind, "version": version, "template": template,
                              **{f"side_{k}": v for k, v in s.items() if k != "template"}})
            arms.append(Arm(side, name, None, settings, outputs, kind, version, template))
            readiness_arms.append({"name": side, "settings": settings,
                                   "pinned": None if goes_to is None else pinned(goes_to, s)})
        model_graders = sum(1 for m in metrics if m["kind"] in MODEL_GRADERS)
        admission = admit([plan_arm(side, items=len(items), repetitions=1, model_graders=model_graders)
                           for side in SIDES])
        if not admission.admitted:
            raise Unprocessable(f"the comparison plans {admission.group_total:,} invocations; an arm may plan at most "
                                f"{admission.limit:,}", field="$.suite_id", code="comparison_invocation_limit")
        try:
            worst = plan_worst_case(arms, metrics, items, 1, self._ctx.resolve,
                                    arm_targets(self._ctx.targets, self._ctx.resolve))
        except LookupError as exc:
            raise Unprocessable(str(exc), field="$.suite_id", code="model_unresolved") from exc
        if worst is None:
            raise Unprocessable("a judge model of the suite has no list price: the spend could not be capped",
                                field="$.suite_id", code="spend_unbounded")
        primary = numeric[0]["name"] if numeric else metrics[0]["name"]
        spec = {"ab": {"sides": body["sides"], "tolerance": body["tolerance"]}, "suite_id": suite.id,
                "arms": arms_spec, "repetitions": 1, "primary_metric": primary, "tolerance": body["tolerance"]}
        readiness = {"arms": readiness_arms, "spend": {"worst_case_micros": worst, "cap_micros": worst,
                                                       "basis": "list_price"}}
        record = ComparisonRecord(f"cmp_{uuid.uuid4().hex}", suite.team, suite.id, canonical(spec),
                                  canonical(readiness), content_hash(readiness), admission.group_total, "admitted",
                                  self._ctx.clock(), principal.subject)
        stored, created = await store.create_comparison(record, request_key=request_key or f"ab:{uuid.uuid4().hex}",
                                                        body_hash=body_hash)
        if created and self._ctx.on_change is not None:
            self._ctx.on_change()
        return await self.view(stored), created

    async def get(self, principal: Principal, comparison_id: str) -> dict[str, Any]:
        record = await self._ctx.store.get_comparison(comparison_id)
        if record is None or not principal.sees(record.team) or "ab" not in json.loads(record.spec):
            raise NotFound(f"no comparison {comparison_id!r}")
        return await self.view(record)

    async def listing(self, principal: Principal, suite_id: str | None) -> list[dict[str, Any]]:
        records = await self._ctx.store.list_comparisons(teams=visible(principal, None), suite_id=suite_id,
                                                         limit=LISTED * 5)
        out = []
        for r in records:
            if "ab" in json.loads(r.spec):
                out.append(await self.view(r, rows=False))
            if len(out) == LISTED:
                break
        return out

    async def view(self, record: ComparisonRecord, *, rows: bool = True) -> dict[str, Any]:
        spec = json.loads(record.spec)
        ab = spec["ab"]
        final = record.status in ("completed", "cap_reached")
        out: dict[str, Any] = {
            "id": record.id, "suite_id": record.suite_id, "team": record.team, "evidence": "corpus",
            "baseline": ab["sides"]["baseline"], "candidate": ab["sides"]["candidate"],
            "baseline_run_id": f"{record.id}.baseline", "candidate_run_id": f"{record.id}.candidate",
            "tolerance": ab["tolerance"], "status": record.status, "created_at": record.created_at,
            "created_by": record.created_by,
            # What each side ran: its provider and upstream model (a version pinned), an agent's cost basis,
            # a prompt's template hash; None for a side scored from given outputs.
            "pinned": {a["name"]: a.get("pinned") for a in json.loads(record.readiness)["arms"]},
        }
        if not rows:
            return out
        store = self._ctx.store
        metrics, _ = await suite_items(store, record.suite_id)
        latest = latest_attempts(await store.run_attempts(record.id))
        scores = await store.run_scores(record.id)
        errored = record.status == "cap_reached" or any(a.status in ("failed", "invocation_indeterminate")
                                                        for a in latest.values())
        table, verdict_rows = _rows(metrics, latest, scores, ab["tolerance"], record.id)
        out["metrics"] = table
        out["verdict"] = ab_verdict(verdict_rows, errored=errored) if final else None
        return out


def _rows(metrics: list[Mapping[str, Any]], latest: Mapping[Any, Any], scores: list[Any], tolerance: float,
          identity: str) -> tuple[list[dict[str, Any]], list[ABRow]]:
    arm_of = {a.id: a.arm for a in latest.values() if a.status == "completed"}
    item_of = {a.id: f"{a.item_id}/{a.revision_id}" for a in latest.values() if a.status == "completed"}
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    per_item: dict[tuple[str, str], dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    not_applicable: dict[tuple[str, str], int] = defaultdict(int)
    for s in scores:
        side = arm_of.get(s.attempt_id)
        if side is None:
            continue
        if s.status == "scored" and s.value is not None:
            values[(s.metric, side)].append(s.value)
            per_item[(s.metric, side)][item_of[s.attempt_id]].append(s.value)
        elif s.status == "not_applicable":
            not_applicable[(s.metric, side)] += 1
    numeric = [m for m in metrics if m["direction"] != "categorical"]
    # Each metric's interval at alpha / m: the verdict over m metrics keeps a 5% family-wise error.
    alpha = 0.05 / max(1, len(numeric))
    table: list[dict[str, Any]] = []
    verdict_rows: list[ABRow] = []
    for m in numeric:
        name = m["name"]
        comparator = "lower_is_better" if m["direction"] == "lower" else "higher_is_better"
        base: float | None
        cand: float | None
        scale = tuple(m["spec"]["scale"]) if m["kind"] == "absolute_judge" else None
        if m["kind"] == "paired_judge":
            got = values[(name, "candidate")]
            cand = None if not got else (1 + sum(got) / len(got)) / 2
            base = None if cand is None else 1 - cand
            threshold = tolerance
            delta = None if cand is None else cand - 0.5
            applicable = True
            diffs = [sum(v) / len(v) for v in per_item[(name, "candidate")].values()]
            half = 0.5  # a case score d is a win-rate difference of d / 2
        else:
            b, c = values[(name, "baseline")], values[(name, "candidate")]
            base = sum(b) / len(b) if b else None
            cand = sum(c) / len(c) if c else None
            delta = None if base is None or cand is None else cand - base
            threshold = band_for(m["kind"], tolerance, scale=scale, baseline_mean=base)
            applicable = not any(not values[(name, side)] and not_applicable[(name, side)] for side in SIDES)
            bi, ci = per_item[(name, "baseline")], per_item[(name, "candidate")]
            diffs = [sum(ci[k]) / len(ci[k]) - sum(bi[k]) / len(bi[k]) for k in sorted(set(bi) & set(ci))]
            half = 1.0
        got_iv = corpus_interval(diffs, identity=bootstrap_identity(identity, str(m["version"]), name),
                                 bounds=delta_bounds(m["kind"], scale=scale), alpha=alpha)
        iv = got_iv.interval
        interval = None if iv is None else Interval(iv.lower * half, iv.upper * half)
        row = ABRow(interval, threshold, comparator, missing=delta is None)
        table.append({"metric": name, "kind": m["kind"], "version": m["version"], "baseline": base,
                      "candidate": cand, "delta": delta, "comparator": comparator, "threshold": threshold,
                      "applicable": applicable, "paired_items": len(diffs),
                      "interval": None if interval is None else [interval.lower, interval.upper],
                      "interval_level": 1 - alpha, "interval_note": got_iv.note, "code": row.code()})
        if applicable:
            verdict_rows.append(row)
    return table, verdict_rows
