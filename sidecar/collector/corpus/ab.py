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
once the run has ended (issue 24, item 4): ``inconclusive`` when a run errored (a generation
failed or was left indeterminate, the cap or a revoked starter ended it) or a metric has a
score on one side only; ``regression`` (a metric's interval below -threshold);
``candidate_better`` (one interval above +threshold, every other metric better by more or
within); ``equivalent`` (every delta within the tolerance, on 20 paired items at least);
otherwise ``inconclusive``. Means, deltas and thresholds are exact fractions
(:mod:`policies.exact_tolerance`, item 13).
Categorical metrics have no numeric winner and are not rows; a metric with no score on either
side (latency of given outputs on both) is listed with ``applicable: false`` and left out.

Errors: ``422 comparison_invalid`` — its message begins "The evaluation comparison is invalid: "
and names the field (issue 24, item 5) — for a side without ``ref``, a bad ``type``, equal
sides, ``tolerance`` outside [0, 1], ``outputs`` not an object (or a side's neither a list nor a
map of texts, or a list whose length is not the number of items), an unknown field, a version
that cannot be pinned, an unregistered agent, a prompt side without template or model (and
without outputs); ``404 not_found`` for an unknown suite; on the list, ``404
comparison_not_found`` for a ``suite_id`` that is not a suite. Roles: writers
(``tenant_admin``, ``developer``, ``security_officer``) create; readers add ``auditor``,
``viewer``, ``finops`` and read the list (each row with its ``verdict``) and the detail,
``403 forbidden`` for other roles; ``platform_admin`` passes.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Mapping

from policies.exact_tolerance import exact, exact_mean, grid_of
from policies.experiments import admit, model_graders_of, plan_arm
from policies.graders import canonical, content_hash
from policies.roles import READERS, Principal
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
from sidecar.errors import Forbidden, NotFound
from sidecar.services.access import visible
from sidecar.collector.store.corpus_records import ComparisonRecord

if TYPE_CHECKING:
    from policies.corpus_verdict import ABRow

_FIELDS = ("suite_id", "baseline", "candidate", "tolerance", "outputs")
DEFAULT_TOLERANCE = 0.05
LISTED = 200


def _invalid(message: str, field: str) -> ComparisonInvalid:
    """``comparison_invalid`` naming the field (the prefix: :class:`ComparisonInvalid`)."""
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


def require_read(principal: Principal) -> None:
    """The A/B screen's READ_ROLES (readers; ``platform_admin`` passes): ``403 forbidden`` else."""
    if not principal.is_super and not principal.roles & READERS:
        raise Forbidden("your roles may not read comparisons: ask for viewer or auditor")


class ABService:
    def __init__(self, ctx: CorpusContext) -> None:
        self._ctx = ctx
        #: The verdicts of ended comparisons, by id: (status, run ended at) -> verdict. A list row
        #: reads it instead of every score and a bootstrap per metric; a retry re-opens the run
        #: (its end changes), so a stale verdict is never read.
        self._verdicts: dict[str, tuple[tuple[str, float | None], str | None]] = {}

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
        generates: dict[str, bool] = {}
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
            generates[side] = outputs is None
        kinds = [m["kind"] for m in metrics]
        admission = admit([plan_arm(side, items=len(items), repetitions=1,
                                    model_graders=model_graders_of(kinds, baseline=side == "baseline"),
                                    generates=generates[side]) for side in SIDES])
        if not admission.admitted:
            over = ", ".join(f"the {p.arm} plans {p.total:,}" for p in admission.over)
            raise Unprocessable(f"{over} invocations (generations plus five attempts for each judgment of a model "
                                f"grader); a side may plan at most {admission.limit:,}", field="$.suite_id",
                                code="comparison_invocation_limit")
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
        require_read(principal)
        record = await self._ctx.store.get_comparison(comparison_id)
        if record is None or not principal.sees(record.team) or "ab" not in json.loads(record.spec):
            raise NotFound(f"no comparison {comparison_id!r}")
        return await self.view(record)

    async def listing(self, principal: Principal, suite_id: str | None) -> list[dict[str, Any]]:
        """The 200 most recent, each row with its ``verdict`` (issue 24, item 5): ``403 forbidden``
        for a caller whose roles may not read; ``404 comparison_not_found`` for a ``suite_id``
        that is not a suite it can see."""
        require_read(principal)
        if suite_id is not None:
            suite = await self._ctx.store.get_suite(suite_id)
            if suite is None or not principal.sees(suite.team):
                raise NotFound(f"no suite {suite_id!r}: the filter takes a suite's id", field="suite_id",
                               code="comparison_not_found")
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
        from policies.corpus_verdict import ab_verdict  # numpy: on the first view, not at start-up

        spec = json.loads(record.spec)
        ab = spec["ab"]
        # A run that ended short (the cap, or its starter's rights lost) reads inconclusive.
        short = record.status in ("cap_reached", "starter_unauthorized")
        final = record.status == "completed" or short
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
        if not rows and not final:
            out["verdict"] = None
            return out
        store = self._ctx.store
        ended = None
        if final:
            run = await store.get_run(record.id)
            ended = None if run is None else run.ended_at
            cached = self._verdicts.get(record.id)
            if not rows and cached is not None and cached[0] == (record.status, ended):
                out["verdict"] = cached[1]
                return out
        suite = await store.get_suite(record.suite_id)  # its metrics; the items are not needed here
        metrics = [] if suite is None else list(json.loads(suite.metrics))
        latest = latest_attempts(await store.run_attempts(record.id))
        scores = await store.run_scores(record.id)
        errored = short or any(a.status in ("failed", "invocation_indeterminate")
                                                        for a in latest.values())
        table, verdict_rows = _rows(metrics, latest, scores, ab["tolerance"], record.id)
        if rows:
            out["metrics"] = table
        out["verdict"] = ab_verdict(verdict_rows, errored=errored) if final else None
        if final:
            self._verdicts[record.id] = ((record.status, ended), out["verdict"])
        return out


def _exact_band(kind: str, tolerance: Fraction, *, scale: tuple[float, float] | None,
                baseline_mean: Fraction | None) -> Fraction:
    """:func:`policies.corpus_verdict.band_for` in exact fractions (the paired judge's rows are
    on the win-rate scale here, so its band is the tolerance itself)."""
    if kind == "absolute_judge" and scale is not None:
        return tolerance * (exact(scale[1]) - exact(scale[0]))
    if kind in ("latency", "cost"):
        return tolerance * abs(baseline_mean or Fraction(0))
    return tolerance


def _float(x: Fraction | None) -> float | None:
    return None if x is None else float(x)


def _rows(metrics: list[Mapping[str, Any]], latest: Mapping[Any, Any], scores: list[Any], tolerance: float,
          identity: str) -> tuple[list[dict[str, Any]], list[ABRow]]:
    """The metric rows and what the verdict reads. Means, deltas and thresholds are exact
    fractions of the scores' decimals (issue 24, item 13: nothing at the tolerance depends on
    float rounding). A metric not applicable on either side (latency of given outputs on both)
    is listed ``applicable: false`` and left out; a metric scored on one side only is a row with
    no delta, and the verdict reads ``inconclusive`` (item 4)."""
    # The statistics (numpy) are imported by the first report, not when the collector starts.
    from policies.bootstrap import Interval, bootstrap_identity
    from policies.corpus_verdict import ABRow, corpus_interval, delta_bounds

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
    tol = exact(tolerance)
    table: list[dict[str, Any]] = []
    verdict_rows: list[ABRow] = []
    for m in numeric:
        name = m["name"]
        comparator = "lower_is_better" if m["direction"] == "lower" else "higher_is_better"
        base: Fraction | None
        cand: Fraction | None
        delta: Fraction | None
        diffs: list[Fraction]
        scale = tuple(m["spec"]["scale"]) if m["kind"] == "absolute_judge" else None
        if m["kind"] == "paired_judge":
            got = exact_mean(values[(name, "candidate")])
            cand = None if got is None else (1 + got) / 2
            base = None if cand is None else 1 - cand
            delta = None if cand is None else cand - Fraction(1, 2)
            applicable = True
            diffs = [exact_mean(v) or Fraction(0) for v in per_item[(name, "candidate")].values()]
            half = Fraction(1, 2)  # a case score d is a win-rate difference of d / 2
        else:
            base, cand = exact_mean(values[(name, "baseline")]), exact_mean(values[(name, "candidate")])
            delta = None if base is None or cand is None else cand - base
            # Left out only when neither side has a score and a side says why (not applicable); scored on
            # one side only, it stays a row with no delta: inconclusive, as the specification reads.
            applicable = not all(not values[(name, side)] and not_applicable[(name, side)] for side in SIDES)
            bi, ci = per_item[(name, "baseline")], per_item[(name, "candidate")]
            diffs = [(exact_mean(ci[k]) or Fraction(0)) - (exact_mean(bi[k]) or Fraction(0))
                     for k in sorted(set(bi) & set(ci))]
            half = Fraction(1)
        threshold = _exact_band(m["kind"], tol, scale=scale, baseline_mean=base)
        got_iv = corpus_interval([float(d) for d in diffs],
                                 identity=bootstrap_identity(identity, str(m["version"]), name),
                                 bounds=delta_bounds(m["kind"], scale=scale), alpha=alpha)
        iv = got_iv.interval
        interval = None if iv is None else Interval(iv.lower * float(half), iv.upper * float(half))
        grid = grid_of([d * half for d in diffs])
        row = ABRow(interval, threshold, comparator, missing=delta is None, delta=delta, paired=len(diffs),
                    grid=grid)
        table.append({"metric": name, "kind": m["kind"], "version": m["version"], "baseline": _float(base),
                      "candidate": _float(cand), "delta": _float(delta), "comparator": comparator,
                      "threshold": float(threshold), "applicable": applicable, "paired_items": len(diffs),
                      "interval": None if interval is None else [interval.lower, interval.upper],
                      "interval_level": 1 - alpha, "interval_note": got_iv.note, "code": row.code()})
        if applicable:
            verdict_rows.append(row)
    return table, verdict_rows
