"""Provider clients against the fake provider on loopback (MockTransport only for 529)."""

from __future__ import annotations

import asyncio
import gzip
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from typing import Any

import httpx
import msgspec
import pytest
from aiohttp import web

from sidecar.demo.fake_provider import MARKER_RE, FakeModel, FakeProvider
from sidecar.providers.anthropic import AnthropicProvider, convert_messages
from sidecar.providers.base import ChatRequest, ProviderResult
from sidecar.providers.errors import ProviderClosedError, ProviderConfigError
from sidecar.providers.factory import make_provider
from sidecar.providers.openai import OpenAIProvider, parse_chat_completion
from sidecar.providers.retry import RetryPolicy, parse_retry_after
from tests.ports import reserved_port

KEY = "sk-very-secret-key-123"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class SleepRecorder:
    """A no-op sleep that records each backoff delay and advances a fake clock."""

    def __init__(self) -> None:
        self.delays: list[float] = []
        self.now = 1000.0

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)
        self.now += delay

    def clock(self) -> float:
        return self.now


def client_opts(sleep: SleepRecorder, **overrides: Any) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "timeout": httpx.Timeout(5.0),
        "limits": httpx.Limits(max_connections=20),
        "deadline_s": 30.0,
        "max_retries": 3,
        "rng": random.Random(0),
        "sleep": sleep,
    }
    opts.update(overrides)
    return opts


def ask(model: str = "cand", content: str = "What is the capital of France?", **params: Any) -> ChatRequest:
    return ChatRequest(model=model, messages=[{"role": "user", "content": content}], params=params)


async def openai_chat(fp: FakeProvider, request: ChatRequest, **overrides: Any) -> tuple[ProviderResult, SleepRecorder]:
    sleep = SleepRecorder()
    async with OpenAIProvider(fp.base_url, KEY, **client_opts(sleep, **overrides)) as provider:
        return await provider.chat(request), sleep


# --- success ---------------------------------------------------------------------------


