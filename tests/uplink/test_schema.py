"""The uplink wire schema: round trips, and compatibility in both directions."""

from __future__ import annotations

import json

import msgspec
import pytest

from uplink.schema import (
    CONTENT_KINDS,
    KINDS,
    SCHEMA_VERSION,
    AlertRecord,
    CaseCost,
    CaseJudgment,
    CaseResult,
    ExchangeRecord,
    PostureRecord,
    SchemaError,
    SegmentState,
    TrialSpec,
    TrialState,
    UnknownRecord,
    decode_batch,
    encode_batch,
    encode_record,
)


def case_result(**over: object) -> CaseResult:
    fields: dict[str, object] = dict(
        id="case:c1", trial_id="t1", case_id="c1", exchange_id="x1", team="payments", outcome="judged",
        finished_at=1_700_000_000.5, judge_version_id="jv1",
        judgments=[CaseJudgment(order="candidate_first", outcome="verdict", score=1, strong=True)],
        score=1.0, candidate_cost=CaseCost(1200, "complete"), judge_cost=CaseCost(None, "unknown"),
        charged_micros=9000, candidate_latency_ms=812.0,
    )
    fields.update(over)
    return CaseResult(**fields)  # type: ignore[arg-type]


def trial_spec(**over: object) -> TrialSpec:
    fields: dict[str, object] = dict(
        id="trial_spec:t1:5", trial_id="t1", team="payments", revision=5, status="running",
        execution_site="control_plane", prompt_retention=True, incumbent_model="gpt-big", candidate_model="gpt-small",
        sample_rate=0.5, cap_micros=10_000_000, expected_cases=400, delta=0.05, min_cases=30, audit_share=0.1,
        candidate_max_tokens=512, candidate_price_in=500_000, candidate_price_out=2_000_000, judge_price_in=1_000_000,
        judge_price_out=4_000_000, judge_model="judge", judge_version_id="jv1", judge_version_name="paired-v1",
        judge_spec_json='{"name": "paired-v1"}', created_at=1.0,
    )
    fields.update(over)
    return TrialSpec(**fields)  # type: ignore[arg-type]


def every_kind() -> list[CaseResult | TrialState | AlertRecord | ExchangeRecord | TrialSpec | PostureRecord]:
    return [
        case_result(),
        TrialState(id="trial:t1:3", trial_id="t1", team="payments", revision=3, status="running", at=1.0,
                    incumbent_model="gpt-big", candidate_model="gpt-small", execution_site="local",
                    judge_version_id="jv1", verdict="Collecting", funnel={"judged": 3}),
        AlertRecord(id="alert:a1:firing", alert_id="a1", watch_id="w1", team="payments", state="firing", at=2.0,
                    statistic=5.1, threshold=4.0),
        ExchangeRecord(id="exchange:t1:x1", trial_id="t1", team="payments", exchange_id="x1", gateway="gw",
                       model="gpt-big", request={"messages": [{"role": "user", "content": "hi"}]},
                       response={"content": "hello"}),
        trial_spec(),
        PostureRecord(id="posture:payments:gw:5", team="payments", gateway="gw", revision=5, at=3.0,
                      content_uplink=True, prompt_retention=True, site="control_plane"),
    ]


def test_every_kind_round_trips_in_one_batch() -> None:
    records = every_kind()
    assert sorted(r.__struct_config__.tag for r in records) == sorted(KINDS)  # type: ignore[type-var]
    batch, decoded = decode_batch(encode_batch("sidecar-a", 10.0, records))
    assert (batch.schema, batch.sidecar_id, batch.sent_at) == (SCHEMA_VERSION, "sidecar-a", 10.0)
    assert decoded == records


def test_records_already_encoded_are_sent_as_they_are() -> None:
    records = every_kind()
    _, decoded = decode_batch(encode_batch("s", 1.0, [encode_record(r) for r in records]))
    assert decoded == records


def test_unknown_is_not_zero_on_the_wire() -> None:
    """A cost nobody knows travels as no figure, never as 0."""
    wire = json.loads(encode_record(case_result()))
    assert wire["judge_cost"] == {}  # coverage "unknown" is the default, micros absent
    _, (back,) = decode_batch(encode_batch("s", 1.0, [case_result()]))
    assert isinstance(back, CaseResult)
    assert back.judge_cost.micros is None and back.judge_cost.coverage == "unknown"


def test_a_newer_sender_never_breaks_this_collector() -> None:
    """New fields are ignored and a new kind is kept raw, not refused with its batch."""
    known = json.loads(encode_record(case_result()))
    known["carbon_grams"] = 0.4  # a field added later
    known["judgments"][0]["rubric_hint"] = "x"
    future = {"kind": "experiment_result", "id": "exp:e1", "anything": [1, 2]}
    body = json.dumps({"schema": SCHEMA_VERSION, "sidecar_id": "s", "sent_at": 1.0, "records": [known, future],
                       "compression": "none"}).encode()
    _, (first, second) = decode_batch(body)
    assert first == case_result()
    assert isinstance(second, UnknownRecord)
    assert (second.id, second.kind) == ("exp:e1", "experiment_result")
    assert json.loads(second.raw) == future


