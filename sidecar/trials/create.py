"""Creating a trial: the admin body, its validation, and the record it becomes.

Everything a case will need is resolved and pinned here, once: the candidate
and judge models with their list prices (a model without one is refused as
``spend_unbounded`` unless the body supplies a price), the judge version, the
execution site and the team's prompt retention.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Callable, Literal, Sequence

import msgspec

from judge.errors import JudgeError, UnknownRubric
from judge.version import JudgeSpec, judge_version
from policies.money import Price
from policies.segments import DEFAULT_CAP, check_cap, check_segments
from policies.site import Site
from sidecar.config import MAX_PRICE_PER_MTOK_USD, MAX_TOKENS, MIN_NONZERO_PRICE_PER_MTOK_USD
from sidecar.errors import BadRequest, InvalidSegments, SpendUnbounded
from sidecar.store.records import TrialRecord
from sidecar.ingest.wire import DecodeError, check_utf8, split_path, where_decode_failed
from sidecar.ingest.wording import PATTERN_WORDS
# The statuses (what ``GET /v1/trials?status=`` accepts) and the idempotency header live in
# sidecar.trial_words, which the CLI imports alone; they are named from here too.
from sidecar.trial_words import IDEMPOTENCY_KEY as IDEMPOTENCY_KEY
from sidecar.trial_words import MAX_KEY_CHARS as MAX_KEY_CHARS
from sidecar.trial_words import STATUSES as STATUSES

#: The accepted ranges of the body's values, one place (shared ones with the config file in
#: :mod:`sidecar.config`); the README's API section lists them and the OpenAPI document shows
#: them (its schema is built from these annotations).
MAX_CAP_USD = 1_000_000.0
#: One micro-dollar: a smaller cap would be stored as zero.
MIN_CAP_USD = 0.000001
MAX_CASES = 10_000_000
MIN_TOLERANCE = 0.001
MAX_NAME_CHARS = 256

Rate = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Tokens = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS, description=f"1 to {MAX_TOKENS:,}")]
Cases = Annotated[int, msgspec.Meta(ge=1, le=MAX_CASES, description=f"1 to {MAX_CASES:,}")]
PriceUsd = Annotated[
    float,
    msgspec.Meta(
        ge=0.0, le=MAX_PRICE_PER_MTOK_USD,
        description=f"US dollars per million tokens: 0 (a known zero), or {MIN_NONZERO_PRICE_PER_MTOK_USD:f} "
        f"to {MAX_PRICE_PER_MTOK_USD:,.0f}",
    ),
]
#: No control characters, no whitespace at either end ("team-a " would silently match nothing).
#: Lookaheads only: Python's ``$`` also matches before a final newline, ECMA's does not.
NAME_PATTERN = r"^(?!\s)(?![\s\S]*[\x00-\x1f\x7f])(?![\s\S]*\s$)"
NAME_RULE = f"1 to {MAX_NAME_CHARS} characters, no control characters, no whitespace at either end"
Name = Annotated[
    str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS, pattern=NAME_PATTERN, description=NAME_RULE)
]


class PriceIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A list price in US dollars per million tokens."""

    input_per_mtok_usd: PriceUsd
    output_per_mtok_usd: PriceUsd

    def to_price(self) -> Price:
        return Price(round(self.input_per_mtok_usd * 1_000_000), round(self.output_per_mtok_usd * 1_000_000))


class JudgeIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    model: Name | None = None
    rubric: Name | None = None
    max_tokens: Tokens | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None


class SourceIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Where a trial's exchanges come from: ``live`` (the tap, the default) or ``replay`` (the
    team's retention window, exchanges served in ``[from, to)``; RFC 3339 times, UTC when they
    carry no offset). See :mod:`sidecar.services.replay`."""

    kind: Literal["live", "replay"] = "live"
    from_: datetime | None = msgspec.field(default=None, name="from")
    to: datetime | None = None


class TrialCreate(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The body of ``POST /v1/trials``. Unknown fields are refused (typos are caught)."""

    team: Name
    incumbent_model: Name
    candidate_model: Name
    spend_cap_usd: Annotated[
        float,
        msgspec.Meta(ge=MIN_CAP_USD, le=MAX_CAP_USD, description=f"US dollars, {MIN_CAP_USD:f} to {MAX_CAP_USD:,.0f}"),
    ]
    sample_rate: Rate = 0.1
    route: Name | None = None
    gateway: Name | None = None
    expected_cases: Cases = 1000
    tolerance: Annotated[
        float, msgspec.Meta(ge=MIN_TOLERANCE, lt=0.5, description=f"win-rate scale, {MIN_TOLERANCE} to below 0.5")
    ] = 0.05
    min_cases: Cases = 20
    audit_share: Rate | None = None
    max_tokens: Tokens | None = None
    judge: JudgeIn | None = None
    candidate_price: PriceIn | None = None
    judge_price: PriceIn | None = None
    incumbent_price: PriceIn | None = None
    #: A replay trial's window (``{"kind": "replay", "from": ..., "to": ...}``); absent: live.
    source: SourceIn | None = None
    #: A replay trial replays at most this many exchanges of its window (default: all of them).
    sample_size: Cases | None = None
    #: Once decided: ``stop`` (dispatch nothing more; the decision, evidence and spend freeze) or
    #: ``continue`` (keep narrowing the bounds up to ``expected_cases``).
    on_decision: Literal["stop", "continue"] = "stop"
    #: The segments the trial is also read by (issue 27): ``route``, ``model``, ``gateway``,
    #: ``length`` (a content-free bucket of the prompt's length) and ``tag:NAME``.
    segments: list[str] = []
    #: Segment values tracked (over all segments); the rest are pooled as ``other``.
    segment_cap: int = DEFAULT_CAP
    #: Judged cases per tracked value that sampling favours (within the spend cap); None: none.
    segment_min_cases: int | None = None


