"""The real LiteLLM 1.80.0 proxy's built-in ``otel`` callback feeding trials through the tap's
``POST /v1/traces`` (issue 30).

The session's ``webhook`` proxy (``tests/litellm_proxy.py``, the ``gateway`` fixture; its
environment gets the OTLP/HTTP exporter from :func:`ensure_otel_exporter`) runs ``callbacks:
[..., "otel"]`` with ``OTEL_EXPORTER=otlp_http`` to the session's :class:`Relay`, which records
every export and forwards it to the test's fresh sidecar. The proxy serves team ``team-o`` (its
keys map to teams through ``custom_auth``; the operator binds the proxy's spans to the team with
``OTEL_RESOURCE_ATTRIBUTES=shadowtrial.team=team-o``). Sharing the proxy saves starting one
(LiteLLM's import is seconds of CPU); what its other callbacks send the sidecar goes to team
``team-w``, which has no trial here. Synchronisation: polling the relay and the trial with a
deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, wait_for
from tests.litellm_proxy import OTEL_TEAM, OTLP_TRACES, Gateway, LiteLLMProxy, Relay, caller_http_client

TEAM = OTEL_TEAM
KEY = "sk-team-a"  # custom_auth: team-a-id / team-a; the proxy's spans are bound to TEAM by the operator
CASES = 40


def sidecar_models() -> dict[str, FakeModel]:
    return {INCUMBENT: FakeModel(quality=0.5), CANDIDATE: FakeModel(quality=0.9, quality_noise=0.0),
            JUDGE: FakeModel(judge=True)}


class OtelGateway:
    def __init__(self, proxy: LiteLLMProxy, relay: Relay) -> None:
        self.proxy, self.relay = proxy, relay

    def spans(self) -> list[dict[str, Any]]:
        """The attributes of every span the proxy exported so far (string values)."""
        out = []
        for delivery in self.relay.deliveries(OTLP_TRACES):
            request = ExportTraceServiceRequest()
            request.ParseFromString(delivery.body)
            for rs in request.resource_spans:
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        out.append({kv.key: kv.value.string_value for kv in sp.attributes})
        return out


@pytest.fixture
def otel_gateway(gateway: Gateway) -> OtelGateway:
    return OtelGateway(gateway.otel, gateway.relay)


@pytest.fixture
async def sidecar(tmp_path: Path, otel_gateway: OtelGateway) -> AsyncIterator[Harness]:
    async with Harness(tmp_path, models=sidecar_models()) as h:
        assert h.sidecar is not None
        await drained(otel_gateway)
        otel_gateway.relay.clear()
        otel_gateway.relay.target = h.sidecar.tap_url
        try:
            yield h
        finally:
            otel_gateway.relay.target = None


async def chat(proxy: LiteLLMProxy, content: str, *, stream: bool = False, extra_body: dict[str, Any] | None = None,
               ) -> None:
    import openai  # here: importing the client costs every collecting worker about a second

    async with openai.AsyncOpenAI(base_url=proxy.base_url, api_key=KEY, max_retries=0, timeout=60.0,
                                  http_client=caller_http_client()) as client:
        if stream:
            chunks = await client.chat.completions.create(
                model="inc-model", messages=[{"role": "user", "content": content}], stream=True, extra_body=extra_body)
            async for _ in chunks:
                pass
        else:
            r = await client.chat.completions.create(
                model="inc-model", messages=[{"role": "user", "content": content}], extra_body=extra_body)
            assert r.choices[0].message.content


async def exported(gateway: OtelGateway, marker: str, n: int) -> list[dict[str, Any]]:
    """Wait (with a deadline) until the proxy exported the ``n`` chat spans carrying ``marker``."""
    found: list[dict[str, Any]] = []

    async def done() -> bool:
        nonlocal found
        found = [s for s in gateway.spans() if any(marker in v for k, v in s.items() if k.startswith("gen_ai.prompt"))]
        return len(found) >= n

    try:
        await wait_for(done, timeout=60, what=f"{n} spans from the otel callback")
    except AssertionError:
        deliveries = gateway.relay.deliveries()
        raise AssertionError(f"{len(found)} of {n} spans; relay took {[(d.path, d.status) for d in deliveries][:5]}; "
                             f"a span: {(gateway.spans() or [{}])[0]}; proxy log:\n"
                             + "\n".join(gateway.proxy.log_text().splitlines()[-25:])) from None
    return found


async def drained(gateway: OtelGateway) -> None:
    """Every span of an earlier call is out: the proxy is shared, and the test's own sidecar must
    see its spans only. One more call, whose span is awaited while no sidecar listens (the relay
    absorbs it), comes out of the exporter's queue after every span of an earlier call."""
    marker = uuid.uuid4().hex[:12]
    await chat(gateway.proxy, f"drain {marker}")
    await exported(gateway, marker, 1)


async def test_litellm_otel_callback_brings_a_trial_to_a_verdict(otel_gateway: OtelGateway, sidecar: Harness) -> None:
    trial = await sidecar.create_trial(team=TEAM, sample_rate=1.0, audit_share=0.0)
    marker = uuid.uuid4().hex[:12]
    gate = asyncio.Semaphore(4)

    async def one(i: int) -> None:
        async with gate:
            await chat(otel_gateway.proxy, f"question {i} {marker}", stream=i % 2 == 1)

    await asyncio.gather(*(one(i) for i in range(CASES)))
    await exported(otel_gateway, marker, CASES)
    view = await sidecar.settle(trial["id"], CASES)
    assert view["funnel"]["outcomes"]["judged"] == CASES, view["funnel"]
    verdict = view["verdict"]
    assert (verdict["cases"], verdict["code"], verdict["wording"]) == (CASES, "candidate_better", "Adoptable"), verdict


@pytest.mark.parametrize("field", ["litellm_metadata", "metadata"])
async def test_litellm_otel_team_is_the_operators_whatever_the_caller_puts_in_the_body(
        otel_gateway: OtelGateway, sidecar: Harness, field: str) -> None:
    own = await sidecar.create_trial(team=TEAM, sample_rate=1.0, audit_share=0.0)
    victim = await sidecar.create_trial(team="victim", sample_rate=1.0, audit_share=0.0)
    marker = uuid.uuid4().hex[:12]
    spoof = {field: {"user_api_key_team_alias": "victim", "user_api_key_team_id": "victim", "team": "victim",
                     "shadowtrial.team": "victim"}}
    for i in range(3):
        await chat(otel_gateway.proxy, f"spoof {i} {marker}", extra_body=spoof)
    spans = await exported(otel_gateway, marker, 3)
    view = await sidecar.settle(own["id"], 3)
    assert view["funnel"]["outcomes"]["judged"] == 3, view["funnel"]
    assert (await sidecar.trial(victim["id"]))["funnel"]["total"] == 0
    # What the span itself says about the team is the caller's to change (a body's litellm_metadata
    # replaces LiteLLM's logging metadata, key-derived fields included): it is never read.
    teams = {s.get("metadata.user_api_key_team_alias") for s in spans}
    assert teams == ({"victim"} if field == "litellm_metadata" else {"team-a"}), teams
