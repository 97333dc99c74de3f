"""Compare: one prompt, several models, side by side, scored by the absolute judge; nothing kept.

``POST /v1/compare`` takes a team, a prompt (``messages``, OpenAI chat shape), 2 to 6 models
of the configured routes, an optional absolute rubric and a per-request spend cap. It
calls every model at once on the team's configured providers and streams server-sent
events as results arrive:

- ``answer`` — one per model, in arrival order: the answer, its latency, its list-priced
  cost (``coverage: unknown`` when the provider reported no usage: unknown is not zero);
- ``score`` — one per model once judged: the absolute judge's 1–10 score with its rubric
  family (``absolute``) and judge version, or why there is none (never a middle score);
- ``done`` — spend, and a "make it a trial" hint: the ``POST /v1/trials`` body that would
  start a trial of any two of the models.

Spend: each generation's worst case (every input byte a token, ``max_tokens`` out) is
reserved against ``spend_cap_usd`` before any call; a request whose generations cannot fit
is ``409 compare_cap_too_small``. As an answer arrives its reservation is settled to its
priced cost (an unknown cost keeps its worst case) and the judge's worst case for that
answer is reserved; a score that does not fit is ``spend_cap_reached``. So the cap is never
passed. It is separate from every trial's cap.

No content is stored: no prompt, answer or score, no log line with content, only
content-free counters (``shadowtrial_compare_requests_total``) and one row of spend (team,
time, micros charged, calls of unknown cost: ``compare_spend``), kept before ``done`` is
sent, so evaluation spend on Live counts Compare beside trials and watches. There is no route
that lists or shows a past compare. Requires the write role on the team *and* the content permission (the answers
are content). A refusal before the stream starts is the JSON error shape.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Annotated, Any, AsyncGenerator

import msgspec

from judge.absolute import (
    DEFAULT_ABSOLUTE_RUBRIC, FAMILY, MAX_CALLS, AbsoluteJudge, AbsoluteSpec, get_absolute_rubric, input_upper_bound,
)
from judge.errors import JudgeError
from policies.money import Cost, Price, add_costs, input_tokens_upper_bound, price_usage, worst_case_micros
from policies.roles import Principal
from sidecar.engine.completer_adapter import ProviderCompleter
from sidecar.errors import BadRequest, Conflict, SpendUnbounded
from sidecar.ingest.wire import split_path
from sidecar.ingest.wording import PATTERN_WORDS
from sidecar.providers.base import ChatRequest, Provider, ProviderResult
from sidecar.services.context import CompareContext
from sidecar.services.access import require
from sidecar.trials.create import NAME_RULE, Name, Tokens

MIN_MODELS, MAX_MODELS = 2, 6
MAX_COMPARE_CAP_USD = 100.0
DEFAULT_COMPARE_CAP_USD = 1.0
#: Tagged like shadow traffic, so the gateway's billing can tell evaluation calls apart.
COMPARE_HEADER = "X-Shadowtrial-Compare"


class CompareRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The body of ``POST /v1/compare``. Unknown fields are refused."""

    team: Name
    messages: Annotated[list[dict[str, Any]], msgspec.Meta(min_length=1, max_length=500)]
    models: Annotated[list[Name], msgspec.Meta(min_length=MIN_MODELS, max_length=MAX_MODELS)]
    rubric: Name | None = None
    judge_model: Name | None = None
    max_tokens: Tokens = 512
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    spend_cap_usd: Annotated[float, msgspec.Meta(gt=0.0, le=MAX_COMPARE_CAP_USD)] = DEFAULT_COMPARE_CAP_USD


_decoder = msgspec.json.Decoder(CompareRequest)


def decode_compare(body: bytes) -> CompareRequest:
    try:
        req = _decoder.decode(body)
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        if message.startswith(PATTERN_WORDS):
            message = f"must be {NAME_RULE}"
        raise BadRequest(message, field=path) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc
    for i, m in enumerate(req.messages):
        if not isinstance(m.get("role"), str) or "content" not in m:
            raise BadRequest("each message needs a role and a content", field=f"$.messages[{i}]")
    if len(set(req.models)) != len(req.models):
        raise BadRequest("each model once", field="$.models")
    return req


@dataclass
class _Arm:
    model: str
    provider: str
    upstream: str
    price: Price
    reserved: int


