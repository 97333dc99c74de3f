"""The uplink's wire schema: what a sidecar sends a control-plane collector.

One POST carries one :class:`Batch`: an envelope (schema version, sidecar id,
when it was sent) and its records. Each record has a ``kind`` and a stable
``id``; the collector deduplicates by ``id`` (delivery is at least once,
DESIGN.md rule 9) and acknowledges the ids it holds.

Compatibility runs both ways, so that a fleet can upgrade one side at a time:

- **Newer sender, older collector.** Unknown *fields* are ignored (msgspec's
  default). An unknown *kind* does not fail its batch: :func:`decode_batch`
  hands it back as an :class:`UnknownRecord` with its raw bytes, which a
  collector keeps as they came and acknowledges, so an upgraded collector can
  read it later and the sender never retries it forever.
- **Older sender, newer collector.** Every field added after version 1 has a
  default; a record without it decodes.
- ``schema`` is the envelope's *major* version. It changes only when a field's
  meaning changes; a collector answers a major it does not know with
  ``409 schema_unsupported`` naming those it does, and the sender keeps the
  records until one that does answers.

Content: only :class:`ExchangeRecord` carries prompt or answer text, and only
for a team whose posture allows content uplink; every other kind is
content-free by construction (ids, counts, scores, costs and latencies).
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

import msgspec

#: The envelope's major version (see the module docstring).
SCHEMA_VERSION = 1
SUPPORTED_SCHEMAS: frozenset[int] = frozenset({1})

Coverage = Literal["complete", "partial", "unknown"]


class _Record(msgspec.Struct, frozen=True, tag_field="kind", omit_defaults=True):
    """Every record: a stable ``id``, unique across kinds and sidecars."""

    id: str


class CaseCost(msgspec.Struct, frozen=True, omit_defaults=True):
    """One priced part of a case, micro-dollars at list price. ``micros`` is what is
    known; coverage says whether that is all of it (unknown is never zero)."""

    micros: int | None = None
    coverage: Coverage = "unknown"


class CaseJudgment(msgspec.Struct, frozen=True, omit_defaults=True):
    """One paired judgment of a case: its order, its outcome and its strength.
    ``score`` is from the candidate's side (+1 better, 0 tie, -1 worse)."""

    order: Literal["incumbent_first", "candidate_first"]
    outcome: Literal["verdict", "error"]
    audit: bool = False
    score: int | None = None
    strong: bool = False
    #: The judge's error described by its kind only (never a message: no content).
    error: str | None = None


class CaseResult(_Record, frozen=True, tag="case_result"):
    """A case that reached its funnel outcome. Content-free.

    ``id`` is ``case:<case_id>``: a case ends once, so its result is one record.
    """

    trial_id: str
    case_id: str
    exchange_id: str
    team: str
    #: The funnel outcome (``judged``, ``candidate_failed``, ``cap_reached``, ...).
    outcome: str
    finished_at: float
    judge_version_id: str | None = None
    judgments: list[CaseJudgment] = []
    #: The case's paired score from the candidate's side, when judged.
    score: float | None = None
    candidate_cost: CaseCost = CaseCost()
    judge_cost: CaseCost = CaseCost()
    incumbent_cost: CaseCost = CaseCost()
    #: Charged against the cap: known cost plus held worst cases of unpriced calls.
    charged_micros: int = 0
    candidate_latency_ms: float | None = None
    incumbent_latency_ms: float | None = None
    gateway: str | None = None


class Interval(msgspec.Struct, frozen=True):
    low: float
    high: float


class SegmentState(msgspec.Struct, frozen=True):
    """One tracked segment value of a trial (issue 27): its key (``tag:tier=reasoning``, or
    ``other``), judged cases, verdict code and decision bounds (win-rate scale). Metadata and
    numbers only: a segment value is a route, model, gateway, length bucket or gateway tag."""

    key: str
    judged: int
    decision: str
    interval: Interval
    win_rate: float | None = None


