"""End to end through a real LiteLLM 1.80.0 proxy (issue 10, item 3).

The official ``openai`` client calls real proxies (``tests/litellm_proxy.py``, started once
per session, the ``gateway`` fixture of ``conftest.py``) in front of the fake provider; a fresh real sidecar (:class:`Harness`) per test
receives what they hand over, through a :class:`Relay` that records every POST on the way.
Three proxies, one config but for the callbacks:

- ``plain`` — no callbacks: the reference for the callers' bytes;
- ``plugin`` — shadowtrial's plugin (``deploy/gateways/litellm/shadowtrial_callback.py`` →
  ``sidecar.integrations.litellm``);
- ``webhook`` — the generic API logger's wire format posted to the tap's
  ``/v1/integrations/litellm?team=team-w`` (LiteLLM's ``otel`` callback runs there too, for
  ``test_litellm_otel.py``). LiteLLM's own ``generic_api`` logger is an
  enterprise feature in 1.80.0 that sends nothing without a licence (pinned by
  :func:`test_litellms_own_generic_api_logger_sends_nothing_without_a_licence`), so the
  proxy also runs a stand-in with the same wire behaviour built from LiteLLM's open-source
  parts (``GENERIC_SENDER`` in ``tests/litellm_proxy.py``); see ``FINDINGS.md``.

Keys map to teams through LiteLLM's ``custom_auth`` hook (``sk-team-a`` → ``team-a``, …);
every test uses its own team and a unique token in its prompts, so nothing another test
sent can be mistaken for its own. Synchronisation is by polling the relay or the sidecar
with a deadline (``wait_for``), never a sleep.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, wait_for
from tests.litellm_proxy import (
    DEPLOYMENTS,
    PLUGIN_CALLBACK,
    PRICED,
    WEBHOOK_TEAM,
    Gateway,
    LiteLLMProxy,
    caller_http_client,
    launch,
)

EXCHANGES = "/v1/exchanges"
WEBHOOK = "/v1/integrations/litellm"
#: What legitimately differs between two calls of the same request: the response's timing and
#: date headers, LiteLLM's per-call id, and (streams only) the ``created`` LiteLLM stamps on
#: every chunk with the time it started streaming. Everything else must be byte-identical.
VOLATILE_HEADERS = frozenset({
    "date", "llm_provider-date", "x-litellm-call-id", "x-litellm-response-duration-ms",
    "x-litellm-overhead-duration-ms",
})
_CREATED = re.compile(rb'"created":\d+')
ENTERPRISE_GATE = "only available for LiteLLM Enterprise users"


def sidecar_models() -> dict[str, FakeModel]:
    """The sidecar's candidate beats the gateway's incumbent (0.2, see ``upstream_models``) every time."""
    return {
        INCUMBENT: FakeModel(quality=0.5),
        CANDIDATE: FakeModel(quality=0.9, quality_noise=0.0),
        JUDGE: FakeModel(judge=True),
    }


@pytest.fixture
async def sidecar(tmp_path: Path, gateway: Gateway) -> AsyncIterator[Harness]:
    """A fresh sidecar, fed by the session's proxies through the relay while the test runs."""
    async with Harness(tmp_path, models=sidecar_models()) as h:
        assert h.sidecar is not None
        gateway.relay.clear()
        gateway.relay.target = h.sidecar.tap_url
        try:
            yield h
        finally:
            gateway.relay.target = None


@dataclass
class Served:
    """A call: the prompt sent, and what the caller got — LiteLLM's call id, the text (a
    stream's pieces joined), the raw bytes."""

    prompt: str
    call_id: str
    text: str
    raw: bytes
    headers: dict[str, str]
    usage: dict[str, Any] | None


