"""Comparison groups up to their admission: readiness, admission and start (issue 13, item 3).
Nothing here calls a model; running an admitted group is not built yet.

Body of ``POST /v1/comparisons/readiness`` and ``POST /v1/comparisons``::

    {"suite_id": "su_…", "repetitions": 3, "primary_metric": "pref",
     "arms": [{"name": "today", "model": "gpt-a", "version": "2025-01"},
              {"name": "next", "model": "gpt-b", "system_prompt": "…", "params": {"temperature": 0.2}}],
     "readiness_token": "…"}                                            (start only)

An arm's ``version`` runs the upstream model its alias's ``versions`` table maps it to
(:mod:`sidecar.collector.corpus.targets`); a version the alias does not map is refused
``422 comparison_invalid`` naming ``$.arms[n].version``, never run as the unversioned model.
An arm of ``"kind": "agent"`` calls the registered agent ``model`` names (an unregistered one
is ``comparison_invalid`` naming ``$.arms[n].model``; one of unknown cost without a ceiling is
the problem ``spend_unbounded``).

**Readiness** (read-only) answers each arm's resolved model (provider, upstream name,
version, list price), route, system-prompt hash and settings; what differs
between arms beyond the model; the planned invocations per arm and the admission; any
``problems`` that would refuse a start; and a ``readiness_token``, a hash of the whole
answer.

**Start** needs an ``Idempotency-Key`` and the token of a readiness check. In order:
the same key with the same body returns the group it created (``200``), whatever changed
since, to a caller who may start groups on its team now (a reader's retry is ``403``); the
same key with another body is ``409 request_key_conflict``; a problem is
``422`` with its code (``model_unresolved``, ``spend_unbounded``); a group over the limit
is ``422 comparison_invocation_limit`` naming each arm's count; a readiness answer that is
not the one the token was taken from is ``409 stale_preflight``; otherwise the group is
stored ``admitted`` (``201``).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec

from policies.experiments import (
    INVOCATION_LIMIT,
    MAX_ARMS,
    MAX_REPETITIONS,
    MIN_ARMS,
    MIN_REPETITIONS,
    ArmFacts,
    admit,
    differences,
    model_graders_of,
    plan_arm,
    prompt_hash,
)
from policies.graders import MODEL_GRADERS, canonical, content_hash
from policies.roles import Principal
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.datasets import Name, require_write
from sidecar.collector.corpus.run_service import RunService
from sidecar.collector.corpus.ab_sides import model_targets
from sidecar.collector.corpus.plan import DEFAULT_TOLERANCE, Arm, arm_targets, plan_worst_case, suite_items
from sidecar.collector.corpus.targets import TargetError
from sidecar.collector.corpus.suites import SuiteService
from sidecar.collector.corpus.errors import ComparisonInvalid, Unprocessable
from sidecar.errors import BadRequest, Conflict, NotFound
from sidecar.services.access import visible
from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.store.errors import IdempotencyConflict


class ParamsIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """An arm's generation parameters (unset: the provider's default; ``max_tokens``: the
    engine's default)."""

    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None
    seed: int | None = None
    stop: list[str] | None = None
    presence_penalty: Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)] | None = None
    frequency_penalty: Annotated[float, msgspec.Meta(ge=-2.0, le=2.0)] | None = None


class ArmIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: Name
    model: Name
    #: A version of the model alias (its ``versions`` table); None: the alias itself.
    version: Name | None = None
    #: ``agent``: ``model`` names a registered agent (``[agents.NAME]``), called like a model.
    kind: Literal["model", "agent"] = "model"
    route: Name | None = None
    system_prompt: Annotated[str, msgspec.Meta(max_length=200_000)] | None = None
    params: ParamsIn = ParamsIn()


class ComparisonIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    suite_id: Name
    arms: Annotated[list[ArmIn], msgspec.Meta(min_length=MIN_ARMS, max_length=MAX_ARMS)]
    primary_metric: Name
    repetitions: Annotated[int, msgspec.Meta(ge=MIN_REPETITIONS, le=MAX_REPETITIONS)] = 1
    readiness_token: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None
    #: The group's spend cap (both arms and every judge call counted); default: the plan's worst case.
    spend_cap_usd: Annotated[float, msgspec.Meta(gt=0.0, le=1_000_000.0)] | None = None
    #: The parity band of the results, on the win-rate scale (default 0.05).
    tolerance: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] | None = None


#: The refusal of a primary metric the plan does not select (issue 24, item 5; the comparison-group
#: specification's code, not ``comparison_invalid``).
PRIMARY_INVALID = "comparison_primary_invalid"


def _missing(comparison_id: str) -> str:
    return f"no comparison {comparison_id!r}"


