"""Real OpenTelemetry-instrumented clients feeding trials through the tap's ``POST /v1/traces`` (issue 30).

The official ``openai`` client calls a fake provider (the "served" incumbent, planted at
quality 0.2), instrumented with the official ``opentelemetry-instrumentation-openai-v2`` or,
separately, OpenLLMetry's ``opentelemetry-instrumentation-openai``; its spans leave through
the SDK's real ``BatchSpanProcessor`` + OTLP/HTTP ``OTLPSpanExporter`` (protobuf) to a real
sidecar's tap, whose candidate (0.9) wins every judged case. The team is the exporting
process's resource attribute ``shadowtrial.team``. Synchronisation: the exporter's
``force_flush`` (on a worker thread: the tap answers on this loop), then the trial's funnel
polled with a deadline.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from sidecar.demo.fake_provider import FakeModel, FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness

CASES = 40


def sidecar_models() -> dict[str, FakeModel]:
    return {INCUMBENT: FakeModel(quality=0.5), CANDIDATE: FakeModel(quality=0.9, quality_noise=0.0),
            JUDGE: FakeModel(judge=True)}


@asynccontextmanager
async def served_upstream() -> AsyncIterator[FakeProvider]:
    """The application's own provider: it serves the incumbent the sidecar must never call."""
    upstream = FakeProvider({INCUMBENT: FakeModel(quality=0.2, quality_noise=0.0)}, seed=3)
    await upstream.start()
    try:
        yield upstream
    finally:
        await upstream.stop()


def instrumentor(kind: str) -> Any:
    if kind == "openai-v2":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
        return OpenAIInstrumentor()
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor as OpenLLMetry
    return OpenLLMetry()


#: The environment of each instrumentation, content capture on / off.
CONTENT_ENV: dict[tuple[str, bool], dict[str, str]] = {
    # The latest GenAI conventions put the messages on the span (gen_ai.input/output.messages);
    # the v1.30 default ("true") sends them as log events only, which a traces receiver never sees.
    ("openai-v2", True): {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
                          "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "span_only"},
    ("openai-v2", False): {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
                           "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "no_content"},
    ("openllmetry", True): {"TRACELOOP_TRACE_CONTENT": "true"},
    ("openllmetry", False): {"TRACELOOP_TRACE_CONTENT": "false"},
}


@contextmanager
def instrumented(kind: str, content: bool, tap_url: str, team: str,
                 monkeypatch: pytest.MonkeyPatch) -> Iterator[TracerProvider]:
    for name, value in CONTENT_ENV[(kind, content)].items():
        monkeypatch.setenv(name, value)
    provider = TracerProvider(resource=Resource.create({"service.name": "app-gw", "shadowtrial.team": team}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{tap_url}/v1/traces", timeout=30)))
    inst = instrumentor(kind)
    with warnings.catch_warnings():  # OpenLLMetry defines a pydantic model the deprecated way when instrumenting
        warnings.simplefilter("ignore", DeprecationWarning)
        inst.instrument(tracer_provider=provider)
    try:
        yield provider
    finally:
        inst.uninstrument()


async def call_app(upstream: FakeProvider, prompts: list[str]) -> None:
    import openai  # here, not at the top: importing the client costs every collecting worker about a second

    gate = asyncio.Semaphore(4)
    async with openai.AsyncOpenAI(base_url=upstream.base_url, api_key="sk-app", max_retries=0) as client:
        async def one(prompt: str) -> None:
            async with gate:
                r = await client.chat.completions.create(
                    model=INCUMBENT, messages=[{"role": "system", "content": "be brief"},
                                               {"role": "user", "content": prompt}], max_tokens=64)
                assert r.choices[0].message.content

        await asyncio.gather(*(one(p) for p in prompts))


async def flush(provider: TracerProvider) -> None:
    """Every span exported (the exporter blocks its thread; the tap answers on this loop)."""
    assert await asyncio.to_thread(provider.force_flush, 30_000)
    await asyncio.to_thread(provider.shutdown)


@pytest.mark.parametrize("kind", ["openai-v2", "openllmetry"])
async def test_an_instrumented_openai_client_brings_a_trial_to_a_verdict(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    async with served_upstream() as upstream, Harness(tmp_path, models=sidecar_models()) as h:
        assert h.sidecar is not None
        trial = await h.create_trial(team="team-a", sample_rate=1.0, audit_share=0.0)
        marker = uuid.uuid4().hex[:10]
        with instrumented(kind, True, h.sidecar.tap_url, "team-a", monkeypatch) as provider:
            await call_app(upstream, [f"question {i} {marker}" for i in range(CASES)])
            await flush(provider)
        view = await h.settle(trial["id"], CASES)
        assert view["funnel"]["outcomes"]["judged"] == CASES, view["funnel"]
        verdict = view["verdict"]
        assert (verdict["cases"], verdict["code"], verdict["wording"]) == (CASES, "candidate_better", "Adoptable")
        assert h.fake.calls[CANDIDATE] == CASES


@pytest.mark.parametrize("kind", ["openai-v2", "openllmetry"])
async def test_content_capture_off_skips_every_span_and_stores_no_content(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    async with served_upstream() as upstream, Harness(tmp_path, models=sidecar_models()) as h:
        assert h.sidecar is not None
        trial = await h.create_trial(team="team-a", sample_rate=1.0, audit_share=0.0)
        marker = uuid.uuid4().hex
        with instrumented(kind, False, h.sidecar.tap_url, "team-a", monkeypatch) as provider:
            await call_app(upstream, [f"question {i} {marker}" for i in range(8)])
            await flush(provider)
        view = await h.settle(trial["id"], 8)
        assert view["funnel"]["outcomes"].get("skipped_redacted") == 8, view["funnel"]
        assert view["funnel"]["total"] == 8
        assert h.fake.calls[CANDIDATE] == 0 and h.fake.calls[JUDGE] == 0
    stored = [p for p in tmp_path.rglob("*") if p.is_file() and marker.encode() in p.read_bytes()]
    assert stored == []
