"""The tap's ``POST /v1/traces`` over real HTTP: OTLP/HTTP answers (200 + ExportTraceServiceResponse,
partial success), both encodings, gzip, and the tap's refusals in its JSON error shape."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import httpx
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from tests.harness import CANDIDATE, Harness
from tests.sidecar.ingest.otlp_spans import export, semconv_chat, span

PROTOBUF = "application/x-protobuf"


async def post(h: Harness, body: bytes, content_type: str = PROTOBUF, **headers: str) -> httpx.Response:
    assert h.tap
    return await h.tap.post("/v1/traces", content=body, headers={"Content-Type": content_type, **headers})


def response_of(r: httpx.Response) -> ExportTraceServiceResponse:
    assert r.status_code == 200, r.text
    out = ExportTraceServiceResponse()
    if r.headers["content-type"].startswith(PROTOBUF):
        out.ParseFromString(r.content)
    else:
        json_format.Parse(r.text, out)
    return out


def error_of(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}, body
    return dict(body["error"])


def otlp_json(request: Any) -> bytes:
    """The OTLP JSON encoding: proto3 JSON with trace and span ids in hex."""
    doc = json_format.MessageToDict(request)
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for name in ("traceId", "spanId"):
                    sp[name] = __import__("base64").b64decode(sp[name]).hex()
    return json.dumps(doc).encode()


async def test_protobuf_json_and_gzip_exports_are_taken_and_sampled(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0, audit_share=0.0)
        r = await post(h, export([span(i, semconv_chat(i)) for i in range(3)]).SerializeToString())
        assert r.headers["content-type"].startswith(PROTOBUF)
        assert not response_of(r).HasField("partial_success")
        r = await post(h, otlp_json(export([span(i, semconv_chat(i)) for i in range(3, 5)])), "application/json")
        assert r.headers["content-type"].startswith("application/json") and r.json() == {}
        body = gzip.compress(export([span(5, semconv_chat(5))]).SerializeToString())
        r = await post(h, body, **{"Content-Encoding": "gzip"})
        assert not response_of(r).HasField("partial_success")
        view = await h.settle(trial["id"], 6)
        assert view["funnel"]["outcomes"]["judged"] == 6, view["funnel"]
        assert h.fake.calls[CANDIDATE] == 6


async def test_partial_success_counts_rejected_spans_and_warns_of_spans_without_content(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        await h.create_trial(sample_rate=1.0)
        no_team = export([span(0, semconv_chat(0)), span(1, semconv_chat(1))], resource={"service.name": "gw"})
        partial = response_of(await post(h, no_team.SerializeToString())).partial_success
        assert partial.rejected_spans == 2 and "no team" in partial.error_message
        redacted = export([span(2, semconv_chat(2, content=False)), span(3, {"http.route": "/x"}, name="GET /x")])
        partial = response_of(await post(h, redacted.SerializeToString())).partial_success
        assert partial.rejected_spans == 0 and "without message content" in partial.error_message
        counters = h.runtime.counters
        assert (counters["otlp_spans_unattributed"], counters["otlp_spans_skipped_redacted"],
                counters["otlp_spans_not_llm"], counters["otlp_spans_exchange"]) == (2, 1, 1, 0)
        assert h.admin
        text = (await h.admin.get("/metrics")).text
        assert 'shadowtrial_otlp_spans_total{outcome="unattributed"} 2' in text


async def test_undecodable_bodies_are_400_and_unknown_media_types_415_in_the_json_error_shape(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        good = export([span(0, semconv_chat(0))]).SerializeToString()
        r = await post(h, good[:-7])
        assert r.status_code == 400 and error_of(r)["code"] == "invalid_otlp"
        r = await post(h, b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', "application/json")
        assert r.status_code == 400 and error_of(r)["field"] == "$.resourceSpans[0].scopeSpans[0].spans[0].traceId"
        r = await post(h, b"[1, 2", "application/json")
        assert r.status_code == 400 and error_of(r)["code"] == "invalid_otlp"
        r = await post(h, good, "text/plain")
        assert r.status_code == 415 and error_of(r) == {
            "code": "unsupported_media_type", "field": "Content-Type",
            "message": "OTLP/HTTP takes application/x-protobuf or application/json"}
        r = await post(h, good, **{"Content-Encoding": "br"})
        assert r.status_code == 415 and error_of(r)["code"] == "unsupported_encoding"


async def test_the_tap_token_and_body_limit_hold_for_traces(tmp_path: Path) -> None:
    env = {"TAP_TOKEN": "s3cret-token"}
    async with Harness(tmp_path, environ=env, tap_token_env="TAP_TOKEN", max_body_bytes=4096) as h:
        body = export([span(0, semconv_chat(0))]).SerializeToString()
        r = await post(h, body)
        assert r.status_code == 401 and error_of(r)["code"] == "unauthorized"
        r = await post(h, body, Authorization="Bearer s3cret-token")
        assert r.status_code == 200
        big = export([span(0, semconv_chat(0, **{"gen_ai.input.messages": "x" * 5000}))]).SerializeToString()
        r = await post(h, big, Authorization="Bearer s3cret-token")
        assert r.status_code == 413 and error_of(r)["code"] == "body_too_large"
        bomb = gzip.compress(b"\0" * 100_000)
        r = await post(h, bomb, Authorization="Bearer s3cret-token", **{"Content-Encoding": "gzip"})
        assert r.status_code == 413


async def test_a_single_team_gateway_jwt_gives_the_team_and_covers_only_its_teams(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True, tap_lines="gateway_jwt = true") as h:
        trial = await h.create_trial(sample_rate=1.0, audit_share=0.0)
        other = await h.create_trial(team="team-b", sample_rate=1.0)
        gateway = {"Authorization": f"Bearer {h.token(subject='gw', roles=['gateway'], teams=['team-a'])}"}
        # no resource team: the JWT's one team; a span attribute naming another is not read
        bare = export([span(i, semconv_chat(i, **{"shadowtrial.team": "team-b"})) for i in range(2)],
                      resource={"service.name": "gw"})
        assert not response_of(await post(h, bare.SerializeToString(), **gateway)).HasField("partial_success")
        # a resource team the JWT does not cover: rejected, counted, never matched
        foreign = export([span(10, semconv_chat(10))], resource={"shadowtrial.team": "team-b"})
        partial = response_of(await post(h, foreign.SerializeToString(), **gateway)).partial_success
        assert partial.rejected_spans == 1 and "does not cover" in partial.error_message
        view = await h.settle(trial["id"], 2)
        assert view["funnel"]["outcomes"]["judged"] == 2
        assert (await h.trial(other["id"]))["funnel"]["total"] == 0
        assert h.runtime.counters["otlp_spans_refused"] == 1
