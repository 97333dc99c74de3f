"""Benchmark: the tap's CPU per OTLP GenAI span (``POST /v1/traces``) at sample rate 0 and 5%,
beside the JSON tap's CPU per exchange (``POST /v1/exchanges``) in the same run (issue 30).

    .venv/bin/python bench/otlp.py [--quick] [--requests 300] [--per-request 100] [--concurrency 8]

One real sidecar in a child process (``bench/tap.py``'s ``run_sidecar``, the engine in its own
process) runs a trial at rate 0 and one at ``--sample-rate`` (each its own team), its candidate
and judge on a zero-latency fake provider in a third process; the phases post to one or the other.
This process posts the same conversations both ways: ``bench/tap.py``'s ~1 KB exchanges as JSON
arrays, and as OTLP protobuf export requests of GenAI chat spans carrying the same messages and answer in the
current conventions' ``gen_ai.input.messages`` / ``gen_ai.output.messages`` (what
``opentelemetry-instrumentation-openai-v2`` sends with content capture on), the team in the
resource attribute ``shadowtrial.team``. Bodies are built before the clock starts.

Reported per phase: the sidecar's main process's CPU (tap and admin loop; the engine's
process is apart) over the posting, divided by the exchanges or spans posted. Speed is
reported, never asserted. Between phases the engine is let drain (the sampled cases judged),
so no phase measures the previous one's backlog. ``--quick`` runs in seconds (``make test`` runs it so): its figures
are not for reading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aiohttp  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest  # noqa: E402
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue  # noqa: E402
from opentelemetry.proto.trace.v1.trace_pb2 import Span  # noqa: E402

import tap as benchtap  # noqa: E402

START_NS = 1_764_633_600_000_000_000


def _kv(key: str, value: object) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, float):
        return KeyValue(key=key, value=AnyValue(double_value=value))
    return KeyValue(key=key, value=AnyValue(int_value=int(value)))  # type: ignore[call-overload]


def span_attributes() -> list[KeyValue]:
    """The same conversation as bench/tap.py's exchange, as a GenAI chat span's attributes."""
    inputs = [{"role": "user", "parts": [{"type": "text", "content": benchtap.QUESTION}]}]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": benchtap.ANSWER}], "finish_reason": "stop"}]
    attrs: dict[str, object] = {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
        "gen_ai.request.model": benchtap.INCUMBENT, "gen_ai.response.model": benchtap.INCUMBENT,
        "gen_ai.request.temperature": 0.2, "gen_ai.request.max_tokens": 256,
        "gen_ai.usage.input_tokens": 96, "gen_ai.usage.output_tokens": 84,
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": benchtap.SYSTEM}]),
        "gen_ai.input.messages": json.dumps(inputs), "gen_ai.output.messages": json.dumps(outputs),
        "server.address": "api.openai.com", "server.port": 443,
    }
    return [_kv(k, v) for k, v in attrs.items()]


def otlp_bodies(requests: int, per_request: int, prefix: int, team: str) -> list[bytes]:
    attrs = span_attributes()
    bodies = []
    for i in range(requests):
        request = ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.extend([_kv("service.name", "gw-bench"), _kv("shadowtrial.team", team)])
        spans = rs.scope_spans.add().spans
        for k in range(per_request):
            n = (prefix << 40) + i * per_request + k + 1
            spans.append(Span(trace_id=n.to_bytes(16, "big"), span_id=n.to_bytes(8, "big"), name="chat",
                              kind=Span.SPAN_KIND_CLIENT, start_time_unix_nano=START_NS,
                              end_time_unix_nano=START_NS + 812_500_000, attributes=attrs))
        bodies.append(request.SerializeToString())
    return bodies


async def post_all(url: str, bodies: list[bytes], content_type: str, concurrency: int) -> tuple[int, int]:
    """Post every body with ``concurrency`` workers; returns (accepted, failed) requests."""
    queue = list(reversed(bodies))
    ok = failed = 0
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        async def worker() -> None:
            nonlocal ok, failed
            while queue:
                body = queue.pop()
                async with session.post(url, data=body, headers={"Content-Type": content_type}) as resp:
                    await resp.read()
                    if resp.status in (200, 202):
                        ok += 1
                    else:
                        failed += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return ok, failed


def team_of(rate: float) -> str:
    """Each rate's trial has a team of its own, so one sidecar serves every phase."""
    return benchtap.TEAM if rate == 0 else f"{benchtap.TEAM}-{rate:g}"


async def create_trial(admin: str, rate: float) -> str:
    body = {"team": team_of(rate), "incumbent_model": benchtap.INCUMBENT, "candidate_model": benchtap.CANDIDATE,
            "spend_cap_usd": 1000.0, "sample_rate": rate,
            "on_decision": "continue"}  # keep judging past the decision: the load stays what it measures
    async with aiohttp.ClientSession() as session, session.post(admin + "/v1/trials", json=body) as resp:
        if resp.status != 201:
            raise SystemExit(f"trial creation failed: {resp.status} {await resp.text()}")
        return str((await resp.json())["id"])