async def chat(
    proxy: LiteLLMProxy, key: str, content: str, *, model: str = "inc-model", stream: bool = False,
    include_usage: bool = False, extra_body: dict[str, Any] | None = None,
    extra_headers: dict[str, str] | None = None,
) -> Served:
    """One chat completion through ``proxy`` with the official client, read as raw bytes."""
    params: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": content}]}
    if stream:
        params["stream"] = True
        if include_usage:
            params["stream_options"] = {"include_usage": True}
    import openai  # here: importing the client costs every collecting worker about a second

    async with openai.AsyncOpenAI(base_url=proxy.base_url, api_key=key, max_retries=0, timeout=60.0,
                                  http_client=caller_http_client()) as client:
        async with client.chat.completions.with_streaming_response.create(
            **params, extra_body=extra_body, extra_headers=extra_headers,
        ) as response:
            raw = await response.read()
            headers = dict(response.headers)
    assert response.status_code == 200, raw[:500]
    if stream:
        chunks = [json.loads(e[len(b"data: "):]) for e in raw.split(b"\n\n") if e.startswith(b"data: {")]
        text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])
        usage = next((c["usage"] for c in chunks if c.get("usage")), None)
    else:
        body = json.loads(raw)
        text, usage = body["choices"][0]["message"]["content"], body["usage"]
    return Served(content, headers.get("x-litellm-call-id", ""), text, raw, headers, usage)


def token() -> str:
    return uuid.uuid4().hex[:12]


def delivered(gw: Gateway, path: str = EXCHANGES, *, accepted_only: bool = True) -> list[dict[str, Any]]:
    """Every item the relay passed on to ``path`` (only what the sidecar took, by default)."""
    return [item for d in gw.relay.deliveries(path) if d.status == 202 or not accepted_only for item in d.items()]


def prompt_of(item: dict[str, Any]) -> str:
    """The user text of a tap exchange (``request.messages``) or a logged payload (``messages``)."""
    messages = item.get("request", {}).get("messages") or item.get("messages") or []
    return " ".join(str(m.get("content")) for m in messages if isinstance(m, dict))


async def exchanges_for(gw: Gateway, calls: list[Served], timeout: float = 90.0) -> dict[str, dict[str, Any]]:
    """The plugin's exchanges for these calls (by call id), once every one reached the sidecar.

    An exchange is a call's if it carries the call's id or, failing that, its prompt (so a
    plugin that got the id wrong is caught by the assertion on the id, not by a time-out)."""
    found: dict[str, dict[str, Any]] = {}

    async def all_there() -> bool:
        found.clear()
        for ex in delivered(gw):
            for call in calls:
                if ex.get("exchange_id") == call.call_id or prompt_of(ex) == call.prompt:
                    found[call.call_id] = ex
        return len(found) == len(calls)

    await wait_for(all_there, timeout=timeout, what=f"{len(calls)} exchanges at the tap")
    return found


async def payloads_with(gw: Gateway, marker: str, n: int, timeout: float = 90.0) -> list[dict[str, Any]]:
    """The webhook's logged payloads whose prompt carries ``marker``, once there are ``n``."""
    found: list[dict[str, Any]] = []

    async def there() -> bool:
        found[:] = [p for p in delivered(gw, WEBHOOK) if marker in prompt_of(p)]
        return len(found) >= n

    await wait_for(there, timeout=timeout, what=f"{n} webhook payloads with {marker}")
    return found


async def metric(h: Harness, line_start: str) -> float | None:
    assert h.admin is not None
    r = await h.admin.get("/metrics")
    for line in r.text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


