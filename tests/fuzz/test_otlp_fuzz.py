"""Property-based fuzz of the tap's OTLP receiver (``POST /v1/traces``) against a real sidecar (issue 30).

Hypothesis builds export requests of GenAI spans in each convention the tap reads, then
mutates them: attribute values of the wrong type (an int, a bool, an array, a key-value
list, bytes where a string belongs), huge values (hundreds of KiB), arrays nested up to
150 deep (past protobuf's own limit), message attributes that are not JSON or not the
shape their convention says, missing ids; and whole bodies: truncated or bit-flipped
protobuf, OTLP JSON with wrong types and bad hex ids, sometimes gzip'd. They go to a
sidecar started in-process with a running trial at 50 %, so what is sampled is really run.

Asserted: no 5xx; every refusal in the ``{"error": {code, message, field}}`` shape; every
200 an ``ExportTraceServiceResponse``; an unmutated request taken without rejections; and,
after the engine drains, every sampled span ended in exactly one funnel outcome (the
outcomes past the tap's own add up to the cases the tap sampled). Derandomized.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from google.protobuf import json_format
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from tests.fuzz.wire import AsyncClient
from tests.harness import Harness, wait_for
from tests.sidecar.ingest.otlp_spans import (
    event_chat, export, key_values, openinference_chat, openllmetry_chat, semconv_chat, span,
)

REQUESTS = 200
TAP_DECIDED = ("not_sampled", "skipped_redacted", "shed_queue_full", "not_at_site")


def _ld(field_number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return _varint(field_number << 3 | 2) + _varint(len(payload)) + payload


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def deep_attribute(key: str, depth: int) -> bytes:
    """A span's attribute (Span field 9) holding arrays nested ``depth`` deep, as wire bytes:
    the message classes themselves refuse to build past protobuf's depth limit."""
    value = _ld(1, b"leaf")  # AnyValue.string_value
    for _ in range(depth):
        value = _ld(5, _ld(1, value))  # AnyValue.array_value -> ArrayValue.values
    return _ld(9, _ld(1, key.encode()) + _ld(2, value))


def deep_json(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "leaf"}
    for _ in range(depth):
        value = {"arrayValue": {"values": [value]}}
    return value


def assemble(request: Any, extra: list[bytes]) -> bytes:
    """The export request's bytes with ``extra`` attribute bytes appended to each span (one resource, one scope)."""
    (rs,) = request.resource_spans
    (ss,) = rs.scope_spans
    spans = b"".join(_ld(2, sp.SerializeToString() + more) for sp, more in zip(ss.spans, extra))
    return _ld(1, _ld(1, rs.resource.SerializeToString()) + _ld(2, spans))


def wrong(kind: int, size: int) -> AnyValue:
    return [
        AnyValue(int_value=-(2**63)), AnyValue(bool_value=True), AnyValue(double_value=float("nan")),
        AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=1), AnyValue(string_value="x")])),
        AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="role", value=AnyValue(int_value=3))])),
        AnyValue(bytes_value=b"\xff\xfe"), AnyValue(string_value="x" * size), AnyValue(string_value="{not json"),
        AnyValue(string_value=json.dumps([{"role": 5, "parts": "no"}])), AnyValue(string_value="\ud800".encode(
            "utf-8", "surrogatepass").decode("utf-8", "replace")), AnyValue(),
    ][kind]


_IDS = itertools.count()


@dataclass
class Request:
    body: bytes
    headers: dict[str, str]
    #: Nothing mutated and a team: taken whole, nothing rejected.
    clean: bool