def comparison_view(c: ComparisonRecord) -> dict[str, Any]:
    spec = msgspec.json.decode(c.spec)
    readiness = msgspec.json.decode(c.readiness)
    # An A/B comparison (sidecar.collector.corpus.ab) is a group too, with a readiness of its own shape.
    return {"id": c.id, "team": c.team, "suite_id": c.suite_id, "evidence": "corpus", "status": c.status,
            "kind": "ab" if "ab" in spec else "group",
            "repetitions": spec.get("repetitions", 1), "primary_metric": spec.get("primary_metric"),
            "arms": readiness["arms"], "differences": readiness.get("differences", []),
            "planned": readiness.get("planned"),
            "planned_total": c.planned_total, "readiness_token": c.readiness_token,
            "created_at": c.created_at, "created_by": c.created_by}


class ComparisonService:
    def __init__(self, ctx: CorpusContext, suites: SuiteService) -> None:
        self._ctx = ctx
        self._suites = suites

    async def readiness(self, principal: Principal, body: ComparisonIn) -> dict[str, Any]:
        """The readiness answer (module docs); read-only, no provider is called."""
        suite = await self._suites.get_record(principal, body.suite_id, field="$.suite_id")
        metrics = msgspec.json.decode(suite.metrics)
        by_name = {m["name"]: m for m in metrics}
        primary = by_name.get(body.primary_metric)
        if primary is None:
            raise ComparisonInvalid(f"suite {suite.id!r} has no metric {body.primary_metric!r}; it has "
                                    f"{', '.join(sorted(by_name))}", field="$.primary_metric",
                                    code=PRIMARY_INVALID)
        if primary["direction"] == "categorical":
            raise ComparisonInvalid(f"metric {body.primary_metric!r} is categorical: it names no winner, so it "
                                    "cannot be the primary metric", field="$.primary_metric",
                                    code=PRIMARY_INVALID)
        names: set[str] = set()
        problems: list[dict[str, Any]] = []
        arms: list[dict[str, Any]] = []
        facts: list[ArmFacts] = []
        for n, arm in enumerate(body.arms):
            if arm.name in names:
                raise ComparisonInvalid(f"arm name {arm.name!r} is used twice", field=f"$.arms[{n}].name")
            names.add(arm.name)
            resolved: dict[str, Any] | None = None
            try:
                r = (self._ctx.targets or model_targets(self._ctx.resolve))(arm.kind, arm.model, arm.version)
            except TargetError as exc:
                if exc.part == "version":
                    raise ComparisonInvalid(exc.message, field=f"$.arms[{n}].version") from exc
                if exc.part == "ref" and arm.kind == "agent":
                    raise ComparisonInvalid(exc.message, field=f"$.arms[{n}].model") from exc
                code = "spend_unbounded" if exc.part == "cost" else "model_unresolved"
                problems.append({"code": code, "field": f"$.arms[{n}].model", "message": exc.message})
            else:
                resolved = {"provider": r.provider, "upstream_model": r.upstream, "priced": r.price is not None,
                            "list_price": None if r.price is None else {
                                "input_micros_per_mtok": r.price.input_per_mtok,
                                "output_micros_per_mtok": r.price.output_per_mtok}}
                if arm.kind == "agent":
                    resolved["kind"] = "agent"
                    if r.price is None:
                        resolved.update(cost="unknown", reserved_per_call_micros=r.ceiling_micros)
                if not r.bounded:
                    problems.append({"code": "spend_unbounded", "field": f"$.arms[{n}].model",
                                     "message": f"model {arm.model!r} has no list price: the group's spend could "
                                                "not be capped"})
            settings = msgspec.to_builtins(arm.params)
            settings.setdefault("max_tokens", self._ctx.defaults.candidate_max_tokens)
            p_hash = prompt_hash(arm.system_prompt)
            arms.append({"name": arm.name, "model": arm.model, **({} if arm.kind == "model" else {"kind": arm.kind}),
                         **({} if arm.version is None else {"version": arm.version}),
                         "resolved": resolved, "route": arm.route,
                         "prompt_hash": p_hash, "settings": settings})
            facts.append(ArmFacts(arm.name, arm.model, arm.route, p_hash, settings))
        items = await self._suites.item_count(suite)
        model_graders = sum(1 for m in metrics if m["kind"] in MODEL_GRADERS)
        kinds = [m["kind"] for m in metrics]
        plans = [plan_arm(a.name, items=items, repetitions=body.repetitions,
                          model_graders=model_graders_of(kinds, baseline=n == 0))
                 for n, a in enumerate(body.arms)]
        admission = admit(plans)
        answer: dict[str, Any] = {
            "suite": {"id": suite.id, "name": suite.name, "version": suite.version, "digest": suite.digest},
            "team": suite.team, "evidence": "corpus", "items": items, "repetitions": body.repetitions,
            "primary_metric": body.primary_metric, "arms": arms, "differences": differences(facts),
            "planned": {
                "per_arm": [{"arm": p.arm, "generations": p.generations, "judgments": p.judgments,
                             "grader_allowance": p.grader_allowance, "total": p.total} for p in plans],
                "group_total": admission.group_total, "limit": admission.limit,
                "model_graders": model_graders,
            },
            "admission": {"admitted": admission.admitted, "over": [{"arm": p.arm, "total": p.total}
                                                                    for p in admission.over]},
            "problems": problems, "provider_calls": 0,
        }
        answer["spend"] = await self._spend(suite.id, body, arms)
        if answer["spend"]["worst_case_micros"] is None and not problems:
            problems.append({"code": "spend_unbounded", "field": "$.suite_id",
                             "message": "a judge model of the suite has no list price: the group's spend could not "
                                        "be capped"})
        answer["readiness_token"] = content_hash(answer)
        return answer

    async def _spend(self, suite_id: str, body: ComparisonIn, arms: list[dict[str, Any]]) -> dict[str, Any]:
        """The plan's worst case and the cap a start will hold (read-only; list prices)."""
        metrics, items = await suite_items(self._ctx.store, suite_id)
        planned = [Arm(a.name, a.model, a.system_prompt, r["settings"], target_kind=a.kind, version=a.version)
                   for a, r in zip(body.arms, arms)]
        try:
            worst = plan_worst_case(planned, metrics, items, body.repetitions, self._ctx.resolve,
                                    arm_targets(self._ctx.targets, self._ctx.resolve))
        except LookupError:
            worst = None
        cap = round(body.spend_cap_usd * 1_000_000) if body.spend_cap_usd is not None else worst
        return {"worst_case_micros": worst, "cap_micros": cap, "basis": "list_price",
                "tolerance": DEFAULT_TOLERANCE if body.tolerance is None else body.tolerance}

    async def start(self, principal: Principal, body: ComparisonIn, request_key: str) -> tuple[dict[str, Any], bool]:
        """Start (admit) the group; (view, created). See the module docs for the order of checks."""
        body_hash = content_hash(_builtins(body))
        store = self._ctx.store
        found = await store.find_request_key(request_key)
        if found is not None:
            if found[0] != body_hash:
                raise IdempotencyConflict(request_key)
            if not principal.sees(found[1].team):
                raise NotFound(_missing(found[1].id))
            # The original group, under the caller's current rights (issue 24, item 7): a retry by
            # someone who may no longer start groups on the team is refused as a fresh start is.
            require_write(principal, found[1].team, "comparisons")
            return comparison_view(found[1]), False
        if body.readiness_token is None:
            raise BadRequest("a start needs the readiness_token of a readiness check (POST /v1/comparisons/readiness "
                             "with the same body)", field="$.readiness_token")
        answer = await self.readiness(principal, body)
        require_write(principal, answer["team"], "comparisons")
        if answer["problems"]:
            raise _refusal(answer["problems"][0])
        if not answer["admission"]["admitted"]:
            raise _limit(answer)
        if answer["readiness_token"] != body.readiness_token:
            raise Conflict("the readiness answer changed since the check (a model's route or price, the suite); "
                           "check readiness again and start with its token", field="$.readiness_token",
                           code="stale_preflight")
        record = ComparisonRecord(
            f"cg_{uuid.uuid4().hex}", answer["team"], answer["suite"]["id"],
            canonical(_builtins(body)), canonical(answer), answer["readiness_token"],
            answer["planned"]["group_total"], "admitted", self._ctx.clock(), principal.subject)
        stored, created = await store.create_comparison(record, request_key=request_key, body_hash=body_hash)
        return comparison_view(stored), created

    async def get(self, principal: Principal, comparison_id: str) -> dict[str, Any]:
        record = await self._ctx.store.get_comparison(comparison_id)
        if record is None or not principal.sees(record.team):
            raise NotFound(_missing(comparison_id))
        view = comparison_view(record)
        run = await RunService(self._ctx).report(record)
        if run is not None:  # once a runner has taken the group
            view["run"] = run
        return view

    async def listing(self, principal: Principal, team: str | None, suite_id: str | None) -> list[dict[str, Any]]:
        records = await self._ctx.store.list_comparisons(teams=visible(principal, team), suite_id=suite_id)
        return [comparison_view(c) for c in records]


def _builtins(body: ComparisonIn) -> dict[str, Any]:
    """The body as stored and hashed; an arm without a version is stored as before versions
    existed, so a start retried across the upgrade keeps its request key's body hash."""
    out: dict[str, Any] = msgspec.to_builtins(body)
    for arm in out["arms"]:
        if arm.get("version") is None:
            arm.pop("version", None)
        if arm.get("kind") == "model":
            arm.pop("kind", None)
    return out


def _refusal(problem: dict[str, Any]) -> Unprocessable:
    return Unprocessable(problem["message"], field=problem["field"], code=problem["code"])


def _limit(answer: dict[str, Any]) -> Unprocessable:
    over = ", ".join(f"arm {o['arm']!r} plans {o['total']:,}" for o in answer["admission"]["over"])
    return Unprocessable(f"{over} invocations; a comparison arm may plan at most {INVOCATION_LIMIT:,} (generations plus "
                    "five attempts for each judgment of a model grader). Use fewer items or repetitions; the "
                    "limit is never raised automatically", field="$.repetitions", code="comparison_invocation_limit")