_create_decoder = msgspec.json.Decoder(TrialCreate)
_PRICE_SHAPE = '{"input_per_mtok_usd": ..., "output_per_mtok_usd": ...}'
_REGEX_MESSAGE = re.compile(rf"{PATTERN_WORDS} '.*'")


def decode_create(body: bytes) -> TrialCreate:
    """Decode and check a create body; :class:`BadRequest` names the first bad field's JSON path."""
    try:
        check_utf8(body, "application/json")  # invalid UTF-8 anywhere, a key included, is named
        create = _create_decoder.decode(body)
    except DecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}", field=exc.path) from exc
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        # The name pattern is for machines (it is in the OpenAPI document); people get the rule.
        raise BadRequest(_REGEX_MESSAGE.sub(f"must be {NAME_RULE}", message), field=path) from exc
    except msgspec.DecodeError as exc:  # malformed JSON, a NaN literal: named where it is
        message, path = where_decode_failed(exc, body)
        raise BadRequest(f"body is not JSON: {message}", field=path) from exc
    for path, price in (("$.candidate_price", create.candidate_price), ("$.judge_price", create.judge_price),
                        ("$.incumbent_price", create.incumbent_price)):
        if price is None:
            continue
        for name in ("input_per_mtok_usd", "output_per_mtok_usd"):
            value = getattr(price, name)
            if 0 < value < MIN_NONZERO_PRICE_PER_MTOK_USD:
                raise BadRequest(
                    f"a price is 0 (a known zero) or at least {MIN_NONZERO_PRICE_PER_MTOK_USD:f} dollars per million "
                    f"tokens (one micro-dollar), got {value!r}",
                    field=f"{path}.{name}",
                )
    _check_segments(create)
    return create


def _check_segments(create: TrialCreate) -> None:
    """The segment fields' values: refused 422 ``invalid_segments`` naming the field."""
    problem = check_segments(create.segments)
    if problem is not None:
        index, message = problem
        raise InvalidSegments(message, field="$.segments" if index < 0 else f"$.segments[{index}]")
    cap_problem = check_cap(create.segment_cap)
    if cap_problem is not None:
        raise InvalidSegments(cap_problem, field="$.segment_cap")
    if create.segment_min_cases is not None:
        if not 1 <= create.segment_min_cases <= MAX_CASES:
            raise InvalidSegments(f"segment_min_cases is 1 to {MAX_CASES:,}", field="$.segment_min_cases")
        if not create.segments:
            raise InvalidSegments("segment_min_cases needs segments", field="$.segment_min_cases")


#: For the OpenAPI document (ECMA semantics); the check itself is :func:`check_idempotency_key`.
KEY_PATTERN = r"^[\x20-\x7e]+$"


def check_idempotency_key(values: Sequence[str]) -> str | None:
    """The ``Idempotency-Key`` of a create request from its header values, or ``None``.

    One header, 1 to 255 printable ASCII characters (spaces inside allowed); otherwise
    :class:`BadRequest` naming the header. A non-UTF-8 value reaches here with surrogates
    and is refused like any other non-ASCII one.
    """
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(f"send one {IDEMPOTENCY_KEY} header, not {len(values)}", field=IDEMPOTENCY_KEY)
    key = values[0]
    if not 1 <= len(key) <= MAX_KEY_CHARS:
        raise BadRequest(f"{IDEMPOTENCY_KEY} must be 1 to {MAX_KEY_CHARS} characters", field=IDEMPOTENCY_KEY)
    if not (key.isascii() and key.isprintable()):
        raise BadRequest(f"{IDEMPOTENCY_KEY} must be printable ASCII (letters, digits, punctuation, spaces)",
                         field=IDEMPOTENCY_KEY)
    return key


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
    execution_site: Site = "local",
    trial_id: str | None = None,
) -> TrialRecord:
    """The record of a new trial. ``prompt_retention`` and ``execution_site`` are the team's
    posture now (:func:`sidecar.services.posture.current_posture`), pinned on the trial."""
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
    except UnknownRubric as exc:
        raise BadRequest(str(exc), field="$.judge.rubric") from exc
    except JudgeError as exc:
        raise BadRequest(str(exc), field="$.judge") from exc

    candidate = _resolve(resolve, body.candidate_model, "$.candidate_model")
    judge = _resolve(resolve, judge_model, "$.judge.model")
    cand_price = body.candidate_price.to_price() if body.candidate_price else candidate.price
    judge_price = body.judge_price.to_price() if body.judge_price else judge.price
    if cand_price is None:
        raise SpendUnbounded(
            f"candidate model {body.candidate_model!r} has no list price; add one to the config or send "
            f"candidate_price {_PRICE_SHAPE} (CLI: --candidate-price INPUT OUTPUT)",
            field="$.candidate_price",
        )
    if judge_price is None:
        raise SpendUnbounded(
            f"judge model {judge_model!r} has no list price; add one to the config or send "
            f"judge_price {_PRICE_SHAPE} (CLI: --judge-price INPUT OUTPUT)",
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
        execution_site=execution_site,
        prompt_retention=prompt_retention,
        created_at=now,
        on_decision=body.on_decision,
        segments=json.dumps(list(body.segments)),
        segment_cap=body.segment_cap,
        segment_min_cases=body.segment_min_cases,
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