# --- the callers' view ------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["plain", "stream", "stream+usage"])
async def test_callers_get_the_same_bytes_with_and_without_the_integrations(
    gateway: Gateway, sidecar: Harness, mode: str,
) -> None:
    """The same request through the proxy without callbacks, with the plugin and with the
    webhook sender: the same body bytes (streams: ``created`` aside) and the same headers
    (:data:`VOLATILE_HEADERS` aside) — while the integrations really did hand the calls over."""
    marker = token()
    stream, usage = mode != "plain", mode == "stream+usage"
    served = {
        name: await chat(gateway.proxies[name], "sk-team-a", f"same bytes {marker}", model="fixed-model",
                         stream=stream, include_usage=usage)
        for name in ("plain", "plugin", "webhook")
    }
    bodies = {name: _CREATED.sub(b'"created":0', s.raw) if stream else s.raw for name, s in served.items()}
    assert bodies["plugin"] == bodies["plain"] and bodies["webhook"] == bodies["plain"]
    if not stream:  # the upstream's body passes through, "created" included
        assert json.loads(served["plain"].raw)["created"] == 0
    else:
        assert served["plain"].raw.endswith(b"data: [DONE]\n\n")
        assert (served["plain"].usage is not None) == usage
    stable = {name: {k: v for k, v in s.headers.items() if k not in VOLATILE_HEADERS} for name, s in served.items()}
    assert stable["plugin"] == stable["plain"] and stable["webhook"] == stable["plain"]
    # And the integrations were live for those very calls.
    plugin = await exchanges_for(gateway, [served["plugin"]])
    assert plugin[served["plugin"].call_id]["response"]["content"] == served["plugin"].text
    await payloads_with(gateway, marker, 1)


# --- the plugin -------------------------------------------------------------------------


async def test_plugin_hands_over_streamed_and_plain_calls_with_the_keys_team(gateway: Gateway, sidecar: Harness) -> None:
    trial = await sidecar.create_trial(team="team-a", sample_rate=1.0)
    marker = token()
    calls = [
        await chat(gateway.plugin, "sk-team-a", f"plain {marker}"),
        await chat(gateway.plugin, "sk-team-a", f"streamed {marker}", stream=True),
        await chat(gateway.plugin, "sk-team-a", f"streamed with usage {marker}", stream=True, include_usage=True),
    ]
    got = await exchanges_for(gateway, calls)
    for call in calls:
        ex = got[call.call_id]
        assert ex["exchange_id"] == call.call_id  # LiteLLM's call id, the one the caller saw
        assert (ex["team"], ex["gateway"], ex["model"], ex["redacted"]) == ("team-a", "litellm-test", "inc-model", False)
        assert ex["response"]["content"] == call.text and ex["response"]["finish_reason"] == "stop"
        assert marker in prompt_of(ex)
        assert ex["response"]["usage"]["input_tokens"] > 0 and ex["response"]["usage"]["output_tokens"] > 0
    view = await sidecar.settle(trial["id"], 3)
    assert view["funnel"]["outcomes"]["judged"] == 3


async def test_plugin_traffic_brings_a_trial_to_a_verdict(gateway: Gateway, sidecar: Harness) -> None:
    trial = await sidecar.create_trial(team="team-b", sample_rate=1.0, audit_share=0.0)
    marker = token()
    gate = asyncio.Semaphore(4)

    async def one(i: int) -> Served:
        async with gate:
            return await chat(gateway.plugin, "sk-team-b", f"question {i} {marker}", stream=i % 2 == 1)

    calls = await asyncio.gather(*(one(i) for i in range(40)))
    await exchanges_for(gateway, calls)
    view = await sidecar.settle(trial["id"], 40)
    assert view["funnel"]["outcomes"]["judged"] == 40, view["funnel"]
    verdict = view["verdict"]
    assert (verdict["cases"], verdict["code"], verdict["wording"]) == (40, "candidate_better", "Adoptable"), verdict


@pytest.mark.parametrize("field", ["litellm_metadata", "metadata"])
async def test_plugin_team_spoofing_body_lands_in_the_keys_team(gateway: Gateway, sidecar: Harness, field: str) -> None:
    """Issue 10, item 1: a body naming another team changes nothing; the key decides."""
    own = await sidecar.create_trial(team="team-c", sample_rate=1.0)
    victim = await sidecar.create_trial(team="victim", sample_rate=1.0)
    spoof = {field: {"user_api_key_team_alias": "victim", "user_api_key_team_id": "victim-id"}}
    call = await chat(gateway.plugin, "sk-team-c", f"spoof {token()}", extra_body=spoof)
    ex = (await exchanges_for(gateway, [call]))[call.call_id]
    assert ex["team"] == "team-c"
    await sidecar.settle(own["id"], 1)
    assert (await sidecar.trial(victim["id"]))["funnel"]["total"] == 0