@st.composite
def requests(draw: st.DrawFn) -> Request:
    n = draw(st.integers(1, 6))
    spans = []
    deep: list[tuple[str, int] | None] = []
    mutated = False
    base = next(_IDS) * 100  # unique span ids: a re-sent exchange is a ``duplicate`` and counts nothing
    for i in range(n):
        style = draw(st.sampled_from(["semconv", "openllmetry", "openinference", "events", "http"]))
        events: list[tuple[str, dict[str, Any]]] = []
        if style == "semconv":
            attrs: dict[str, Any] = semconv_chat(base + i)
        elif style == "openllmetry":
            attrs = openllmetry_chat(base + i)
        elif style == "openinference":
            attrs = openinference_chat(base + i)
        elif style == "events":
            attrs, events = event_chat(base + i)
        else:
            attrs = {"http.route": "/chat"}
        s = span(base + i, attrs, events=events)
        deep.append(None)
        if draw(st.integers(0, 3)) == 0:
            mutated = True
            keys = sorted(attrs)
            key = draw(st.sampled_from(keys))
            what = draw(st.sampled_from(["wrong", "deep", "drop", "ids"]))
            kept = [kv for kv in s.attributes if kv.key != key]
            del s.attributes[:]
            s.attributes.extend(kept)
            if what == "wrong":
                s.attributes.append(KeyValue(key=key, value=wrong(draw(st.integers(0, 10)), draw(
                    st.sampled_from([10, 300_000])))))
            elif what == "deep":
                deep[-1] = (key, draw(st.sampled_from([5, 30, 63, 99, 150])))
            elif what == "ids":
                s.trace_id = b"\x01" * draw(st.integers(0, 20))
        spans.append(s)
    resource = draw(st.sampled_from([
        *[{"service.name": "gw-1", "shadowtrial.team": "team-a"}] * 4, {"service.name": "gw-1"},
        {"shadowtrial.team": 7}]))
    teamed = resource.get("shadowtrial.team") == "team-a"
    request = export(spans, resource=resource)
    if draw(st.booleans()):
        body = assemble(request, [b"" if d is None else deep_attribute(*d) for d in deep])
        content_type = "application/x-protobuf"
        broken = draw(st.sampled_from(["none"] * 4 + ["truncate", "flip"]))
        at = len(body) * draw(st.integers(1, 99)) // 100  # a share: the draws never depend on the ids
        if broken == "truncate":
            body, mutated = body[:max(at, 1)], True
        elif broken == "flip":
            body, mutated = body[:at] + bytes([body[at] ^ 0xFF]) + body[at + 1:], True
    else:
        doc = json_format.MessageToDict(request)
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for sp, d in zip(ss.get("spans", []), deep):
                    if d is not None:
                        sp.setdefault("attributes", []).append({"key": d[0], "value": deep_json(d[1])})
                    for name in ("traceId", "spanId"):
                        if name in sp:
                            sp[name] = base64.b64decode(sp[name]).hex()
        broken = draw(st.sampled_from(["none"] * 5 + ["types", "hex", "shape"]))
        if broken == "types":
            doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["startTimeUnixNano"] = {"x": 1}
        elif broken == "hex":
            doc["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"] = "zz"
        elif broken == "shape":
            doc["resourceSpans"] = draw(st.sampled_from(["x", 5, [[]], [{"scopeSpans": {"a": 1}}]]))
        mutated = mutated or broken != "none"
        body, content_type = json.dumps(doc).encode(), "application/json"
    headers = {"Content-Type": content_type}
    if draw(st.integers(0, 4)) == 0:
        body, headers["Content-Encoding"] = gzip.compress(body), "gzip"
    return Request(body, headers, clean=teamed and not mutated)


def generate(n: int) -> list[Request]:
    out: list[Request] = []

    @settings(max_examples=n, derandomize=True, database=None, deadline=None,
              phases=[Phase.generate], suppress_health_check=list(HealthCheck))
    @given(requests())
    def collect(r: Request) -> None:
        out.append(r)

    collect()
    return out


def check(r: httpx.Response, request: Request) -> None:
    assert r.status_code < 500, r.text
    if r.status_code == 200:
        response = ExportTraceServiceResponse()
        if r.headers["content-type"].startswith("application/x-protobuf"):
            response.ParseFromString(r.content)
        else:
            json_format.Parse(r.text, response)
        if request.clean:
            assert response.partial_success.rejected_spans == 0, response
        return
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "field"}, body
    assert r.status_code in (400, 413) and not request.clean, r.text


async def test_otlp_fuzz(tmp_path: Path) -> None:
    reqs = generate(REQUESTS)
    assert len(reqs) == REQUESTS
    async with Harness(tmp_path, max_body_bytes=8 * 1024 * 1024) as h:
        assert h.tap
        trial = await h.create_trial(sample_rate=0.5, audit_share=0.0)
        statuses: dict[int, int] = {}
        assert h.sidecar
        client = AsyncClient(h.sidecar.tap_url)  # bare keep-alive (tests/fuzz/wire.py): httpx cost more CPU
        for request in reqs:
            r = await client.request("POST", "/v1/traces", content=request.body, headers=list(request.headers.items()))
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            check(r, request)
        await client.aclose()
        assert sum(q.clean for q in reqs) > 10 and statuses.get(200, 0) >= sum(q.clean for q in reqs)
        sampled = h.runtime.counters["cases_sampled"]
        assert sampled > 60, statuses
        outcomes: dict[str, int] = {}

        async def every_sampled_span_ended() -> bool:
            nonlocal outcomes
            view = await h.trial(trial["id"])
            outcomes = view["funnel"]["outcomes"]
            run = sum(n for name, n in outcomes.items() if name not in TAP_DECIDED)
            return run == sampled and view["funnel"]["in_flight"] == 0

        await wait_for(every_sampled_span_ended, timeout=120, what=f"{sampled} outcomes", wake=h.runtime.progress)
        run = sum(n for name, n in outcomes.items() if name not in TAP_DECIDED)
        assert run == sampled, (outcomes, sampled)
        print(f"\nOTLP fuzz: {REQUESTS} requests, statuses {statuses}, {sampled} spans sampled, outcomes {outcomes}")