@dataclass
class ComparePlan:
    """A checked compare, ready to stream (built by :meth:`CompareService.plan`)."""

    request: CompareRequest
    arms: list[_Arm]
    judge_model: str
    judge_provider: str
    judge_upstream: str
    judge_price: Price
    spec: AbsoluteSpec
    cap: int
    remaining: int
    spent: list[Cost] = field(default_factory=list)
    #: Micros charged against the cap: priced costs, and an unknown cost's worst case held.
    charged: int = 0
    kept: bool = False


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


class CompareService:
    def __init__(self, ctx: CompareContext) -> None:
        self._ctx = ctx

    def refused(self) -> None:
        """Count a compare refused (its body or its plan): a count only, like every compare's."""
        self._ctx.counters.compare_refused += 1

    def plan(self, principal: Principal, body: CompareRequest) -> ComparePlan:
        """Check rights, models, prices and the cap; raises :class:`~sidecar.errors.ApiError`."""
        ctx = self._ctx
        team = body.team
        require(principal, team, "write", not_found=f"team {team!r} is not one of your teams",
                forbidden=f"your roles may read team {team!r} but not run compares for it")
        require(principal, team, "content", not_found=f"team {team!r} is not one of your teams",
                forbidden="compare shows model answers, which are content: it needs the content permission")
        rubric = body.rubric or DEFAULT_ABSOLUTE_RUBRIC
        try:
            get_absolute_rubric(rubric)
        except JudgeError as exc:
            raise BadRequest(str(exc), field="$.rubric") from exc
        prompt_bound = input_tokens_upper_bound(*(json.dumps(m, ensure_ascii=False) for m in body.messages),
                                                messages=len(body.messages))
        arms: list[_Arm] = []
        for i, name in enumerate(body.models):
            resolved = _resolve(ctx, name, f"$.models[{i}]")
            if resolved.price is None:
                raise SpendUnbounded(f"model {name!r} has no list price; compare needs one to keep its cap",
                                     field=f"$.models[{i}]")
            arms.append(_Arm(name, resolved.provider, resolved.upstream, resolved.price,
                             worst_case_micros(resolved.price, prompt_bound, body.max_tokens)))
        judge_model = body.judge_model or ctx.judge.model
        if not judge_model:
            raise BadRequest("no judge model: set [judge] model in the config or judge_model in the body",
                             field="$.judge_model")
        judge = _resolve(ctx, judge_model, "$.judge_model")
        if judge.price is None:
            raise SpendUnbounded(f"judge model {judge_model!r} has no list price", field="$.judge_model")
        spec = AbsoluteSpec(model=judge_model, rubric_id=rubric, max_tokens=ctx.judge.max_tokens)
        cap = round(body.spend_cap_usd * 1_000_000)
        needed = sum(a.reserved for a in arms)
        if needed > cap:
            raise Conflict(f"the generations' worst case is {needed / 1e6:.6f} USD, above spend_cap_usd "
                           f"{body.spend_cap_usd}; raise the cap or lower max_tokens",
                           code="compare_cap_too_small", field="$.spend_cap_usd")
        return ComparePlan(body, arms, judge_model, judge.provider, judge.upstream, judge.price, spec, cap,
                           cap - needed)

    async def events(self, plan: ComparePlan) -> AsyncGenerator[bytes, None]:
        """The server-sent events of ``plan``, as results arrive (see the module docstring)."""
        ctx = self._ctx
        body = plan.request
        providers = ctx.open_providers()
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        headers = {ctx.shadow_header: "1", COMPARE_HEADER: "1"}
        judge = AbsoluteJudge(ProviderCompleter(providers[plan.judge_provider], plan.judge_upstream, headers),
                              plan.spec)
        started = time.monotonic()

        async def arm(a: _Arm) -> None:
            params: dict[str, Any] = {"max_tokens": body.max_tokens}
            if body.temperature is not None:
                params["temperature"] = body.temperature
            t0 = time.monotonic()
            result = await providers[a.provider].chat(
                ChatRequest(model=a.upstream, messages=[dict(m) for m in body.messages], params=params,
                            headers=headers)
            )
            latency = (time.monotonic() - t0) * 1000.0
            cost = _settle(plan, a, result)
            await queue.put(_sse("answer", {
                "model": a.model, "ok": result.ok, "content": result.content if result.ok else None,
                "error": None if result.ok else result.error, "finish_reason": result.finish_reason,
                "latency_ms": round(latency, 1), "output_tokens": result.output_tokens, "cost": cost.to_dict(),
            }))
            await queue.put(_sse("score", await _score(plan, judge, a, result)))

        tasks = [asyncio.create_task(arm(a)) for a in plan.arms]
        done = asyncio.gather(*tasks)
        done.add_done_callback(lambda _f: queue.put_nowait(None))
        try:
            while (item := await queue.get()) is not None:
                yield item
            await done
            total = Cost.zero()
            for c in plan.spent:
                total = add_costs(total, c)
            await self._keep_spend(plan)
            yield _sse("done", {
                "models": len(plan.arms), "elapsed_ms": round((time.monotonic() - started) * 1000.0, 1),
                "spend": {**total.to_dict(), "cap_micros": plan.cap},
                "stored": False,
                "trial_hint": _hint(plan),
            })
            ctx.counters.compare_streamed += 1
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for p in providers.values():
                await p.aclose()
            await self._keep_spend(plan)  # a stream cut short still spent what it settled

    async def _keep_spend(self, plan: ComparePlan) -> None:
        """Keep the compare's spend once (content-free), if it spent anything."""
        if plan.kept or not plan.spent:
            return
        plan.kept = True
        await self._ctx.store.record_compare_spend(
            team=plan.request.team, at=self._ctx.clock(), charged_micros=plan.charged,
            known_micros=sum(c.known_micros for c in plan.spent), calls=len(plan.spent),
            unknown_calls=sum(1 for c in plan.spent if c.coverage != "complete"),
        )