async def test_plugin_unpriced_model_arrives_with_unknown_cost(gateway: Gateway, sidecar: Harness) -> None:
    """Issue 10, item 2: no ``cost_usd`` for a model LiteLLM cannot price (never 0.0); the
    sidecar then prices the incumbent from the trial's ``incumbent_price``."""
    trial = await sidecar.create_trial(team="team-d", incumbent_model="unpriced-model", sample_rate=1.0,
                                       incumbent_price={"input_per_mtok_usd": 3.0, "output_per_mtok_usd": 12.0})
    marker = token()
    unpriced = await chat(gateway.plugin, "sk-team-d", f"unpriced {marker}", model="unpriced-model")
    priced = await chat(gateway.plugin, "sk-team-d", f"priced {marker}", model="inc-model")
    got = await exchanges_for(gateway, [unpriced, priced])
    assert "cost_usd" not in got[unpriced.call_id]["response"]["usage"]
    usage = priced.usage
    assert usage is not None
    expected = usage["prompt_tokens"] * PRICED[0] + usage["completion_tokens"] * PRICED[1]
    assert got[priced.call_id]["response"]["usage"]["cost_usd"] == pytest.approx(expected)
    view = await sidecar.settle(trial["id"], 1)
    paired = view["paired"]
    assert unpriced.usage is not None
    list_price = unpriced.usage["prompt_tokens"] * 3 + unpriced.usage["completion_tokens"] * 12
    assert paired["incumbent_cost_micros"] == list_price and paired["cost_ratio"] is not None, paired


async def test_plugin_redaction_header_withholds_content(gateway: Gateway, sidecar: Harness) -> None:
    """Issue 10, item 4: ``x-litellm-enable-message-redaction: true`` → ``redacted`` and no text."""
    trial = await sidecar.create_trial(team="team-e", sample_rate=1.0)
    secret = f"secret-{token()}"
    call = await chat(gateway.plugin, "sk-team-e", f"my {secret}", extra_headers={"x-litellm-enable-message-redaction": "true"})
    ex = (await exchanges_for(gateway, [call]))[call.call_id]
    assert ex["redacted"] is True
    assert secret not in json.dumps(ex) and call.text not in json.dumps(ex)
    assert all(secret.encode() not in d.body for d in gateway.relay.deliveries())
    view = await sidecar.settle(trial["id"], 1)
    assert view["funnel"]["outcomes"]["skipped_redacted"] == 1


