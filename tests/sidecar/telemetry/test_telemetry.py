"""Traces: a span per case, its candidate call and each judgment (with the judge's calls) as
children, in the gateway's trace when the exchange carries its ``traceparent``; sampling;
nothing built when nothing is configured; the ``[telemetry]`` table (docs/telemetry.md).

Spans are read from the SDK's in-memory exporter handed to the sidecar through the harness;
``tests/sidecar/telemetry/test_telemetry_export.py`` proves the OTLP/HTTP export for real."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from sidecar.config import TelemetryConfig, load_config
from sidecar.demo.fake_provider import FakeModel
from sidecar.errors import ConfigError
from sidecar.telemetry import Telemetry
from sidecar.telemetry.provider import InstrumentedProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange

GATEWAY_TRACE = "0af7651916cd43dd8448eb211c80319c"
GATEWAY_SPAN = "b7ad6b7169203331"


def traceparent(flags: str = "01", trace: str = GATEWAY_TRACE, span: str = GATEWAY_SPAN) -> str:
    return f"00-{trace}-{span}-{flags}"


class Captured:
    """In-memory telemetry for one sidecar process: every span as it ends, metrics on demand."""

    def __init__(self, cfg: TelemetryConfig | None = None) -> None:
        self.spans = InMemorySpanExporter()
        self.reader = InMemoryMetricReader()
        self.telemetry = Telemetry.start(cfg or TelemetryConfig(), process="sidecar",
                                         span_exporter=self.spans, metric_reader=self.reader)

    def finished(self) -> tuple[ReadableSpan, ...]:
        return self.spans.get_finished_spans()

    def close(self) -> None:
        self.telemetry.shutdown()


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    pid = parent.context.span_id
    return [s for s in spans if s.parent is not None and s.parent.span_id == pid]


async def test_a_case_is_one_trace_of_its_dispatch_and_judgments_in_the_gateways_trace(tmp_path: Path) -> None:
    models = {
        INCUMBENT: FakeModel(),
        CANDIDATE: FakeModel(quality=0.7),
        # The first judgment gets no label and asks again: two judge calls under one judgment.
        JUDGE: FakeModel(judge=True, script=["no_label", "ok", "ok"]),
    }
    cap = Captured()
    try:
        async with Harness(tmp_path, models=models, telemetry=cap.telemetry) as h:
            trial = await h.create_trial(audit_share=1.0)  # every case also judged in the swapped order
            await h.send([exchange(1, traceparent=traceparent())])
            await h.settle(trial["id"], 1)
        spans = cap.finished()
        (case,) = named(spans, "shadowtrial.case")
        # Parented by the gateway's span: the same trace, the gateway's span as the remote parent.
        assert f"{case.context.trace_id:032x}" == GATEWAY_TRACE
        assert case.parent is not None and case.parent.is_remote and f"{case.parent.span_id:016x}" == GATEWAY_SPAN
        assert {s.context.trace_id for s in spans} == {case.context.trace_id}
        attrs = dict(case.attributes or {})
        assert attrs["shadowtrial.trial.id"] == trial["id"] and attrs["shadowtrial.case.outcome"] == "judged"
        assert attrs["shadowtrial.judge.version"] == trial["judge"]["version_id"]
        assert attrs["shadowtrial.case.audited"] is True and attrs["shadowtrial.case.charged_micros"] > 0

        under_case = children(spans, case)
        (dispatch,) = [s for s in under_case if s.name == f"chat {CANDIDATE}"]
        judgments = [s for s in under_case if s.name == "shadowtrial.judge"]
        assert len(under_case) == 3 and len(judgments) == 2
        assert dispatch.kind is SpanKind.CLIENT
        d = dict(dispatch.attributes or {})
        assert d["gen_ai.operation.name"] == "chat" and d["gen_ai.request.model"] == CANDIDATE
        assert d["gen_ai.provider.name"] == "openai" and d["shadowtrial.call.role"] == "candidate"
        assert d["gen_ai.usage.output_tokens"] > 0 and d["gen_ai.response.finish_reasons"] == ("stop",)

        first, audit = sorted(judgments, key=lambda s: bool((s.attributes or {})["shadowtrial.judge.audit"]))
        calls = children(spans, first)
        assert [c.name for c in calls] == [f"chat {JUDGE}"] * 2  # the label retry is a second child span
        assert {dict(c.attributes or {})["shadowtrial.call.role"] for c in calls} == {"judge"}
        assert dict(first.attributes or {})["shadowtrial.judge.calls"] == 2
        assert len(children(spans, audit)) == 1
        for j in judgments:
            (event,) = j.events
            assert event.name == "gen_ai.evaluation.result"
            assert dict(event.attributes or {})["gen_ai.evaluation.name"] == "shadowtrial.paired"
            assert dict(event.attributes or {})["gen_ai.evaluation.score.label"] == dict(j.attributes or {})[
                "shadowtrial.judge.outcome"]
        # The candidate's provider got the case's trace context, so a tracing gateway joins it.
        (sent,) = [r for r in h.fake.requests if r.model == CANDIDATE]
        assert sent.headers.get("traceparent", "").split("-")[1:3] == [GATEWAY_TRACE, f"{dispatch.context.span_id:016x}"]
    finally:
        cap.close()


async def test_failures_are_error_statuses_with_a_type_and_no_message(tmp_path: Path) -> None:
    models = {
        INCUMBENT: FakeModel(),
        CANDIDATE: FakeModel(script=["503", "503", "503"]),  # every attempt of the call is refused
        JUDGE: FakeModel(judge=True),
    }
    cap = Captured()
    try:
        async with Harness(tmp_path, models=models, telemetry=cap.telemetry, workers=1) as h:
            trial = await h.create_trial(audit_share=0.0)
            await h.send([exchange(1)])
            view = await h.settle(trial["id"], 1)
        assert view["funnel"]["outcomes"]["candidate_failed"] == 1
        spans = cap.finished()
        (case,) = named(spans, "shadowtrial.case")
        (dispatch,) = children(spans, case)
        for span, error in ((case, "candidate_failed"), (dispatch, "http_5xx")):
            assert span.status.status_code is StatusCode.ERROR and span.status.description is None
            assert dict(span.attributes or {})["error.type"] == error
        assert dict(dispatch.attributes or {})["shadowtrial.call.attempts"] > 1  # the retries, as a count
        assert case.parent is None  # no gateway trace context: a trace of its own
    finally:
        cap.close()


async def test_an_invalid_traceparent_is_ignored_not_refused(tmp_path: Path) -> None:
    cap = Captured()
    try:
        async with Harness(tmp_path, telemetry=cap.telemetry) as h:
            trial = await h.create_trial(audit_share=0.0)
            bad = ["garbage", traceparent(trace="0" * 32), "01-" + GATEWAY_TRACE + "-" + GATEWAY_SPAN, "x" * 10_000]
            reply = await h.send([exchange(i, traceparent=tp) for i, tp in enumerate(bad)])
            assert reply["accepted"] == len(bad)
            view = await h.settle(trial["id"], len(bad))
        assert view["funnel"]["outcomes"]["judged"] == len(bad)
        cases = named(cap.finished(), "shadowtrial.case")
        assert len(cases) == len(bad) and all(c.parent is None for c in cases)
    finally:
        cap.close()


@pytest.mark.parametrize(("tp", "traced"), [(None, False), (traceparent("01"), True), (traceparent("00"), False)])
async def test_sample_ratio_applies_where_the_gateway_did_not_decide(tmp_path: Path, tp: str | None, traced: bool) -> None:
    cap = Captured(TelemetryConfig(sample_ratio=0.0))
    try:
        async with Harness(tmp_path, telemetry=cap.telemetry) as h:
            trial = await h.create_trial(audit_share=0.0)
            await h.send([exchange(1, traceparent=tp)])
            view = await h.settle(trial["id"], 1)
        assert view["funnel"]["outcomes"]["judged"] == 1
        assert bool(named(cap.finished(), "shadowtrial.case")) is traced
        assert len(cap.finished()) == (4 if traced else 0)  # the case, its dispatch, its judgment and its call
    finally:
        cap.close()


async def test_with_nothing_configured_nothing_is_built(tmp_path: Path) -> None:
    tel = Telemetry.start(TelemetryConfig(), process="sidecar")
    assert tel.tracer is None and tel.tracer_provider is None and tel.meter_provider is None
    tel.shutdown()
    async with Harness(tmp_path) as h:
        engine = h.runtime.engine
        assert h.runtime.telemetry.tracer is None and h.runtime.telemetry.meter_provider is None
        trial = await h.create_trial(audit_share=0.0)
        await h.send([exchange(1)])
        await h.settle(trial["id"], 1)
        subject = engine.subjects[trial["id"]]
        assert isinstance(subject.candidate, InstrumentedProvider) and subject.candidate._tracer is None
        assert engine._runner.tracer is None
        assert engine.counts()["call.candidate.ok"] == 1  # counted all the same, for /metrics


# -- the [telemetry] table ---------------------------------------------------------------------


def _load(tmp_path: Path, text: str, environ: dict[str, str]) -> TelemetryConfig:
    path = tmp_path / "c.toml"
    path.write_text(text)
    return load_config(str(path), environ).telemetry


def test_the_telemetry_table_and_the_standard_variables(tmp_path: Path) -> None:
    assert _load(tmp_path, "", {}) == TelemetryConfig()
    assert not TelemetryConfig().exporting
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318", "OTEL_SERVICE_NAME": "gw-sidecar"}
    got = _load(tmp_path, "", env)
    assert got.otlp_endpoint == "http://collector:4318" and got.service_name == "gw-sidecar" and got.exporting
    table = '[telemetry]\notlp_endpoint = "http://file:4318"\nsample_ratio = 0.25\ntraces = false\n'
    got = _load(tmp_path, table, env)  # the file wins over the standard variable
    assert got.otlp_endpoint == "http://file:4318" and got.sample_ratio == 0.25 and not got.traces
    got = _load(tmp_path, table, {**env, "SHADOWTRIAL_TELEMETRY__OTLP_ENDPOINT": "https://override:4318"})
    assert got.otlp_endpoint == "https://override:4318"


@pytest.mark.parametrize(("text", "environ", "expect"), [
    ("", {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "OTEL_EXPORTER_OTLP_ENDPOINT"),
    ('[telemetry]\notlp_endpoint = "ftp://x"\n', {}, "otlp_endpoint must be an http"),
    ("[telemetry]\nsample_ratio = 2\n", {}, "sample_ratio"),
    ("[telemetry]\nexport_interval_seconds = 0\n", {}, "export_interval_seconds"),
    ("[telemetry]\notlp_endpiont = \"http://x\"\n", {}, "otlp_endpiont"),
])
def test_a_bad_telemetry_setting_is_refused_by_name(tmp_path: Path, text: str, environ: dict[str, str], expect: str) -> None:
    with pytest.raises(ConfigError, match=expect):
        _load(tmp_path, text, environ)



def test_the_trace_context_travels_with_the_claim_through_the_journal_and_the_pipe(tmp_path: Path) -> None:
    import msgspec

    from sidecar.ingest.claims import Claim
    from sidecar.engine.pipe import decode_claims, encode_claims
    from sidecar.ingest.journal import Journal
    from sidecar.ingest.wire import Exchange

    ex = msgspec.convert(exchange(1, traceparent=traceparent()), Exchange)
    assert decode_claims(encode_claims([Claim("t1", ex, 7)]))[0].exchange.traceparent == traceparent()
    journal = Journal(str(tmp_path / "intake"))
    assert journal.open() == []
    journal.write(journal.number([Claim("t1", ex)]))
    journal.close(keep=None)  # as after a crash: everything is offered again
    reopened = Journal(str(tmp_path / "intake"))
    (again,) = reopened.open()
    reopened.close(keep=None)
    assert again.exchange.traceparent == traceparent()


def test_whether_a_case_is_traced_is_the_gateways_decision_else_the_ratio() -> None:
    from sidecar.telemetry.spans import gateway_context, traced

    sampled, unsampled = gateway_context(traceparent("01")), gateway_context(traceparent("00"))
    assert traced(sampled, 0.0) and not traced(unsampled, 1.0)
    assert traced(None, 1.0) and not traced(None, 0.0)
    assert traced(None, 0.25, draw=lambda: 0.1) and not traced(None, 0.25, draw=lambda: 0.5)