async def test_success_extracts_content_finish_reason_and_usage() -> None:
    async with FakeProvider({"cand": FakeModel(quality=0.7, quality_noise=0.0)}, seed=2) as fp:
        result, sleep = await openai_chat(fp, ask(max_tokens=1000))
    assert result.ok and result.error is None and result.status == 200
    assert result.content is not None and MARKER_RE.findall(result.content) == ["0.700"]
    assert result.finish_reason == "stop"
    assert result.input_tokens is not None and result.input_tokens > 0
    assert result.output_tokens == -(-len(result.content.encode()) // 4)
    assert (result.attempts, result.may_have_billed, sleep.delays) == (1, False, [])


#: Issue 21, item 4: usage figures as upstreams really report them -> (input, output, disputed).
USAGE_QUIRKS: dict[str, tuple[tuple[Any, Any], tuple[int | None, int | None, bool]]] = {
    "whole-number floats": ((50.0, 7.0), (50, 7, False)),
    "ints": ((50, 7), (50, 7, False)),
    "null": ((None, None), (None, None, False)),
    "1e30": ((1e30, 1e30), (None, None, True)),
    "NaN": ((float("nan"), float("nan")), (None, None, True)),
    "infinities": ((float("inf"), float("-inf")), (None, None, True)),
    "negative": ((-5, 3), (None, 3, True)),
    "strings": (("50", "many"), (None, None, True)),
    "fractions": ((50.5, 3), (None, 3, True)),
    "huge int": ((10**30, 4), (None, 4, True)),
    "booleans": ((True, False), (None, None, True)),
}


@pytest.mark.parametrize("shape", ["openai", "anthropic"])
@pytest.mark.parametrize("quirk", sorted(USAGE_QUIRKS))
async def test_usage_quirks_keep_the_answer_and_dispute_the_figures(shape: str, quirk: str) -> None:
    """A readable answer is never lost to its meter: odd usage figures make the counts None
    and the report disputed (charged at the worst case), whole-number floats are counts."""
    reported, (inputs, outputs, disputed) = USAGE_QUIRKS[quirk]
    models = {"m": FakeModel(quality=0.7, quality_noise=0.0, usage_override=reported)}
    sleep = SleepRecorder()
    async with FakeProvider(models) as fp:
        kind = OpenAIProvider if shape == "openai" else AnthropicProvider
        url = fp.base_url if shape == "openai" else fp.root_url
        async with kind(url, KEY, **client_opts(sleep)) as provider:
            result = await provider.chat(ask(model="m", max_tokens=100))
    assert result.ok and result.error is None and result.content is not None
    assert MARKER_RE.findall(result.content) == ["0.700"]
    assert (result.input_tokens, result.output_tokens, result.usage_disputed) == (inputs, outputs, disputed)
    assert result.attempts == 1 and not result.may_have_billed


@pytest.mark.parametrize("usage", [b'"n/a"', b"[1, 2]", b"7", b'{"prompt_tokens": 1e400, "completion_tokens": 2}'])
def test_usage_that_is_not_an_object_of_counts_is_disputed(usage: bytes) -> None:
    body = b'{"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": ' + usage + b"}"
    completion = parse_chat_completion(body)
    assert completion is not None and completion.content == "hi" and completion.usage_disputed
    assert completion.input_tokens is None


def test_a_body_that_is_not_json_stays_malformed() -> None:
    assert parse_chat_completion(b'{"choices": [{"message": ') is None
    assert parse_chat_completion(b'{"choices": [{"message": {"content": NaN}}]}') is None  # NaN text: not an answer


async def test_tool_calls_are_rendered_as_text() -> None:
    models = {"cand": FakeModel(tool_arguments={"city": "Paris"})}
    request = ask(tools=[WEATHER_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    async with FakeProvider(models) as fp:
        result, _ = await openai_chat(fp, request)
    assert result.ok and result.content is not None
    assert result.content.endswith('\n[tool_call get_weather({"city":"Paris"})]')
    assert result.finish_reason == "tool_calls"


async def test_params_pass_through_model_swapped_headers_arrive_stream_dropped() -> None:
    params = {
        "temperature": 0.3,
        "top_p": 0.9,
        "max_tokens": 200,
        "stop": ["\n\n"],
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "seed": 11,
        "stream": True,
        "stream_options": {"include_usage": True},
        "model": "incumbent",
    }
    request = ChatRequest(
        model="cand",
        messages=[{"role": "user", "content": "hi"}],
        params=params,
        headers={"X-Shadow-Trial": "trial-1", "Authorization": "Bearer stolen"},
    )
    async with FakeProvider({"cand": FakeModel()}) as fp:
        result, _ = await openai_chat(fp, request)
    assert result.ok
    assert fp.calls == {"cand": 1}
    _, headers, body = fp.requests[0]
    expected = {k: v for k, v in params.items() if k not in ("stream", "stream_options", "model")}
    assert body == {**expected, "model": "cand", "messages": [{"role": "user", "content": "hi"}]}
    assert headers["X-Shadow-Trial"] == "trial-1"
    assert headers["Authorization"] == f"Bearer {KEY}"


# --- retries ---------------------------------------------------------------------------


async def test_429_retry_after_is_honoured() -> None:
    async with FakeProvider({"cand": FakeModel(script=["429", "ok"], retry_after_s=7)}) as fp:
        result, sleep = await openai_chat(fp, ask(), base_delay_s=0.1, max_delay_s=1.0)
    assert result.ok and result.attempts == 2
    assert len(sleep.delays) == 1 and sleep.delays[0] >= 7.0
    assert fp.calls["cand"] == 2


async def test_500_is_not_retried() -> None:
    async with FakeProvider({"cand": FakeModel(script=["500", "ok"])}) as fp:
        result, sleep = await openai_chat(fp, ask())
    assert (result.ok, result.error, result.status, result.attempts) == (False, "http_5xx", 500, 1)
    assert sleep.delays == [] and fp.calls["cand"] == 1


@pytest.mark.parametrize("fault", ["502", "503"])
async def test_gateway_errors_are_retried(fault: str) -> None:
    async with FakeProvider({"cand": FakeModel(script=[fault, fault, "ok"])}) as fp:
        result, sleep = await openai_chat(fp, ask(), base_delay_s=0.5, max_delay_s=8.0)
    assert result.ok and result.attempts == 3 and fp.calls["cand"] == 3
    assert len(sleep.delays) == 2
    assert 0.0 <= sleep.delays[0] <= 0.5 and 0.0 <= sleep.delays[1] <= 1.0  # full jitter, doubling cap
    assert result.unknown_fate_attempts == 0 and not result.may_have_billed


@pytest.mark.parametrize("fault", ["504", "reset"])
async def test_an_attempt_that_may_have_billed_is_not_retried(fault: str) -> None:
    # A 504 (a gateway gave up on an upstream that may still finish) or a reset after
    # the request went out may have been billed. The spend cap reserves one worst case
    # per call, so a second billable attempt could pass it: the call ends here.
    async with FakeProvider({"cand": FakeModel(script=[fault, "ok"])}) as fp:
        result, sleep = await openai_chat(fp, ask())
    assert not result.ok and result.attempts == 1 and sleep.delays == []
    assert result.may_have_billed is True and result.unknown_fate_attempts == 1
    assert fp.calls["cand"] == 1


@pytest.mark.parametrize(
    "model,error,status",
    [(FakeModel(rate_429=1.0, retry_after_s=0), "http_429", 429), (FakeModel(rate_503=1.0), "http_5xx", 503)],
)
async def test_exhausted_retries_return_the_last_failure(model: FakeModel, error: str, status: int) -> None:
    async with FakeProvider({"cand": model}) as fp:
        result, sleep = await openai_chat(fp, ask(), max_retries=2)
    assert (result.ok, result.error, result.status, result.attempts) == (False, error, status, 3)
    assert fp.calls["cand"] == 3 and len(sleep.delays) == 2
    assert result.may_have_billed is False


async def test_read_timeout_is_not_retried_and_may_have_billed() -> None:
    async with FakeProvider({"cand": FakeModel(script=["timeout", "ok"])}) as fp:
        result, sleep = await openai_chat(fp, ask(), timeout=httpx.Timeout(5.0, read=0.2))
    assert (result.ok, result.error, result.attempts) == (False, "timeout", 1)
    assert result.may_have_billed is True and result.unknown_fate_attempts == 1
    assert fp.calls["cand"] == 1 and sleep.delays == []


async def test_refused_connection_is_retried_then_reported() -> None:
    sleep = SleepRecorder()
    with reserved_port() as port:  # held, with no listener: refused every time
        async with OpenAIProvider(f"http://127.0.0.1:{port}/v1", KEY, **client_opts(sleep, max_retries=2)) as provider:
            result = await provider.chat(ask())
    assert (result.ok, result.error, result.attempts, result.status) == (False, "connection", 3, None)
    assert result.may_have_billed is False and len(sleep.delays) == 2


async def test_malformed_body_is_not_retried() -> None:
    async with FakeProvider({"cand": FakeModel(script=["malformed", "ok"])}) as fp:
        result, sleep = await openai_chat(fp, ask())
    assert (result.ok, result.error, result.status, result.attempts) == (False, "malformed", 200, 1)
    assert result.may_have_billed is True  # billed, usage unknown
    assert fp.calls["cand"] == 1


async def test_4xx_is_not_retried() -> None:
    async with FakeProvider({"cand": FakeModel()}, api_key="other-key") as fp:
        unauthorised, _ = await openai_chat(fp, ask())
    async with FakeProvider({"cand": FakeModel()}, api_key=KEY) as fp:
        unknown_model, _ = await openai_chat(fp, ask(model="nope"))
    assert (unauthorised.error, unauthorised.status, unauthorised.attempts) == ("http_4xx", 401, 1)
    assert (unknown_model.error, unknown_model.status, unknown_model.attempts) == ("http_4xx", 404, 1)


# --- the overall deadline -----------------------------------------------------------------


async def test_backoff_never_sleeps_past_the_deadline() -> None:
    async with FakeProvider({"cand": FakeModel(rate_503=1.0)}) as fp:
        sleep = SleepRecorder()
        opts = client_opts(sleep, deadline_s=10.0, max_retries=100, base_delay_s=1.0, max_delay_s=4.0)
        async with OpenAIProvider(fp.base_url, KEY, clock=sleep.clock, **opts) as provider:
            result = await provider.chat(ask())
    assert (result.ok, result.error) == (False, "http_5xx")
    assert sum(sleep.delays) < 10.0
    assert 1 < result.attempts < 101 and fp.calls["cand"] == result.attempts
    assert result.latency_ms == pytest.approx(sum(sleep.delays) * 1000.0)


async def test_retry_after_beyond_the_deadline_gives_up_at_once() -> None:
    async with FakeProvider({"cand": FakeModel(rate_429=1.0, retry_after_s=60)}) as fp:
        result, sleep = await openai_chat(fp, ask(), deadline_s=5.0)
    assert (result.ok, result.error, result.attempts) == (False, "http_429", 1)
    assert sleep.delays == []


async def test_deadline_cuts_a_stalled_attempt() -> None:
    async with FakeProvider({"cand": FakeModel(rate_timeout=1.0)}) as fp:
        result, _ = await openai_chat(fp, ask(), timeout=httpx.Timeout(60.0), deadline_s=0.3)
    assert (result.ok, result.error, result.attempts, result.may_have_billed) == (False, "timeout", 1, True)
    assert result.latency_ms < 10_000  # cut by the 0.3 s deadline, not the 60 s read timeout


def test_retry_after_parses_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    date = format_datetime(now + timedelta(seconds=42), usegmt=True)
    assert parse_retry_after(httpx.Headers({"Retry-After": "3"}), now=now) == 3.0
    assert parse_retry_after(httpx.Headers({"Retry-After": date}), now=now) == 42.0
    assert parse_retry_after(httpx.Headers({"Retry-After": format_datetime(now - timedelta(seconds=5))}), now=now) == 0
    assert parse_retry_after(httpx.Headers({"retry-after-ms": "250", "Retry-After": "9"}), now=now) == 0.25
    assert parse_retry_after(httpx.Headers({"Retry-After": "soon"}), now=now) is None
    assert parse_retry_after(httpx.Headers(), now=now) is None


def test_full_jitter_stays_under_the_capped_exponential() -> None:
    policy = RetryPolicy(deadline_s=60.0, max_retries=10, base_delay_s=0.5, max_delay_s=4.0)
    rng = random.Random(1)
    for retry, cap in [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)]:
        delays = [policy.backoff(retry, rng) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in delays)
        assert max(delays) > cap * 0.8  # jitter spreads over the whole range


# --- Anthropic -----------------------------------------------------------------------------


async def test_anthropic_request_conversion_reaches_the_server() -> None:
    request = ChatRequest(
        model="claude",
        messages=[
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        ],
        params={
            "temperature": 0.2,
            "stop": "END",
            "tools": [WEATHER_TOOL],
            "tool_choice": "required",
            "frequency_penalty": 0.5,
            "stream": True,
        },
        headers={"X-Shadow-Trial": "t-9"},
    )
    models = {"claude": FakeModel(tool_arguments={"city": "Paris"})}
    sleep = SleepRecorder()
    async with FakeProvider(models) as fp:
        opts = client_opts(sleep, default_max_tokens=321)
        async with AnthropicProvider(fp.root_url, KEY, **opts) as provider:
            result = await provider.chat(request)
    _, headers, body = fp.requests[0]
    assert headers["x-api-key"] == KEY and headers["anthropic-version"] == "2023-06-01"
    assert headers["X-Shadow-Trial"] == "t-9" and "Authorization" not in headers
    assert body == {
        "model": "claude",
        "max_tokens": 321,
        "system": "You are terse.",
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "temperature": 0.2,
        "stop_sequences": ["END"],
        "tools": [
            {
                "name": "get_weather",
                "description": "Weather for a city",
                "input_schema": WEATHER_TOOL["function"]["parameters"],  # type: ignore[index]
            }
        ],
        "tool_choice": {"type": "any"},
    }
    assert result.ok and result.content is not None
    assert result.content.endswith('\n[tool_call get_weather({"city":"Paris"})]')
    assert result.finish_reason == "tool_calls"
    assert result.input_tokens is not None and result.output_tokens is not None


async def test_anthropic_response_usage_and_length_stop() -> None:
    models = {"claude": FakeModel(filler_words=(40, 40))}
    sleep = SleepRecorder()
    async with FakeProvider(models) as fp:
        async with AnthropicProvider(fp.root_url, KEY, **client_opts(sleep)) as provider:
            result = await provider.chat(ask(model="claude", max_tokens=5))
    assert fp.requests[0].body["max_tokens"] == 5
    assert (result.ok, result.finish_reason, result.output_tokens) == (True, "length", 5)


def test_anthropic_converts_a_tool_conversation() -> None:
    system, messages = convert_messages(
        [
            {"role": "system", "content": "sys one"},
            {"role": "user", "content": "Weather?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "cold"},
            {"role": "developer", "content": "sys two"},
            {"role": "user", "content": "And tomorrow?"},
        ]
    )
    assert system == "sys one\n\nsys two"
    assert messages == [
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Oslo"}}],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "cold"},
                {"type": "text", "text": "And tomorrow?"},
            ],
        },
    ]


async def test_anthropic_retries_529_overloaded() -> None:
    # The fake speaks OpenAI status codes only; 529 is Anthropic's own, hence MockTransport.
    statuses = iter([529, 200])
    answer = {
        "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 4, "output_tokens": 2},
    }

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(statuses)
        return httpx.Response(status, json=answer if status == 200 else {"type": "error"})

    sleep = SleepRecorder()
    opts = client_opts(sleep, transport=httpx.MockTransport(handler))
    async with AnthropicProvider("https://api.anthropic.example", KEY, **opts) as provider:
        result = await provider.chat(ask(model="claude"))
    assert (result.ok, result.content, result.finish_reason, result.attempts) == (True, "Hi there", "stop", 2)
    assert (result.input_tokens, result.output_tokens) == (4, 2)


# --- the aiohttp transport: httpx's contract over aiohttp's wire --------------------------------

OK_BODY = msgspec.json.encode(
    {
        "choices": [{"message": {"role": "assistant", "content": "fine"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
)


@asynccontextmanager
async def serve(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> AsyncIterator[str]:
    """One aiohttp route on loopback port 0; yields the OpenAI-style base URL."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    finally:
        await runner.cleanup()


async def test_waiting_for_a_pool_slot_is_a_timeout_that_never_billed() -> None:
    arrived, release = asyncio.Event(), asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        arrived.set()
        await release.wait()
        return web.Response(body=OK_BODY, content_type="application/json")

    async with serve(handler) as url:
        opts = client_opts(SleepRecorder(), limits=httpx.Limits(max_connections=1), timeout=httpx.Timeout(5.0, pool=0.05))
        async with OpenAIProvider(url, KEY, **opts) as provider:
            first = asyncio.create_task(provider.chat(ask()))
            await arrived.wait()  # the only connection is taken
            second = await provider.chat(ask())
            release.set()
            assert (await first).ok
    assert (second.ok, second.error, second.attempts, second.status) == (False, "timeout", 1, None)
    assert second.may_have_billed is False  # nothing was sent


async def test_a_stalled_upload_is_cut_by_the_summed_timeouts() -> None:
    # aiohttp cannot time a write alone; a peer that never reads is cut at pool+connect+write+read.
    stop = asyncio.Event()

    async def never_read(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await stop.wait()
        writer.close()

    server = await asyncio.start_server(never_read, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        opts = client_opts(SleepRecorder(), timeout=httpx.Timeout(0.1))
        async with OpenAIProvider(f"http://127.0.0.1:{port}/v1", KEY, **opts) as provider:
            result = await provider.chat(ask(content="x" * (48 << 20)))  # beyond any socket buffer
    finally:
        stop.set()
        server.close()
        await server.wait_closed()
    assert (result.ok, result.error, result.attempts) == (False, "timeout", 1)
    assert result.may_have_billed is True and result.latency_ms < 20_000


async def test_gzip_answers_are_decoded_and_a_broken_one_is_malformed() -> None:
    bodies = iter([gzip.compress(OK_BODY), b"not gzip at all"])
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Accept-Encoding"))
        return web.Response(body=next(bodies), headers={"Content-Encoding": "gzip", "Content-Type": "application/json"})

    async with serve(handler) as url:
        async with OpenAIProvider(url, KEY, **client_opts(SleepRecorder())) as provider:
            good = await provider.chat(ask())
            bad = await provider.chat(ask())
    assert (good.ok, good.content, good.input_tokens) == (True, "fine", 3)
    # As with httpx's own transport: the body fails to decode before a status is looked at.
    assert (bad.ok, bad.error, bad.may_have_billed) == (False, "malformed", True)
    assert seen == ["gzip, deflate", "gzip, deflate"]


async def test_no_cookie_is_carried_from_one_call_to_the_next() -> None:
    cookies: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        cookies.append(request.headers.get("Cookie"))
        return web.Response(body=OK_BODY, content_type="application/json", headers={"Set-Cookie": "lb=node-7; Path=/"})

    async with serve(handler) as url:
        async with OpenAIProvider(url, KEY, **client_opts(SleepRecorder())) as provider:
            for _ in range(2):
                assert (await provider.chat(ask())).ok
    assert cookies == [None, None]


# --- construction, keys, closing -------------------------------------------------------------


async def test_key_never_shows_in_repr_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeProvider({"cand": FakeModel(script=["503", "ok"])}) as fp:
        for kind, url in (("openai", fp.base_url), ("anthropic", fp.root_url)):
            provider = make_provider(kind, url, KEY, sleep=SleepRecorder())  # type: ignore[arg-type]
            try:
                assert KEY not in repr(provider) and KEY not in str(vars(provider))
                await provider.chat(ask(max_tokens=50))
            finally:
                await provider.aclose()
    assert KEY not in caplog.text


async def test_factory_validates_kind_options_and_url() -> None:
    with pytest.raises(ProviderConfigError):
        make_provider("gemini", "http://x", None)  # type: ignore[arg-type]
    with pytest.raises(ProviderConfigError, match="max_tokenz"):
        make_provider("anthropic", "http://x", None, max_tokenz=5)
    with pytest.raises(ProviderConfigError):
        make_provider("openai", "localhost:1234/v1", None)
    with pytest.raises(ProviderConfigError):
        make_provider("openai", "http://x", None, deadline_s=0)
    provider = make_provider("anthropic", "http://x", None, default_max_tokens=10)
    assert isinstance(provider, AnthropicProvider)
    await provider.aclose()


async def test_chat_after_aclose_raises() -> None:
    sleep = SleepRecorder()
    provider = OpenAIProvider("http://127.0.0.1:9/v1", None, **client_opts(sleep))
    await provider.aclose()
    with pytest.raises(ProviderClosedError):
        await provider.chat(ask())


async def test_the_transport_answers_alike_through_httpx_and_through_its_own_post() -> None:
    """The clients drive :class:`AiohttpTransport` through ``post`` (no httpx request and response
    per call); behind an ``httpx.AsyncClient`` it answers the same: status, headers sent as
    given, body decoded (gzip), a broken body refused as httpx's ``DecodingError``."""
    from sidecar.providers.transport import AiohttpTransport

    got: list[tuple[str | None, bytes]] = []

    async def handler(request: web.Request) -> web.Response:
        got.append((request.headers.get("X-Probe"), await request.read()))
        body = b"not gzip" if request.headers.get("X-Broken") else gzip.compress(OK_BODY)
        return web.Response(body=body, status=201, headers={"Content-Encoding": "gzip", "Retry-After": "3"})

    timeout = httpx.Timeout(5.0).as_dict()
    async with serve(handler) as base:
        url = base + "/chat/completions"
        transport = AiohttpTransport(httpx.Limits(max_connections=2))
        try:
            direct = await transport.post(url, [("X-Probe", "p1")], b"one", timeout)
            with pytest.raises(httpx.DecodingError):
                await transport.post(url, [("X-Broken", "1")], b"y", timeout)
            async with httpx.AsyncClient(transport=transport, timeout=5.0) as client:  # closes the transport
                via_httpx = await client.post(url, content=b"two", headers={"X-Probe": "p2"})
                with pytest.raises(httpx.DecodingError):
                    await client.post(url, content=b"x", headers={"X-Broken": "1"})
        finally:
            await transport.aclose()
    assert (direct.status_code, direct.content, direct.headers.get("retry-after")) == (201, OK_BODY, "3")
    assert (via_httpx.status_code, via_httpx.content, via_httpx.headers.get("retry-after")) == (201, OK_BODY, "3")
    assert [got[0], got[2]] == [("p1", b"one"), ("p2", b"two")]