async def test_plugin_oversized_exchange_does_not_lose_its_batch(gateway: Gateway, sidecar: Harness) -> None:
    """Issue 10, items 5 and 6: 20 small calls, a 4.5 MB prompt (over the tap's 4 MiB) and a
    2 MB one (over a 1 MiB batch), all buffered while the tap holds the plugin's previous POST,
    so that they would share a batch: the 4.5 MB exchange is dropped alone and counted, the
    2 MB one is sent alone, the 21 others arrive; the drop count reaches ``/metrics``."""
    trial = await sidecar.create_trial(team="team-f", sample_rate=0.0)
    marker = token()
    gateway.relay.hold()
    try:
        held = gateway.relay.held
        first = await chat(gateway.plugin, "sk-team-f", f"first {marker}")

        async def holding() -> bool:
            return gateway.relay.held > held

        await wait_for(holding, what="the plugin's first POST, held")
        small = [chat(gateway.plugin, "sk-team-f", f"small {i} {marker}") for i in range(20)]
        huge = chat(gateway.plugin, "sk-team-f", f"huge {marker} " + "x" * 4_500_000)
        large = chat(gateway.plugin, "sk-team-f", f"large {marker} " + "y" * 2_000_000)
        *smalls, huge_call, large_call = await asyncio.gather(*small, huge, large)
    finally:
        gateway.relay.release()
    got = await exchanges_for(gateway, [first, *smalls, large_call])
    assert len(got) == 22
    deliveries = gateway.relay.deliveries(EXCHANGES)
    assert all(d.status == 202 for d in deliveries), [d.status for d in deliveries]
    assert not [ex for ex in delivered(gateway, accepted_only=False)
                if ex.get("exchange_id") == huge_call.call_id or f"huge {marker}" in prompt_of(ex)]
    sizes = {len(d.items()) for d in deliveries if large_call.prompt in d.body.decode()}
    assert sizes == {1}  # the 2 MB exchange went alone
    assert max(len(d.items()) for d in deliveries) > 1  # and the small ones were batched
    line = 'shadowtrial_plugin_dropped_total{reason="too_large"}'

    async def counted() -> bool:
        return (await metric(sidecar, line) or 0) >= 1

    await wait_for(counted, what="the plugin's too_large drop in /metrics")
    assert await metric(sidecar, line) == 1
    await sidecar.settle(trial["id"], 22)


async def test_plugin_repeated_upstream_ids_do_not_drop_cases(gateway: Gateway, sidecar: Harness) -> None:
    """Issue 10, item 3: the upstream answers every call with the same id; ten calls are ten cases."""
    trial = await sidecar.create_trial(team="team-g", incumbent_model="repeat-model", sample_rate=1.0)
    marker = token()
    calls = [await chat(gateway.plugin, "sk-team-g", f"repeat {i} {marker}", model="repeat-model") for i in range(10)]
    assert {json.loads(c.raw)["id"] for c in calls} == {"chatcmpl-repeat"}
    got = await exchanges_for(gateway, calls)
    assert sorted(ex["exchange_id"] for ex in got.values()) == sorted(c.call_id for c in calls)
    view = await sidecar.settle(trial["id"], 10)
    assert view["funnel"]["outcomes"]["judged"] == 10, view["funnel"]


async def test_plugin_drops_while_the_sidecar_is_down_reach_its_metrics(gateway: Gateway, sidecar: Harness) -> None:
    """With nothing taking the tap's POSTs (the relay answers 503), the caller notices nothing;
    the plugin counts the lost batch and tells the sidecar once it is back."""
    gateway.relay.target = None
    lost = await chat(gateway.plugin, "sk-team-h", f"while down {token()}")
    assert lost.text

    async def refused() -> bool:
        return any(ex.get("exchange_id") == lost.call_id or prompt_of(ex) == lost.prompt
                   for ex in delivered(gateway, accepted_only=False))

    await wait_for(refused, what="the plugin's POST while the sidecar is down")
    assert sidecar.sidecar is not None
    gateway.relay.target = sidecar.sidecar.tap_url
    back = await chat(gateway.plugin, "sk-team-h", f"back {token()}")
    await exchanges_for(gateway, [back])
    line = 'shadowtrial_plugin_dropped_total{reason="http_5xx"}'

    async def counted() -> bool:
        return (await metric(sidecar, line) or 0) >= 1

    await wait_for(counted, what="the plugin's http_5xx drops in /metrics")
    assert not [ex for ex in delivered(gateway) if prompt_of(ex) == lost.prompt]  # lost, not retried


#: A trial's configured incumbent price, per million tokens (input, output).
VICTIM_PRICE = (3.0, 12.0)
#: What the attacker's request body sets, USD per token: $1 a token.
ATTACK_PRICE = {"input_cost_per_token": 1.0, "output_cost_per_token": 1.0}


