"""OTLP/HTTP export, for real: a loopback receiver (aiohttp, port 0) takes the protobuf POSTs
of the sidecar's process and of the engine's own process, which each export what they hold —
case traces from the engine's process, in the gateway's trace; tap counts from the sidecar's,
judgments from the engine's — and nothing is exported when nothing is configured."""

from __future__ import annotations

import gzip
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue

from tests.harness import CANDIDATE, Harness, exchange
from tests.sidecar.telemetry.test_telemetry import GATEWAY_SPAN, GATEWAY_TRACE, traceparent


class Receiver:
    """An OTLP/HTTP receiver on loopback: keeps every body POSTed to ``/v1/traces`` and
    ``/v1/metrics`` (decompressed), answers 200 with an empty protobuf response."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, bytes, str]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def _take(self, request: web.Request) -> web.Response:
        body = await request.read()
        encoding = request.headers.get("Content-Encoding", "")
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
        self.bodies.append((request.path, body, request.content_type))
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def __aenter__(self) -> Receiver:
        app = web.Application()
        app.router.add_post("/v1/traces", self._take)
        app.router.add_post("/v1/metrics", self._take)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()

    def traces(self) -> list[ExportTraceServiceRequest]:
        return [ExportTraceServiceRequest.FromString(b) for p, b, _ in self.bodies if p == "/v1/traces"]

    def metrics(self) -> list[ExportMetricsServiceRequest]:
        return [ExportMetricsServiceRequest.FromString(b) for p, b, _ in self.bodies if p == "/v1/metrics"]


def attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        assert isinstance(kv, KeyValue)
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


def telemetry_table(url: str) -> str:
    return f'[telemetry]\notlp_endpoint = "{url}"\nexport_interval_seconds = 0.2\nexport_timeout_seconds = 5\n'


async def test_both_processes_export_over_otlp_http_to_a_loopback_receiver(tmp_path: Path) -> None:
    async with Receiver() as rx:
        async with Harness(tmp_path, isolation="process", extra=telemetry_table(rx.url)) as h:
            trial = await h.create_trial(audit_share=0.0)
            await h.send([exchange(0, traceparent=traceparent())] + [exchange(i) for i in range(1, 5)])
            await h.settle(trial["id"], 5)
            engine_pid = h.runtime.engine.pid
        # The stop flushed both processes' providers.
    assert engine_pid is not None
    assert {ct for _, _, ct in rx.bodies} == {"application/x-protobuf"}

    spans: list[tuple[dict[str, Any], Any]] = []
    for req in rx.traces():
        for rs in req.resource_spans:
            resource = attrs(rs.resource.attributes)
            for ss in rs.scope_spans:
                assert ss.scope.name == "shadowtrial"
                spans.extend((resource, s) for s in ss.spans)
    cases = [s for _, s in spans if s.name == "shadowtrial.case"]
    assert len(cases) == 5
    assert {r["shadowtrial.process"] for r, _ in spans} == {"engine"}  # cases run in the engine's process
    assert {r["service.name"] for r, _ in spans} == {"shadowtrial"}
    (joined,) = [c for c in cases if c.trace_id.hex() == GATEWAY_TRACE]
    assert joined.parent_span_id.hex() == GATEWAY_SPAN
    assert attrs(joined.attributes)["shadowtrial.trial.id"] == trial["id"]
    under = [s for _, s in spans if s.parent_span_id == joined.span_id]
    assert sorted(s.name for s in under) == [f"chat {CANDIDATE}", "shadowtrial.judge"]

    # Each process exports the counters it holds; the last export of each is its total.
    last: dict[str, dict[tuple[str, frozenset[tuple[str, Any]]], float]] = {}
    for req in rx.metrics():
        for rm in req.resource_metrics:
            process = attrs(rm.resource.attributes)["shadowtrial.process"]
            seen = last.setdefault(process, {})
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    points = m.sum.data_points if m.HasField("sum") else m.gauge.data_points
                    for p in points:
                        seen[(m.name, frozenset(attrs(p.attributes).items()))] = p.as_int or p.as_double
    assert set(last) == {"sidecar", "engine"}
    assert last["sidecar"][("shadowtrial.exchanges.received", frozenset())] == 5
    assert last["sidecar"][("shadowtrial.cases.sampled", frozenset())] == 5
    assert ("shadowtrial.judgments", frozenset({("outcome", "tie")})) not in last["sidecar"]
    judged = Counter({k[1]: v for k, v in last["engine"].items() if k[0] == "shadowtrial.judgments"})
    assert sum(judged.values()) == 5
    assert last["engine"][("shadowtrial.funnel.outcomes", frozenset({("outcome", "judged")}))] == 5
    assert ("shadowtrial.exchanges.received", frozenset()) not in last["engine"]


async def test_with_traces_and_metrics_off_nothing_reaches_the_endpoint(tmp_path: Path) -> None:
    async with Receiver() as rx:
        async with Harness(tmp_path, isolation="process",
                           extra=telemetry_table(rx.url) + "traces = false\nmetrics = false\n") as h:
            assert h.runtime.telemetry.tracer is None and h.runtime.telemetry.meter_provider is None
            trial = await h.create_trial(audit_share=0.0)
            await h.send([exchange(i, traceparent=traceparent()) for i in range(3)])
            await h.settle(trial["id"], 3)
    assert rx.bodies == []