class TrialState(_Record, frozen=True, tag="trial_state"):
    """A trial's state as the sidecar last folded it. Content-free.

    ``id`` is ``trial:<trial_id>:<revision>``; ``revision`` only grows, so a
    collector keeps the state with the highest revision it has seen.
    """

    trial_id: str
    team: str
    revision: int
    status: str
    at: float
    incumbent_model: str
    candidate_model: str
    execution_site: str
    judge_version_id: str
    #: The worded verdict (``Adoptable``, ``Rejected``, ``Collecting``, ...) and its decision.
    verdict: str
    decision: str | None = None
    #: The win-rate interval the decision rests on, when there is one.
    interval: Interval | None = None
    funnel: dict[str, int] = {}
    cap_micros: int = 0
    spent_micros: int = 0
    known_micros: int = 0
    unknown_calls: int = 0
    gateway: str | None = None
    route: str | None = None
    #: The reported 95% bootstrap interval of the win rate (None below 20 scored cases).
    bootstrap: Interval | None = None
    #: The cases the verdict rests on (scored cases).
    cases: int = 0
    #: Per segment value (issue 27), and the keys of those Rejected (empty: none, or no segments).
    segments: list[SegmentState] = []
    segments_rejected: list[str] = []


class AlertRecord(_Record, frozen=True, tag="alert"):
    """An alert transition of a watch. Content-free.

    ``id`` is ``alert:<alert_id>:<state>``: each transition is one record.
    """

    alert_id: str
    watch_id: str
    team: str
    state: Literal["firing", "acknowledged", "resolved"]
    at: float
    statistic: float | None = None
    threshold: float | None = None


class ExchangeRecord(_Record, frozen=True, tag="exchange"):
    """A sampled exchange with its bodies, for control-plane execution (issue 11 item 5).

    Sent only for a team whose posture allows content uplink; a collector refuses it
    (``403 content_not_permitted``) for any other team. ``id`` is
    ``exchange:<trial_id>:<exchange_id>``.
    """

    trial_id: str
    team: str
    exchange_id: str
    gateway: str
    model: str
    request: dict[str, Any]
    response: dict[str, Any]
    served_at: str | None = None
    latency_ms: float | None = None
    route: str | None = None
    #: The gateway's tags of the exchange (issue 27), for the trial's ``tag:NAME`` segments.
    tags: dict[str, str] = {}


class TrialSpec(_Record, frozen=True, tag="trial_spec"):
    """A control-plane trial as the collector runs it (issue 11 item 5). Content-free.

    Written in the same transaction as the trial's creation and as each change of its
    status or pinned site (pause, stop, resume), while or since it is pinned to the
    control plane. ``id`` is ``trial_spec:<trial_id>:<revision>``; ``revision`` only grows
    (the change's time in microseconds), so a collector applies a spec only when its
    revision is the highest it holds for the trial, whatever order records arrive in.
    A collector runs the trial's cases only while the latest spec says ``running`` at
    ``execution_site = "control_plane"``.
    """

    trial_id: str
    team: str
    revision: int
    status: str
    execution_site: str
    prompt_retention: bool
    incumbent_model: str
    candidate_model: str
    sample_rate: float
    cap_micros: int
    expected_cases: int
    delta: float
    min_cases: int
    audit_share: float
    candidate_max_tokens: int
    #: Prices pinned at creation, micro-dollars per million tokens.
    candidate_price_in: int
    candidate_price_out: int
    judge_price_in: int
    judge_price_out: int
    judge_model: str
    judge_version_id: str
    judge_version_name: str
    judge_spec_json: str
    created_at: float
    incumbent_price_in: int | None = None
    incumbent_price_out: int | None = None
    status_reason: str | None = None
    route: str | None = None
    gateway: str | None = None
    started_by: str | None = None
    #: What the trial does once decided: ``stop`` or ``continue`` (issue 26). A spec without it
    #: was written by a sidecar from before the setting, whose trials ran to ``expected_cases``:
    #: read as ``continue``, as the sidecar's own store reads such a trial's row.
    on_decision: str | None = None
    #: The segments the trial is read by (issue 27: ``route``, ``tag:tier``, …; names, never
    #: content), how many values it tracks, and its per-segment minimum. A spec without them
    #: (from a sidecar before issue 27) reads as a trial read by no segment.
    segments: list[str] = []
    segment_cap: int = 16
    segment_min_cases: int | None = None


class PostureRecord(_Record, frozen=True, tag="posture"):
    """A team's posture as one sidecar sees it (issue 25 item 5). Content-free.

    Sent when it changes, from the sidecar's heartbeat: its gateway's content uplink, the
    team's prompt retention, and the execution site the posture gives the team's trials
    (``control_plane`` only when content uplink is on at every gateway of the team, retention
    is on and the team is cut over). ``id`` is ``posture:<team>:<gateway>:<revision>``;
    ``revision`` only grows (microseconds), so a collector reads the team's latest one: it
    takes the team's exchanges (content) only while that says ``control_plane``.
    """

    team: str
    gateway: str
    revision: int
    at: float
    content_uplink: bool
    prompt_retention: bool
    site: str


