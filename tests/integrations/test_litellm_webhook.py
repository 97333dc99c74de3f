"""The no-code LiteLLM path: ``POST /v1/integrations/litellm`` on the real tap, fed what a real
LiteLLM 1.80.0 generic API logger posted (tests/fixtures/litellm/generic_batch*.json, the
exact bodies, captured in front of the fake provider; see the README there)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from sidecar.integrations.litellm_webhook import exchanges_from_body
from tests.harness import INCUMBENT, Harness

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "litellm"
BATCH = (FIXTURES / "generic_batch.json").read_bytes()
URL = "/v1/integrations/litellm"

#: What the captured batch holds: 13 entries, of which 11 are exchanges; one is the
#: sidecar's own call (x-shadowtrial-shadow), one an embedding that failed.
SKIPPED = {"not_chat": 1, "failed": 0, "shadow_call": 1, "incomplete": 0, "invalid": 0}


def entries() -> list[dict[str, Any]]:
    batch: list[dict[str, Any]] = json.loads(BATCH)
    return batch


def ndjson(items: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(e).encode() + b"\n" for e in items)


async def post(h: Harness, body: bytes, *, params: str = "?team=team-a", **headers: str) -> httpx.Response:
    assert h.tap
    return await h.tap.post(URL + params, content=body, headers={"Content-Type": "application/json", **headers})


def assert_error(r: httpx.Response, status: int, code: str, field: str | None) -> None:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert r.json()["error"]["code"] == code and r.json()["error"]["field"] == field, r.text


# -- both formats, against the real tap ------------------------------------------------


@pytest.mark.parametrize("fmt", ["json_array", "ndjson", "ndjson_without_content_type"])
async def test_the_generic_loggers_batch_becomes_exchanges(tmp_path: Path, fmt: str) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        if fmt == "json_array":
            r = await post(h, BATCH)  # the exact body LiteLLM posted
        elif fmt == "ndjson":
            r = await post(h, ndjson(entries()), **{"Content-Type": "application/x-ndjson"})
        else:
            r = await post(h, ndjson(entries()), **{"Content-Type": "text/plain"})
        assert r.status_code == 202, r.text
        # Six inc-model chat completions for the URL's team, one redacted by its header; the
        # call whose body spoofed litellm_metadata names "victim-model" in the payload, so it
        # matches no trial (a caller can mislabel the model of its own team's traffic here).
        assert r.json() == {"accepted": 11, "sampled": 5, "shed": 0, "skipped": SKIPPED, "refused": 0}
        view = await h.settle(trial["id"], 6)
        assert view["funnel"]["outcomes"]["skipped_redacted"] == 1
        assert view["funnel"]["outcomes"]["judged"] == 5
        assert h.runtime.counters["litellm_webhook_skipped_shadow_call"] == 1
        assert h.admin
        text = (await h.admin.get("/metrics")).text
        assert 'shadowtrial_litellm_webhook_skipped_total{reason="not_chat"} 1' in text


def test_the_mapping_of_the_real_batch() -> None:
    """The same mapping as the plugin (sidecar.integrations.slo), with what the webhook can know."""
    batch = exchanges_from_body(BATCH, "application/json", team="team-a", gateway="gw-1")
    exchanges = batch.screened.exchanges
    assert len(exchanges) == 11 and dict(batch.skipped) == {"not_chat": 1, "shadow_call": 1}
    # The team is the URL's for every entry: the payload's "victim" (a body's litellm_metadata) is ignored.
    logged_teams = {(e.get("metadata") or {}).get("user_api_key_team_alias") for e in entries()}
    assert "victim" in logged_teams and {ex.team for ex in exchanges} == {"team-a"}
    assert {ex.gateway for ex in exchanges} == {"gw-1"}
    # Distinct ids, though the upstream's response ids repeat ("chatcmpl-fake-3" twice).
    upstream = [e["id"] for e in entries()]
    assert len(set(upstream)) < len(upstream) and len({ex.exchange_id for ex in exchanges}) == 11
    by_model: dict[str, list[Any]] = {}
    for ex in exchanges:
        by_model.setdefault(ex.model, []).append(ex)
    # Unknown is not zero: a logged 0.0 is unknown (unpriced, free and re-priced look the same here).
    assert [ex.response.usage.cost_usd for ex in by_model["unpriced-model"]] == [None]
    assert [ex.response.usage.cost_usd for ex in by_model["free-model"]] == [None]
    assert sorted(ex.response.usage.cost_usd is None for ex in by_model["map-priced"]) == [False, True]
    assert all(ex.response.usage.cost_usd for ex in by_model[INCUMBENT])
    redacted = [ex for ex in exchanges if ex.redacted]
    assert len(redacted) == 1 and redacted[0].request.messages == [] and redacted[0].response.content is None
    assert "4111" not in json.dumps([ex.request.messages for ex in exchanges])
    plain = next(ex for ex in by_model[INCUMBENT] if ex.request.params.get("tools"))
    assert set(plain.request.params) == {"temperature", "max_tokens", "tools", "tool_choice"}
    assert plain.route == "/v1/chat/completions" and plain.latency_ms and plain.latency_ms > 0


async def test_logging_turned_off_arrives_redacted(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        r = await post(h, (FIXTURES / "generic_batch_turn_off_logging.json").read_bytes())
        assert r.status_code == 202 and r.json()["accepted"] == 2 and r.json()["sampled"] == 0
        view = await h.settle(trial["id"], 2)
        assert view["funnel"]["outcomes"]["skipped_redacted"] == 2


# -- the team ---------------------------------------------------------------------------


async def test_the_team_comes_from_the_url_or_the_gateways_credential(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True, tap_lines="gateway_jwt = true") as h:
        one = h.token(roles=["gateway"], teams=["team-a"])
        two = h.token(roles=["gateway"], teams=["team-a", "team-b"])
        r = await post(h, BATCH, params="", Authorization=f"Bearer {one}")
        assert r.status_code == 202 and r.json()["accepted"] == 11  # the JWT's only team
        assert_error(await post(h, BATCH, params="", Authorization=f"Bearer {two}"), 400, "missing_team", "team")
        r = await post(h, BATCH, params="?team=team-b", Authorization=f"Bearer {two}")
        assert r.status_code == 202, r.text
        assert_error(await post(h, BATCH, params="?team=team-c", Authorization=f"Bearer {two}"), 403, "forbidden", "team")
        assert_error(await post(h, BATCH, params="?team=team-a"), 401, "unauthorized", None)


async def test_without_a_team_the_webhook_refuses(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert_error(await post(h, BATCH, params=""), 400, "missing_team", "team")
        assert_error(await post(h, BATCH, params="?team=%20a"), 400, "invalid_parameter", "team")
        assert_error(await post(h, BATCH, params="?team=a&team=b"), 400, "invalid_parameter", "team")
        assert_error(await post(h, BATCH, params="?team=a&teem=b"), 400, "invalid_parameter", "teem")
        assert_error(await post(h, BATCH, params="?team=a&gateway="), 400, "invalid_parameter", "gateway")
        assert h.runtime.counters["exchanges_received"] == 0


# -- bad input: 4xx JSON, never 5xx, entries skipped without failing the batch ------------------


async def test_bad_bodies_are_4xx_json_naming_the_field(tmp_path: Path) -> None:
    async with Harness(tmp_path, max_body_bytes=100_000) as h:
        assert_error(await post(h, b""), 400, "invalid_payload", None)
        assert_error(await post(h, b"{nope"), 400, "invalid_payload", "$")
        assert_error(await post(h, b"42"), 400, "invalid_payload", "$")
        assert_error(await post(h, b'[{"call_type": "acompletion"}, 7]'), 400, "invalid_payload", "$[1]")
        lines = ndjson(entries()[:2]) + b"{broken\n"
        assert_error(await post(h, lines, **{"Content-Type": "application/x-ndjson"}), 400, "invalid_payload", "line 3: $")
        assert_error(await post(h, b"[" * 5000 + b"]" * 5000), 400, "invalid_payload", "$")
        assert_error(await post(h, b"x" * 200_000), 413, "body_too_large", None)
        assert_error(await post(h, b"not gzip", **{"Content-Encoding": "gzip"}), 400, "invalid_encoding", None)
        r = await post(h, gzip.compress(BATCH), **{"Content-Encoding": "gzip"})
        assert r.status_code == 202 and r.json()["accepted"] == 11
        assert_error(await h.tap.get(URL), 405, "method_not_allowed", None)  # type: ignore[union-attr]
        assert h.runtime.counters["tap_failed"] == 0


async def test_entries_that_are_not_exchanges_are_counted_and_skipped(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        good = entries()[0]
        no_messages = {**good, "messages": None}
        no_response = {**good, "response": None}
        no_id = {**good, "id": ""}
        bad_tokens = {**good, "model_parameters": {**good["model_parameters"], "max_tokens": 0}}
        failed = {**good, "status": "failure"}
        text = {**good, "call_type": "atext_completion"}
        odd_types = {**good, "startTime": "yesterday", "prompt_tokens": -3, "response_cost": "free"}
        body = json.dumps([good, no_messages, no_response, no_id, bad_tokens, failed, text, odd_types]).encode()
        r = await post(h, body)
        assert r.status_code == 202, r.text
        assert r.json()["accepted"] == 2
        assert r.json()["skipped"] == {"not_chat": 1, "failed": 1, "shadow_call": 0, "incomplete": 3, "invalid": 1}


async def test_the_same_credentials_and_stats_header_as_the_tap(tmp_path: Path) -> None:
    async with Harness(tmp_path, environ={"TAP_TOKEN": "s3cret"}, tap_token_env="TAP_TOKEN") as h:
        assert_error(await post(h, BATCH), 401, "unauthorized", None)
        assert_error(await post(h, BATCH, Authorization="Bearer nope"), 401, "unauthorized", None)
        stats = json.dumps({"instance": "hook-1", "dropped": {"timeout": 2}})
        r = await post(h, BATCH, Authorization="Bearer s3cret", **{"Shadowtrial-Plugin-Stats": stats})
        assert r.status_code == 202 and r.json()["accepted"] == 11
        assert h.runtime.plugin_stats.totals()["timeout"] == 2