#: Outcomes the tap decides; every other one ends a case the engine ran.
TAP_DECIDED = ("not_sampled", "skipped_redacted", "shed_queue_full", "shed_stopped", "not_at_site", "shed_outbox_full")


async def drained(admin: str, trial_ids: list[str], timeout_s: float = 300.0) -> None:
    """Wait (polling, with a deadline) until every case the tap sampled has ended, so one
    phase's engine work does not run into the next phase's measurement."""
    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while True:
            counters = await benchtap.live_counters(session, admin)
            ended = 0
            for trial_id in trial_ids:
                async with session.get(f"{admin}/v1/trials/{trial_id}") as resp:
                    funnel = (await resp.json())["funnel"]
                ended += sum(n for name, n in funnel["outcomes"].items() if name not in TAP_DECIDED)
            if ended >= counters.get("cases_sampled", 0):
                return
            if time.monotonic() > deadline:
                raise SystemExit(f"the engine did not drain within {timeout_s:.0f} s")
            await asyncio.sleep(0.2)


async def phase(child: benchtap.Child, kind: str, rate: float, args: argparse.Namespace, tag: int) -> tuple[float, int]:
    """µs of the sidecar's main-process CPU per exchange (kind json) or span (kind otlp)."""
    if kind == "json":
        make = benchtap.body_maker(args.per_request, f"b{tag}")
        own = f'"team":"{team_of(rate)}"'.encode()
        bodies = [make(i).replace(f'"team":"{benchtap.TEAM}"'.encode(), own) for i in range(args.requests)]
        path, content_type = "/v1/exchanges", "application/json"
    else:
        bodies = otlp_bodies(args.requests, args.per_request, tag, team_of(rate))
        path, content_type = "/v1/traces", "application/x-protobuf"
    url = child.hello["tap_url"] + path
    warm = max(1, args.requests // 10)
    await post_all(url, bodies[:warm], content_type, args.concurrency)
    before = benchtap._proc_cpu(child.proc.pid)
    ok, failed = await post_all(url, bodies[warm:], content_type, args.concurrency)
    after = benchtap._proc_cpu(child.proc.pid)
    if failed or before is None or after is None:
        raise SystemExit(f"{kind} rate {rate}: {failed} requests failed (or no /proc)")
    return (after - before) / (ok * args.per_request) * 1e6, ok * args.per_request


def start_servers(start: str) -> tuple[benchtap.Child, benchtap.Child, tempfile.TemporaryDirectory[str]]:
    """The fake provider and the sidecar, and the sidecar's temp dir: spawned, or (``--quick``) forked
    from this process before its event loop starts (``bench/tap.py``'s ``Child``)."""
    fake = benchtap.Child(benchtap.run_fake_provider, start=start)
    try:
        tmp = tempfile.TemporaryDirectory()
        try:
            sidecar = benchtap.Child(benchtap.run_sidecar, fake.hello, tmp.name, 100_000, 4, "", start == "fork",
                                     start=start)  # forked, its engine's process forked too (bench/_warm_engine.py)
            return fake, sidecar, tmp
        except BaseException:
            tmp.cleanup()
            raise
    except BaseException:
        fake.stop()
        raise


async def amain(
    args: argparse.Namespace,
    servers: tuple[benchtap.Child, benchtap.Child, tempfile.TemporaryDirectory[str]] | None = None,
) -> int:
    fake, child, tmp = servers or start_servers("spawn")
    rows = []
    try:
        with tmp:
            try:
                admin = child.hello["admin_url"]
                trials = [await create_trial(admin, rate) for rate in (0.0, args.sample_rate)]
                tag = 1
                for rate in (0.0, args.sample_rate):
                    for kind in ("json", "otlp"):
                        started = time.perf_counter()
                        us, n = await phase(child, kind, rate, args, tag)
                        tag += 1
                        rows.append((kind, rate, us, n, time.perf_counter() - started))
                        await drained(admin, trials)
            finally:
                child.stop()
    finally:
        fake.stop()
    print(f"tap CPU (the sidecar's main process), {args.per_request} per request, concurrency {args.concurrency}")
    for kind, rate, us, n, took in rows:
        unit = "us/exchange (JSON /v1/exchanges)" if kind == "json" else "us/span (OTLP protobuf /v1/traces)"
        print(f"{kind.upper():4} rate {rate:<4g}: {us:7.1f} {unit}   [{n} posted, {took:.1f} s]")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Tap CPU per OTLP span vs per JSON exchange.")
    p.add_argument("--requests", type=int, default=300, help="requests per phase (default 300)")
    p.add_argument("--per-request", type=int, default=100, help="exchanges or spans per request (default 100)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    p.add_argument("--sample-rate", type=float, default=0.05, help="the sampled phases' rate (default 0.05)")
    benchtap._quick(p, argv, requests=4, per_request=25)
    args = p.parse_args(argv)
    if args.requests < 2 or args.per_request < 1 or args.concurrency < 1 or not 0 <= args.sample_rate <= 1:
        p.error("need --requests >= 2, --per-request >= 1, --concurrency >= 1, 0 <= --sample-rate <= 1")
    return asyncio.run(amain(args, start_servers("fork") if args.quick else None))


if __name__ == "__main__":
    raise SystemExit(main())