Record = CaseResult | TrialState | AlertRecord | ExchangeRecord | TrialSpec | PostureRecord

#: The record kinds this version knows, by tag.
KINDS: tuple[str, ...] = ("case_result", "trial_state", "alert", "exchange", "trial_spec", "posture")
#: Kinds that carry prompt or answer text.
CONTENT_KINDS: frozenset[str] = frozenset({"exchange"})


class UnknownRecord(msgspec.Struct, frozen=True):
    """A record of a kind this version does not know: kept raw, acknowledged, never lost."""

    id: str
    kind: str
    raw: bytes


class Batch(msgspec.Struct, frozen=True):
    """The envelope of one delivery."""

    schema: int
    sidecar_id: str
    sent_at: float
    records: list[msgspec.Raw]


class Ack(msgspec.Struct, frozen=True, omit_defaults=True):
    """The collector's answer: the ids it now holds (stored now or before). The sender
    deletes exactly these; anything else stays in its outbox and is sent again."""

    acked: list[str]
    #: Ids refused for good, with the reason code (e.g. ``content_not_permitted``).
    refused: dict[str, str] = {}
    #: Control-plane trials of the batch's ``exchange`` records that the collector no longer
    #: runs, with their status there (``cap_reached``, ``stopped``, ``completed``,
    #: ``posture_changed``, ...): the sender stops forwarding their exchanges (issue 25 item 5).
    #: Added after version 1 with a default: an older sender ignores it.
    trials: dict[str, str] = {}


class _Head(msgspec.Struct, frozen=True):
    id: str
    kind: str


class SchemaError(ValueError):
    """A batch a collector cannot read. ``field`` names the part that is wrong."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


_batch = msgspec.json.Decoder(Batch)
_head = msgspec.json.Decoder(_Head)
_record = msgspec.json.Decoder(Record)
_encoder = msgspec.json.Encoder()


def encode_batch(sidecar_id: str, sent_at: float, records: Sequence[Record] | Sequence[bytes]) -> bytes:
    """One envelope. ``records`` are Structs, or their JSON already encoded (an outbox keeps bytes)."""
    raws = [msgspec.Raw(r) if isinstance(r, bytes) else msgspec.Raw(_encoder.encode(r)) for r in records]
    return _encoder.encode(Batch(SCHEMA_VERSION, sidecar_id, sent_at, raws))


def encode_record(record: Record) -> bytes:
    return _encoder.encode(record)


def decode_batch(body: bytes) -> tuple[Batch, list[Record | UnknownRecord]]:
    """The envelope and its records, in order. Raises :class:`SchemaError` naming the
    field for a malformed envelope or record; a well-formed record of an unknown kind
    is an :class:`UnknownRecord`."""
    try:
        batch = _batch.decode(body)
    except msgspec.ValidationError as e:
        raise SchemaError(f"the batch envelope is not valid: {e}", _path(str(e), "batch")) from None
    except msgspec.DecodeError as e:
        raise SchemaError(f"the batch is not JSON: {e}", "batch") from None
    if batch.schema not in SUPPORTED_SCHEMAS:
        raise SchemaError(
            f"schema {batch.schema} is not supported; this collector reads {sorted(SUPPORTED_SCHEMAS)}", "schema"
        )
    records: list[Record | UnknownRecord] = []
    for i, raw in enumerate(batch.records):
        where = f"records[{i}]"
        try:
            head = _head.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise SchemaError(f"{where} has no usable id and kind: {e}", where) from None
        if head.kind not in KINDS:
            records.append(UnknownRecord(head.id, head.kind, bytes(raw)))
            continue
        try:
            records.append(_record.decode(raw))
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise SchemaError(f"{where} ({head.kind}) is not valid: {e}", _path(str(e), where)) from None
    return batch, records


def _path(message: str, prefix: str) -> str:
    """The ``$.a.b`` path msgspec puts at the end of a validation message, under ``prefix``."""
    marker = "at `$"
    at = message.rfind(marker)
    if at < 0:
        return prefix
    return prefix + message[at + len(marker):].rstrip("`")