def _resolve(ctx: CompareContext, name: str, field: str) -> Any:
    try:
        return ctx.resolve(name)
    except LookupError as exc:
        raise BadRequest(str(exc.args[0] if exc.args else exc), field=field) from exc


def _settle(plan: ComparePlan, a: _Arm, result: ProviderResult) -> Cost:
    """The call's priced cost; its reservation released but for an unknown cost's worst case."""
    cost = price_usage(a.price, result.input_tokens, result.output_tokens)
    if result.may_have_billed or result.unknown_fate_attempts:
        cost = Cost(cost.known_micros, "unknown" if cost.coverage == "unknown" else "partial")
    held = a.reserved if cost.coverage != "complete" else min(cost.known_micros, a.reserved)
    plan.remaining += a.reserved - held
    plan.charged += held
    plan.spent.append(cost)
    return cost


async def _score(plan: ComparePlan, judge: AbsoluteJudge, a: _Arm, result: ProviderResult) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": a.model, "family": FAMILY, "rubric": plan.spec.rubric_id, "scale": [1, 10],
        "judge_version": judge.version.to_dict(), "score": None, "error": None,
        "note": "an absolute score rates one answer on its own; it is never a difference between models",
    }
    if not result.ok or not result.content:
        out["error"] = "no_answer"
        return out
    bound = input_upper_bound(plan.request.messages, len(result.content.encode()), plan.spec)
    worst = MAX_CALLS * worst_case_micros(plan.judge_price, bound, plan.spec.max_tokens)
    if worst > plan.remaining:
        out["error"] = "spend_cap_reached"
        return out
    plan.remaining -= worst
    scored = await judge.score(plan.request.messages, result.content)
    cost = Cost.zero()
    for c in scored.completions:
        cost = add_costs(cost, price_usage(plan.judge_price, c.input_tokens, c.output_tokens))
    held = worst if cost.coverage != "complete" else min(worst, cost.known_micros)
    plan.remaining += worst - held
    plan.charged += held
    plan.spent.append(cost)
    out.update({"score": scored.score, "error": scored.error, "cost": cost.to_dict()})
    return out


def _hint(plan: ComparePlan) -> dict[str, Any]:
    first, second = plan.arms[0].model, plan.arms[1].model
    return {
        "note": "a compare is not kept; to keep judging two of these models on real traffic, start a trial "
                "(any two: the served model as incumbent_model, another as candidate_model)",
        "method": "POST", "path": "/v1/trials",
        "body": {"team": plan.request.team, "incumbent_model": first, "candidate_model": second,
                 "spend_cap_usd": 10.0, "sample_rate": 0.1},
        "models": [a.model for a in plan.arms],
    }
