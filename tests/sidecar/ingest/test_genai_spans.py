"""GenAI spans to exchanges (sidecar/ingest/genai_spans.py): each convention, the team rule,
redaction, non-LLM spans, and sampling decided before any content is read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from policies.sampling import is_sampled
from sidecar.config.otlp import OtlpConfig
from sidecar.ingest import genai_spans
from sidecar.ingest.genai_spans import read_spans
from sidecar.ingest.routing import Route, Routes
from tests.sidecar.ingest.otlp_spans import (
    event_chat, export, openinference_chat, openllmetry_chat, semconv_chat, span,
)

SETTINGS = OtlpConfig()
ROUTES = Routes([Route("t-1", "team-a", "inc-model", None, None, 1.0, "local")])


def read(request: Any, routes: Routes = ROUTES, settings: OtlpConfig = SETTINGS,
         jwt_teams: frozenset[str] | None = None) -> genai_spans.SpanBatch:
    return read_spans(request, routes, settings, jwt_teams=jwt_teams)


def test_a_semconv_chat_span_becomes_one_exchange_with_messages_params_answer_usage_and_latency() -> None:
    batch = read(export([span(0, semconv_chat(0, **{
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "be brief"}])}))]))
    assert batch.outcomes == {"exchange": 1}
    (ex,) = batch.exchanges
    assert ex.exchange_id == f"{(1).to_bytes(16, 'big').hex()}-{(1).to_bytes(8, 'big').hex()}"
    assert (ex.team, ex.model, ex.gateway, ex.redacted) == ("team-a", "inc-model", "gw-1", False)
    assert ex.request.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "question 0"}]
    assert ex.request.params == {"max_tokens": 64, "temperature": 0.2}
    assert (ex.response.content, ex.response.finish_reason) == ("answer 0 ⟨q=0.500⟩", "stop")
    assert (ex.response.usage.input_tokens, ex.response.usage.output_tokens) == (12, 20)
    assert ex.latency_ms == 250.0 and ex.served_at == "2025-12-02T00:00:00.250000Z"
    assert ex.traceparent == f"00-{'0' * 31}1-{'0' * 15}1-01"


@pytest.mark.parametrize("convention", ["openllmetry", "openinference", "events"])
def test_each_other_convention_gives_the_same_request_and_answer(convention: str) -> None:
    if convention == "openllmetry":
        s = span(0, openllmetry_chat(0))
    elif convention == "openinference":
        s = span(0, openinference_chat(0))
    else:
        attrs, events = event_chat(0)
        s = span(0, attrs, events=events)
    (ex,) = read(export([s])).exchanges
    assert ex.request.messages[-1] == {"role": "user", "content": "question 0"}
    assert ex.response.content == "answer 0 ⟨q=0.500⟩"
    if convention != "openinference":
        assert ex.request.messages[0] == {"role": "system", "content": "be brief"}
        assert ex.response.finish_reason == "stop"
    else:
        assert ex.request.params == {"temperature": 0.1, "max_tokens": 32}
        assert ex.response.usage.input_tokens == 12


def test_tool_calls_and_tool_results_in_parts_become_openai_messages() -> None:
    messages = [
        {"role": "user", "parts": [{"type": "text", "content": "weather?"}]},
        {"role": "assistant",
         "parts": [{"type": "tool_call", "id": "c1", "name": "wx", "arguments": {"city": "Oslo"}}]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "rain"}]},
    ]
    (ex,) = read(export([span(0, semconv_chat(0, **{"gen_ai.input.messages": json.dumps(messages)}))])).exchanges
    assert ex.request.messages == [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "wx", "arguments": '{"city":"Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "rain"},
    ]


def test_a_span_without_content_is_redacted_and_not_llm_spans_are_counted_and_ignored() -> None:
    spans = [span(0, semconv_chat(0, content=False)),
             span(1, {"http.route": "/v1/chat", "http.request.method": "POST"}, name="POST /v1/chat"),
             span(2, semconv_chat(2, **{"gen_ai.operation.name": "embeddings"}))]
    batch = read(export(spans))
    assert batch.outcomes == {"skipped_redacted": 1, "not_llm": 2}
    assert batch.exchanges == [] and [s.redacted for s in batch.skeletons] == [True]


def test_the_team_is_never_a_span_attribute_unless_the_operator_names_one() -> None:
    attrs = semconv_chat(0, **{"shadowtrial.team": "victim", "team": "victim"})
    no_team = export([span(0, attrs)], resource={"service.name": "gw-1"})
    batch = read(no_team)
    assert batch.outcomes == {"unattributed": 1} and batch.rejected == 1 and "no team" in batch.reasons["unattributed"]
    # a single-team gateway JWT gives the team; the span's attributes still do not
    (ex,) = read(no_team, jwt_teams=frozenset({"team-a"})).exchanges
    assert ex.team == "team-a"
    # the resource attribute wins over a span attribute named the same
    (ex,) = read(export([span(0, attrs)])).exchanges
    assert ex.team == "team-a"
    # only when the operator names a span attribute is it read
    batch = read(no_team, settings=OtlpConfig(team_span_attribute="team"))
    assert [ex.team for ex in batch.exchanges + batch.skeletons] == ["victim"]


def test_unsampled_spans_never_have_their_content_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling is decided on the skeleton: at rate 0 the content step never runs."""
    calls: list[int] = []
    real = genai_spans._full
    monkeypatch.setattr(genai_spans, "_full", lambda *a: calls.append(1) or real(*a))
    spans = [span(i, semconv_chat(i)) for i in range(200)]
    zero = Routes([Route("t-0", "team-a", "inc-model", None, None, 0.0, "local")])
    batch = read(export(spans), routes=zero)
    assert calls == [] and batch.exchanges == [] and len(batch.skeletons) == 200
    assert all(s.request.messages == [] for s in batch.skeletons)
    # at 5 %, exactly the spans the keyed hash samples are read
    five = Routes([Route("t-5", "team-a", "inc-model", None, None, 0.05, "local")])
    batch = read(export(spans), routes=five)
    expected = sum(is_sampled("t-5", s.exchange_id, 0.05) for s in batch.skeletons + batch.exchanges)
    assert len(calls) == len(batch.exchanges) == expected > 0