def test_an_older_sender_is_read_with_defaults() -> None:
    """A version-1 sender that knew only the required fields still decodes."""
    minimal = {"kind": "case_result", "id": "case:c9", "trial_id": "t", "case_id": "c9", "exchange_id": "x",
               "team": "a", "outcome": "candidate_failed", "finished_at": 3.0}
    body = json.dumps({"schema": 1, "sidecar_id": "s", "sent_at": 1.0, "records": [minimal]}).encode()
    _, (record,) = decode_batch(body)
    assert isinstance(record, CaseResult)
    assert record.judgments == [] and record.candidate_cost.coverage == "unknown" and record.charged_micros == 0


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (b"{not json", "batch"),
        (b'{"schema": 1, "sidecar_id": "s", "sent_at": 1}', "batch"),
        (b'{"schema": 99, "sidecar_id": "s", "sent_at": 1, "records": []}', "schema"),
        (b'{"schema": 1, "sidecar_id": "s", "sent_at": 1, "records": [{"kind": "case_result"}]}', "records[0]"),
        (b'{"schema": 1, "sidecar_id": "s", "sent_at": 1, "records": [{"id": "a", "kind": "case_result", '
         b'"trial_id": "t", "case_id": "c", "exchange_id": "x", "team": "a", "outcome": "judged", '
         b'"finished_at": "soon"}]}', "records[0].finished_at"),
    ],
)
def test_a_batch_that_cannot_be_read_names_the_field(body: bytes, field: str) -> None:
    with pytest.raises(SchemaError) as caught:
        decode_batch(body)
    assert caught.value.field == field


def test_only_the_exchange_kind_can_carry_content() -> None:
    """Content-free kinds hold no free-form text: every str field is an id, a name or a code."""
    assert CONTENT_KINDS == {"exchange"}
    free_text_ok = {"id", "trial_id", "case_id", "exchange_id", "team", "outcome", "judge_version_id", "gateway",
                    "status", "incumbent_model", "candidate_model", "execution_site", "verdict", "decision",
                    "route", "alert_id", "watch_id", "state", "order", "error", "coverage", "funnel",
                    # A segment key names a route, model, gateway, length bucket or gateway tag
                    # (metadata the gateway sets, like ``route``), never prompt or answer text.
                    "key", "segments_rejected"}
    for kind in (CaseResult, TrialState, AlertRecord, CaseJudgment, CaseCost, SegmentState):
        for f in msgspec.structs.fields(kind):
            text = "str" in repr(f.type)
            assert not text or f.name in free_text_ok, f"{kind.__name__}.{f.name} could carry text"
            assert "Any" not in repr(f.type), f"{kind.__name__}.{f.name} could carry anything"


def test_an_older_collector_keeps_a_trial_spec_raw(monkeypatch: pytest.MonkeyPatch) -> None:
    """A collector from before ``trial_spec`` (its KINDS without it) keeps the record as it came and
    acknowledges it; a newer one reads the same bytes."""
    import uplink.schema as schema

    body = encode_batch("s", 1.0, [encode_record(case_result()), encode_record(trial_spec())])
    monkeypatch.setattr(schema, "KINDS", ("case_result", "trial_state", "alert", "exchange"))
    _, (known, unknown) = decode_batch(body)
    assert known == case_result()
    assert isinstance(unknown, UnknownRecord) and (unknown.id, unknown.kind) == ("trial_spec:t1:5", "trial_spec")
    monkeypatch.undo()
    _, (again,) = decode_batch(encode_batch("s", 2.0, [unknown.raw]))
    assert again == trial_spec()


def test_an_older_trial_spec_is_read_with_defaults() -> None:
    """Fields with defaults may be absent (a sender that knew fewer of them)."""
    wire = json.loads(encode_record(trial_spec()))
    for name in ("incumbent_price_in", "incumbent_price_out", "status_reason", "route", "gateway", "started_by"):
        wire.pop(name, None)
    _, (back,) = decode_batch(json.dumps({"schema": 1, "sidecar_id": "s", "sent_at": 1.0, "records": [wire]}).encode())
    assert back == trial_spec()


def test_a_trial_spec_carries_no_content() -> None:
    """Its texts are ids, model names, the judge's spec and the reason an operator or the posture wrote."""
    assert "trial_spec" not in CONTENT_KINDS
    texts = {f.name for f in msgspec.structs.fields(TrialSpec) if "str" in repr(f.type)}
    assert texts <= {"id", "trial_id", "team", "status", "execution_site", "incumbent_model", "candidate_model",
                     "judge_model", "judge_version_id", "judge_version_name", "judge_spec_json", "status_reason",
                     "route", "gateway", "started_by", "on_decision", "segments"}
    assert not any("Any" in repr(f.type) for f in msgspec.structs.fields(TrialSpec))
