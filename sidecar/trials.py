"""Creating a trial: the admin body, its validation, and the record it becomes.

Everything a case will need is resolved and pinned here, once: the candidate
and judge models with their list prices (a model without one is refused as
``spend_unbounded`` unless the body supplies a price), the judge version, the
execution site and the team's prompt retention.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Annotated, Callable

import msgspec

from judge.errors import JudgeError
from judge.version import JudgeSpec, judge_version
from policies.money import Price
from policies.site import execution_site
from sidecar.errors import BadRequest, SpendUnbounded
from sidecar.store.records import TrialRecord
from sidecar.ingest.wire import split_path

Rate = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
PositiveInt = Annotated[int, msgspec.Meta(ge=1)]
Dollars = Annotated[float, msgspec.Meta(ge=0.0)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]


class PriceIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A list price in US dollars per million tokens."""

    input_per_mtok_usd: Dollars
    output_per_mtok_usd: Dollars

    def to_price(self) -> Price:
        return Price(round(self.input_per_mtok_usd * 1_000_000), round(self.output_per_mtok_usd * 1_000_000))


class JudgeIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    model: Name | None = None
    rubric: Name | None = None
    max_tokens: PositiveInt | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None


class TrialCreate(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The body of ``POST /v1/trials``. Unknown fields are refused (typos are caught)."""

    team: Name
    incumbent_model: Name
    candidate_model: Name
    spend_cap_usd: Annotated[float, msgspec.Meta(gt=0.0)]
    sample_rate: Rate = 0.1
    route: Name | None = None
    gateway: Name | None = None
    expected_cases: PositiveInt = 1000
    tolerance: Annotated[float, msgspec.Meta(gt=0.0, lt=0.5)] = 0.05
    min_cases: PositiveInt = 20
    audit_share: Rate | None = None
    max_tokens: PositiveInt | None = None
    judge: JudgeIn | None = None
    candidate_price: PriceIn | None = None
    judge_price: PriceIn | None = None
    incumbent_price: PriceIn | None = None


_create_decoder = msgspec.json.Decoder(TrialCreate)


def decode_create(body: bytes) -> TrialCreate:
    try:
        return _create_decoder.decode(body)
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        raise BadRequest(message, field=path) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc


@dataclass(frozen=True, slots=True)
class Resolved:
    """A model name resolved through config: where it is served and its list price."""

    provider: str
    upstream: str
    price: Price | None


@dataclass(frozen=True, slots=True)
class TrialDefaults:
    judge_model: str
    judge_rubric: str
    judge_temperature: float
    judge_max_tokens: int
    audit_share: float
    candidate_max_tokens: int


Resolver = Callable[[str], Resolved]


def build_trial(
    body: TrialCreate,
    *,
    resolve: Resolver,
    defaults: TrialDefaults,
    prompt_retention: bool,
    now: float,
    trial_id: str | None = None,
) -> TrialRecord:
    judge_in = body.judge or JudgeIn()
    judge_model = judge_in.model or defaults.judge_model
    if not judge_model:
        raise BadRequest("no judge model: set [judge] model in the config or judge.model in the body", field="$.judge.model")
    try:
        spec = JudgeSpec(
            name=f"{judge_in.rubric or defaults.judge_rubric}@{judge_model}",
            model=judge_model,
            rubric_id=judge_in.rubric or defaults.judge_rubric,
            temperature=judge_in.temperature if judge_in.temperature is not None else defaults.judge_temperature,
            max_tokens=judge_in.max_tokens or defaults.judge_max_tokens,
        )
        version = judge_version(spec)
    except JudgeError as exc:
        raise BadRequest(str(exc), field="$.judge") from exc

    candidate = _resolve(resolve, body.candidate_model, "$.candidate_model")
    judge = _resolve(resolve, judge_model, "$.judge.model")
    cand_price = body.candidate_price.to_price() if body.candidate_price else candidate.price
    judge_price = body.judge_price.to_price() if body.judge_price else judge.price
    if cand_price is None:
        raise SpendUnbounded(
            f"candidate model {body.candidate_model!r} has no list price; add one to the config or send candidate_price",
            field="$.candidate_price",
        )
    if judge_price is None:
        raise SpendUnbounded(
            f"judge model {judge_model!r} has no list price; add one to the config or send judge_price",
            field="$.judge_price",
        )
    inc_price = body.incumbent_price.to_price() if body.incumbent_price else _try_price(resolve, body.incumbent_model)

    return TrialRecord(
        id=trial_id or "tr_" + uuid.uuid4().hex[:16],
        team=body.team,
        incumbent_model=body.incumbent_model,
        candidate_model=body.candidate_model,
        route=body.route,
        gateway=body.gateway,
        sample_rate=body.sample_rate,
        cap_micros=round(body.spend_cap_usd * 1_000_000),
        expected_cases=body.expected_cases,
        delta=body.tolerance,
        min_cases=body.min_cases,
        audit_share=body.audit_share if body.audit_share is not None else defaults.audit_share,
        candidate_max_tokens=body.max_tokens or defaults.candidate_max_tokens,
        candidate_price_in=cand_price.input_per_mtok,
        candidate_price_out=cand_price.output_per_mtok,
        judge_price_in=judge_price.input_per_mtok,
        judge_price_out=judge_price.output_per_mtok,
        incumbent_price_in=inc_price.input_per_mtok if inc_price else None,
        incumbent_price_out=inc_price.output_per_mtok if inc_price else None,
        judge_model=judge_model,
        judge_version_id=version.id,
        judge_version_name=version.name,
        judge_spec_json=json.dumps(version.to_dict(), sort_keys=True),
        # No control plane is wired in yet: no gateway has content uplink, so every trial is local.
        execution_site=execution_site(content_uplink={}, prompt_retention=prompt_retention, cut_over=False),
        prompt_retention=prompt_retention,
        created_at=now,
    )


def spec_of(record: TrialRecord) -> JudgeSpec:
    """The judge spec pinned on ``record`` at creation."""
    data = json.loads(record.judge_spec_json)
    return JudgeSpec(
        name=data["name"],
        model=data["model"],
        rubric_id=data["rubric_id"],
        temperature=data["temperature"],
        max_tokens=data["max_tokens"],
        parser_version=data["parser_version"],
    )


def _resolve(resolve: Resolver, name: str, field: str) -> Resolved:
    try:
        return resolve(name)
    except LookupError as exc:
        raise BadRequest(str(exc.args[0] if exc.args else exc), field=field) from exc


def _try_price(resolve: Resolver, name: str) -> Price | None:
    try:
        return resolve(name).price
    except LookupError:
        return None