@pytest.mark.parametrize("bad", [
    {"gen_ai.input.messages": "not json"},
    {"gen_ai.input.messages": json.dumps({"role": "user"})},
    {"gen_ai.input.messages": json.dumps([{"parts": []}])},
    {"gen_ai.request.max_tokens": -5},
    {"gen_ai.request.model": 7, "gen_ai.response.model": ["x"]},
])
def test_a_span_whose_content_cannot_be_used_is_rejected_alone(bad: dict[str, Any]) -> None:
    batch = read(export([span(0, semconv_chat(0, **bad)), span(1, semconv_chat(1))]))
    assert batch.outcomes == {"invalid": 1, "exchange": 1} and batch.rejected == 1
    assert [ex.exchange_id[-1] for ex in batch.exchanges] == ["2"]
    assert "not json" not in batch.reasons["invalid"]


def test_with_the_retention_window_on_every_span_is_read_whatever_the_sampling() -> None:
    """The window keeps every exchange's content, so nothing can be left a skeleton but spans without content."""
    zero = Routes([Route("t-0", "team-a", "inc-model", None, None, 0.0, "local")])
    spans = [span(i, semconv_chat(i)) for i in range(5)] + [span(9, semconv_chat(9, content=False))]
    batch = read_spans(export(spans), zero, SETTINGS, jwt_teams=None, decode_all=True)
    assert [ex.request.messages[-1]["content"] for ex in batch.exchanges] == [f"question {i}" for i in range(5)]
    assert [s.redacted for s in batch.skeletons] == [True]