async def test_plugin_repricing_by_one_caller_never_changes_another_teams_recorded_cost(
    gateway: Gateway, sidecar: Harness, tmp_path: Path,
) -> None:
    """Issue 21, item 9, on the real proxy. A caller of team-a sends prices in its request
    body; LiteLLM 1.80.0 then prices *every* later call of those models at $1 a token. The
    victim team's recorded incumbent cost stays tokens × its trial's configured price:

    - ``map-model`` (priced by LiteLLM's shipped map): the plugin sees the re-priced cost is far
      from the price it read at start-up and sends no cost (disputed);
    - ``unlisted-model`` (in no map: nothing to compare with): the plugin passes LiteLLM's figure
      on, and the sidecar records the trial's configured price instead."""
    price = {"input_per_mtok_usd": VICTIM_PRICE[0], "output_per_mtok_usd": VICTIM_PRICE[1]}
    trials = {model: await sidecar.create_trial(team="victim", incumbent_model=model, sample_rate=1.0,
                                                incumbent_price=price)
              for model in ("map-model", "unlisted-model")}
    marker = token()
    before = await chat(gateway.plugin, "sk-victim", f"before {marker}", model="map-model")
    attacks = [await chat(gateway.plugin, "sk-team-a", f"attack {model} {marker}", model=model, extra_body=ATTACK_PRICE)
               for model in ("map-model", "unlisted-model")]
    after = {model: await chat(gateway.plugin, "sk-victim", f"after {model} {marker}", model=model)
             for model in ("map-model", "unlisted-model")}
    got = await exchanges_for(gateway, [before, *attacks, *after.values()])
    for call in attacks:
        assert got[call.call_id]["team"] == "team-a" and "cost_usd" not in got[call.call_id]["response"]["usage"]
    assert 0 < got[before.call_id]["response"]["usage"]["cost_usd"] < 0.001  # gpt-4o-mini's list price
    assert "cost_usd" not in got[after["map-model"].call_id]["response"]["usage"]  # disputed by the plugin
    unlisted = after["unlisted-model"]
    assert unlisted.usage is not None
    repriced = got[unlisted.call_id]["response"]["usage"].get("cost_usd")
    print(f"\nLiteLLM's cost of the victim's unlisted-model call after the attack: {repriced}")
    assert repriced == pytest.approx(unlisted.usage["prompt_tokens"] + unlisted.usage["completion_tokens"])
    await sidecar.settle(trials["map-model"]["id"], 2)
    await sidecar.settle(trials["unlisted-model"]["id"], 1)
    conn = sqlite3.connect(tmp_path / "trials.db")
    try:
        rows = conn.execute("SELECT exchange_id, incumbent_cost_micros, incumbent_cost_coverage FROM cases").fetchall()
    finally:
        conn.close()
    recorded = {exchange_id: (micros, coverage) for exchange_id, micros, coverage in rows}
    for call in (before, *after.values()):
        assert call.usage is not None
        configured = -(-(call.usage["prompt_tokens"] * 3 + call.usage["completion_tokens"] * 12) // 1)
        print(f"victim call {call.call_id[:8]}: recorded {recorded[call.call_id]}, configured price {configured} µ$")
        assert recorded[call.call_id] == (configured, "complete")


async def test_plugin_empty_call_id_is_a_drop_on_the_sidecars_metrics(gateway: Gateway, sidecar: Harness) -> None:
    """Issue 21, item 10: a caller's empty ``x-litellm-call-id`` leaves the call without an id;
    the plugin drops it and the sidecar's ``/metrics`` counts it with the other drops."""
    line = 'shadowtrial_plugin_dropped_total{reason="no_call_id"}'
    before = await metric(sidecar, line) or 0
    marker = token()
    empty = await chat(gateway.plugin, "sk-team-h", f"empty id {marker}", extra_headers={"x-litellm-call-id": ""})
    assert empty.call_id == "" and empty.text
    good = await chat(gateway.plugin, "sk-team-h", f"good id {marker}")
    await exchanges_for(gateway, [good])

    async def counted() -> bool:
        return (await metric(sidecar, line) or 0) > before

    await wait_for(counted, what="the no_call_id drop in the sidecar's /metrics")
    assert not [ex for ex in delivered(gateway, accepted_only=False) if prompt_of(ex) == empty.prompt]


async def test_plugin_bad_settings_leave_the_gateway_serving(
    gateway: Gateway, litellm_venv: Path, tmp_path: Path,
) -> None:
    """Issue 21, item 10: ``TIMEOUT_S=0`` and ``BATCH=0`` used to exit the proxy at start-up with
    a message about ``batch_size``. Now the proxy starts and serves; its log holds one line
    naming both variables, and the plugin does nothing."""
    # A path of its own on the shared relay: the gateway's proxies post there too (the
    # webhook proxy's OpenTelemetry spans to /v1/traces, whenever its exporter flushes).
    own = "/misconfigured/v1/exchanges"
    env = {"LITELLM_SHADOWTRIAL_TAP_URL": f"{gateway.relay.root_url}{own}",
           "LITELLM_SHADOWTRIAL_TIMEOUT_S": "0", "LITELLM_SHADOWTRIAL_BATCH": "0"}
    gateway.relay.clear()
    with launch(litellm_venv, tmp_path, upstream=gateway.upstream.base_url, deployments=DEPLOYMENTS,
                specs={"misconfigured": ((PLUGIN_CALLBACK,), env)}) as proxies:
        proxy = proxies["misconfigured"]
        served = await chat(proxy, "sk-team-a", f"still serving {token()}")
        assert served.text
        log = proxy.log_text()
    lines = [line for line in log.splitlines() if "LITELLM_SHADOWTRIAL_" in line]
    print("\n" + "\n".join(lines))
    assert len(lines) == 1 and "shadowtrial plugin disabled" in lines[0]
    assert "LITELLM_SHADOWTRIAL_TIMEOUT_S" in lines[0] and "LITELLM_SHADOWTRIAL_BATCH " in lines[0]
    assert "batch_size" not in log and "timeout_s" not in log
    assert not gateway.relay.deliveries(own)  # the disabled plugin sent nothing


# --- the webhook (the generic API logger's format) ----------------------------------------


async def test_webhook_streamed_and_plain_traffic_reaches_a_verdict(gateway: Gateway, sidecar: Harness) -> None:
    trial = await sidecar.create_trial(team=WEBHOOK_TEAM, sample_rate=1.0, audit_share=0.0)
    marker = token()
    gate = asyncio.Semaphore(4)

    async def one(i: int) -> Served:
        async with gate:
            return await chat(gateway.webhook, "sk-team-a", f"question {i} {marker}", stream=i % 2 == 1,
                              include_usage=i % 4 == 1)

    calls = await asyncio.gather(*(one(i) for i in range(40)))
    payloads = await payloads_with(gateway, marker, 40)
    texts = {p["response"]["choices"][0]["message"]["content"] for p in payloads}
    assert texts == {c.text for c in calls}
    assert {d.query.get("team") for d in gateway.relay.deliveries(WEBHOOK)} == {WEBHOOK_TEAM}
    view = await sidecar.settle(trial["id"], 40)
    assert view["funnel"]["outcomes"]["judged"] == 40, view["funnel"]
    assert (view["verdict"]["code"], view["verdict"]["cases"]) == ("candidate_better", 40), view["verdict"]


@pytest.mark.parametrize("field", ["litellm_metadata", "metadata"])
async def test_webhook_team_spoofing_body_lands_in_the_endpoints_team(
    gateway: Gateway, sidecar: Harness, field: str,
) -> None:
    own = await sidecar.create_trial(team=WEBHOOK_TEAM, sample_rate=1.0)
    victim = await sidecar.create_trial(team="victim", sample_rate=1.0)
    marker = token()
    spoof = {field: {"user_api_key_team_alias": "victim", "user_api_key_team_id": "victim-id"}}
    await chat(gateway.webhook, "sk-team-c", f"spoof {marker}", extra_body=spoof)
    [payload] = await payloads_with(gateway, marker, 1)
    if field == "litellm_metadata":  # what makes the payload's own team worthless (FINDINGS.md, 2)
        assert payload["metadata"]["user_api_key_team_alias"] == "victim"
    await sidecar.settle(own["id"], 1)
    assert (await sidecar.trial(victim["id"]))["funnel"]["total"] == 0


async def test_webhook_unpriced_model_arrives_with_unknown_cost(gateway: Gateway, sidecar: Harness) -> None:
    trial = await sidecar.create_trial(team=WEBHOOK_TEAM, incumbent_model="unpriced-model", sample_rate=1.0,
                                       incumbent_price={"input_per_mtok_usd": 3.0, "output_per_mtok_usd": 12.0})
    marker = token()
    call = await chat(gateway.webhook, "sk-team-d", f"unpriced {marker}", model="unpriced-model")
    [payload] = await payloads_with(gateway, marker, 1)
    assert payload["response_cost"] == 0.0  # what LiteLLM logs for it: the webhook must read it as unknown
    view = await sidecar.settle(trial["id"], 1)
    assert call.usage is not None
    list_price = call.usage["prompt_tokens"] * 3 + call.usage["completion_tokens"] * 12
    assert view["paired"]["incumbent_cost_micros"] == list_price and view["paired"]["cost_ratio"] is not None


async def test_webhook_redaction_header_withholds_content(gateway: Gateway, sidecar: Harness) -> None:
    trial = await sidecar.create_trial(team=WEBHOOK_TEAM, sample_rate=1.0)
    secret = f"secret-{token()}"
    await chat(gateway.webhook, "sk-team-e", f"my {secret}", extra_headers={"x-litellm-enable-message-redaction": "true"})
    await payloads_with(gateway, secret, 1)  # LiteLLM itself logs the content (FINDINGS.md)
    view = await sidecar.settle(trial["id"], 1)
    assert view["funnel"]["outcomes"]["skipped_redacted"] == 1, view["funnel"]


async def test_webhook_repeated_upstream_ids_do_not_drop_cases(gateway: Gateway, sidecar: Harness) -> None:
    trial = await sidecar.create_trial(team=WEBHOOK_TEAM, incumbent_model="repeat-model", sample_rate=1.0)
    marker = token()
    for i in range(10):
        await chat(gateway.webhook, "sk-team-g", f"repeat {i} {marker}", model="repeat-model")
    payloads = await payloads_with(gateway, marker, 10)
    assert {p["id"] for p in payloads} == {"chatcmpl-repeat"}
    view = await sidecar.settle(trial["id"], 10)
    assert view["funnel"]["outcomes"]["judged"] == 10, view["funnel"]


async def test_litellms_own_generic_api_logger_sends_nothing_without_a_licence(gateway: Gateway, sidecar: Harness) -> None:
    """LiteLLM 1.80.0's ``generic_api`` logger checks for an enterprise licence before it queues
    anything: it logs a 403 and sends nothing, and the caller is not affected. Pinned here so
    that a version that lifts the gate is noticed (then this path can drop the stand-in)."""
    before = gateway.webhook.log_text().count(ENTERPRISE_GATE)
    marker = token()
    call = await chat(gateway.webhook, "sk-team-a", f"licence {marker}")
    assert call.text

    async def refused() -> bool:
        return gateway.webhook.log_text().count(ENTERPRISE_GATE) > before

    await wait_for(refused, what="the generic_api logger's licence check in the proxy's log")
    await payloads_with(gateway, marker, 1)  # the stand-in, called in the same logging pass, did send
    assert not [d for d in gateway.relay.deliveries(WEBHOOK) if d.query.get("via") == "generic_api"]
