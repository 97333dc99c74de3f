"""The fake provider, exercised as a real server on loopback with a plain httpx client."""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sidecar.demo.fake_provider import MARKER_RE, FakeModel, FakeProvider
from sidecar.providers.base import ChatRequest
from sidecar.providers.openai import OpenAIProvider

LABEL_RE = re.compile(r"\[\[([AB][>=]{1,2}[AB])\]\]")


def chat_body(model: str, content: str = "hello", **params: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **params}


def judge_prompt(qa: float, qb: float) -> str:
    return f"[Answer A] text ⟨q={qa:.3f}⟩ more\n[Answer B] text ⟨q={qb:.3f}⟩ more\nWhich is better?"


async def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Poll ``condition`` with a deadline (yielding to the loop, never sleeping a fixed time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError("condition not reached before the deadline")
        await asyncio.sleep(0.001)


async def post(client: httpx.AsyncClient, fp: FakeProvider, body: dict[str, Any]) -> httpx.Response:
    return await client.post(f"{fp.base_url}/chat/completions", json=body)


async def test_generation_answer_plants_quality_and_reports_usage() -> None:
    models = {"cand": FakeModel(quality=0.8, quality_noise=0.0)}
    async with FakeProvider(models, seed=1) as fp, httpx.AsyncClient() as client:
        body = chat_body("cand", "x" * 400, max_tokens=500)
        r = await post(client, fp, body)
    assert r.status_code == 200
    data = r.json()
    text = data["choices"][0]["message"]["content"]
    assert MARKER_RE.findall(text) == ["0.800"]
    assert data["choices"][0]["finish_reason"] == "stop"
    usage = data["usage"]
    assert 100 <= usage["prompt_tokens"] <= 120  # ≈ bytes/4 of the messages
    assert usage["completion_tokens"] == -(-len(text.encode()) // 4)
    assert fp.calls == {"cand": 1}
    assert fp.requests[0].model == "cand" and fp.requests[0].body == body


async def test_quality_when_plants_a_quality_by_the_last_user_message() -> None:
    """``quality_when``: a key in the request's last user message plants its quality (the first
    matching key in order); other requests, and keys in earlier turns, keep ``quality``."""
    spec = FakeModel(quality=0.9, quality_noise=0.0, quality_when={"reasoning": 0.1, "reason": 0.3, "fast": 0.95})
    models = {"cand": spec}
    prompts: list[Any] = [
        "tier reasoning: prove it",
        "tier fast: say hi",
        "nothing scripted",
        [{"role": "user", "content": "reasoning earlier"}, {"role": "assistant", "content": "ok"},
         {"role": "user", "content": "now plain"}],
        [{"role": "user", "content": [{"type": "text", "text": "a reason in parts"}]}],
    ]
    got = []
    async with FakeProvider(models, seed=1) as fp, httpx.AsyncClient() as client:
        for prompt in prompts:
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            r = await post(client, fp, {"model": "cand", "messages": messages})
            assert r.status_code == 200, r.text
            got.append(MARKER_RE.findall(r.json()["choices"][0]["message"]["content"]))
        r = await client.post(f"{fp.root_url}/v1/messages", json={
            "model": "cand", "max_tokens": 100, "messages": [{"role": "user", "content": "fast one"}]})
        got.append(MARKER_RE.findall(r.json()["content"][0]["text"]))
    assert got == [["0.100"], ["0.950"], ["0.900"], ["0.900"], ["0.300"], ["0.950"]]
    with pytest.raises(ValueError, match="quality_when"):
        FakeModel(quality_when={"x": 1.5})


async def test_max_tokens_truncates_with_finish_reason_length() -> None:
    models = {"cand": FakeModel(filler_words=(50, 50))}
    async with FakeProvider(models) as fp, httpx.AsyncClient() as client:
        r = await post(client, fp, chat_body("cand", max_tokens=3))
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert r.json()["usage"]["completion_tokens"] == 3
    assert len(choice["message"]["content"].encode()) <= 12


async def test_same_seed_same_answers_different_seed_different() -> None:
    models = {"cand": FakeModel(quality=0.5, quality_noise=0.2, rate_503=0.3)}

    async def run(seed: int) -> list[tuple[int, str]]:
        async with FakeProvider(models, seed=seed) as fp, httpx.AsyncClient() as client:
            out = []
            for _ in range(20):
                r = await post(client, fp, chat_body("cand"))
                out.append((r.status_code, r.text if r.status_code == 200 else ""))
            return out

    first, again, other = await run(7), await run(7), await run(8)
    assert first == again
    assert first != other
    assert {s for s, _ in first} == {200, 503}


async def test_a_provider_restored_from_draw_state_answers_as_the_original_would_next() -> None:
    """``draw_state``/``restore_draws``: a test starting from a copy of a store the fake built goes
    on with the same answers (indices and random draws) as one that built it itself."""
    models = {"cand": FakeModel(quality=0.5, quality_noise=0.2, rate_503=0.3)}
    async with FakeProvider(models, seed=7) as fp, httpx.AsyncClient() as client:
        for _ in range(5):
            await post(client, fp, chat_body("cand"))
        state = fp.draw_state()
        original = [(r.status_code, r.text) for r in [await post(client, fp, chat_body("cand")) for _ in range(10)]]
    async with FakeProvider(models, seed=7) as fresh, httpx.AsyncClient() as client:
        unrestored = [(r.status_code, r.text) for r in [await post(client, fresh, chat_body("cand")) for _ in range(10)]]
    async with FakeProvider(models, seed=7) as restored, httpx.AsyncClient() as client:
        restored.restore_draws(state)
        assert restored.calls == {"cand": 5}
        again = [(r.status_code, r.text) for r in [await post(client, restored, chat_body("cand")) for _ in range(10)]]
    assert again == original and unrestored != original
    assert restored.calls == {"cand": 15}


@pytest.mark.parametrize("fault,status", [("429", 429), ("500", 500), ("502", 502), ("503", 503), ("504", 504)])
async def test_scripted_status_faults_then_ok(fault: str, status: int) -> None:
    models = {"cand": FakeModel(script=[fault, "ok"], retry_after_s=3)}
    async with FakeProvider(models) as fp, httpx.AsyncClient() as client:
        first = await post(client, fp, chat_body("cand"))
        second = await post(client, fp, chat_body("cand"))
    assert first.status_code == status
    assert (first.headers.get("retry-after") == "3") == (fault == "429")
    assert second.status_code == 200
    assert fp.calls["cand"] == 2


async def test_malformed_is_200_with_invalid_json() -> None:
    async with FakeProvider({"cand": FakeModel(rate_malformed=1.0)}) as fp, httpx.AsyncClient() as client:
        r = await post(client, fp, chat_body("cand"))
    assert r.status_code == 200
    with pytest.raises(ValueError):
        r.json()


async def test_reset_drops_the_connection_without_an_answer() -> None:
    async with FakeProvider({"cand": FakeModel(script=["reset", "ok"])}) as fp, httpx.AsyncClient() as client:
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError)):
            await post(client, fp, chat_body("cand"))
        assert (await post(client, fp, chat_body("cand"))).status_code == 200


async def test_timeout_stalls_past_client_timeout_and_shutdown_ends_the_stall() -> None:
    fp = FakeProvider({"cand": FakeModel(rate_timeout=1.0)})
    await fp.start()
    async with httpx.AsyncClient(timeout=httpx.Timeout(5.0, read=0.2)) as client:
        with pytest.raises(httpx.ReadTimeout):
            await post(client, fp, chat_body("cand"))
        # A stalled call still in flight when the server stops must not hang shutdown.
        pending = asyncio.ensure_future(post(client, fp, chat_body("cand")))
        await wait_until(lambda: fp.calls["cand"] == 2)
        await asyncio.wait_for(fp.stop(), timeout=10)
        with pytest.raises((httpx.RemoteProtocolError, httpx.ReadError, httpx.ReadTimeout)):
            await pending


async def test_unknown_model_is_404_and_counted() -> None:
    async with FakeProvider({"cand": FakeModel()}) as fp, httpx.AsyncClient() as client:
        r = await post(client, fp, chat_body("incumbent"))
    assert r.status_code == 404
    assert fp.calls["incumbent"] == 1


async def test_api_key_is_enforced_when_configured() -> None:
    async with FakeProvider({"cand": FakeModel()}, api_key="k1") as fp, httpx.AsyncClient() as client:
        denied = await post(client, fp, chat_body("cand"))
        allowed = await client.post(
            f"{fp.base_url}/chat/completions", json=chat_body("cand"), headers={"authorization": "Bearer k1"}
        )
    assert denied.status_code == 401 and allowed.status_code == 200


async def test_anthropic_shape_and_validation() -> None:
    async with FakeProvider({"claude": FakeModel(quality=0.6, quality_noise=0.0)}) as fp, httpx.AsyncClient() as client:
        url = f"{fp.root_url}/v1/messages"
        missing_max = await client.post(url, json=chat_body("claude"))
        system_inline = await client.post(
            url, json={"model": "claude", "max_tokens": 50, "messages": [{"role": "system", "content": "s"}]}
        )
        ok = await client.post(url, json={**chat_body("claude"), "max_tokens": 200, "system": "be brief"})
    assert missing_max.status_code == 400 and system_inline.status_code == 400
    data = ok.json()
    assert data["type"] == "message" and data["stop_reason"] == "end_turn"
    assert MARKER_RE.findall(data["content"][0]["text"]) == ["0.600"]
    assert data["usage"]["input_tokens"] > 0 and data["usage"]["output_tokens"] > 0


def test_fake_model_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError):
        FakeModel(rate_429=0.6, rate_503=0.6)
    with pytest.raises(ValueError):
        FakeModel(script=["teapot"])
    with pytest.raises(ValueError):
        FakeModel(position_bias=1.5)


async def test_two_hundred_concurrent_requests() -> None:
    models = {"cand": FakeModel(latency_ms=(1.0, 20.0))}
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with FakeProvider(models, seed=3) as fp, httpx.AsyncClient(limits=limits, timeout=30.0) as client:
        responses = await asyncio.gather(*(post(client, fp, chat_body("cand", f"q{i}")) for i in range(200)))
    assert [r.status_code for r in responses] == [200] * 200
    assert fp.calls["cand"] == 200 and len(fp.requests) == 200


# --- the judge role -------------------------------------------------------------------


async def ask_judge(client: httpx.AsyncClient, fp: FakeProvider, messages: list[dict[str, Any]]) -> str:
    r = await post(client, fp, {"model": "judge", "messages": messages})
    assert r.status_code == 200
    return str(r.json()["choices"][0]["message"]["content"])


@pytest.mark.parametrize(
    "qa,qb,label",
    [(0.9, 0.2, "A>>B"), (0.6, 0.5, "A>B"), (0.51, 0.5, "A=B"), (0.5, 0.6, "B>A"), (0.1, 0.8, "B>>A")],
)
async def test_judge_label_follows_planted_qualities(qa: float, qb: float, label: str) -> None:
    async with FakeProvider({"judge": FakeModel(judge=True)}) as fp, httpx.AsyncClient() as client:
        text = await ask_judge(client, fp, [{"role": "user", "content": judge_prompt(qa, qb)}])
    assert LABEL_RE.findall(text) == [label]
    assert text.endswith(f"[[{label}]]")


async def test_judge_without_markers_says_tie() -> None:
    async with FakeProvider({"judge": FakeModel(judge=True)}) as fp, httpx.AsyncClient() as client:
        text = await ask_judge(client, fp, [{"role": "user", "content": "no markers here"}])
    assert LABEL_RE.findall(text) == ["A=B"]


@pytest.mark.parametrize("form", ["<q={:.3f}>", "⟨q={:.3f}⟩"], ids=["ascii", "angle-brackets"])
async def test_judge_reads_the_ascii_quality_marker_too(form: str) -> None:
    """Issue 28, item 4: ``<q=0.55>`` typed into a file of exchanges is read like ``⟨q=0.55⟩``,
    not ignored (which made every pair a tie)."""
    prompt = f"[Answer A] text {form.format(0.1)} more\n[Answer B] text {form.format(0.9)} more"
    async with FakeProvider({"judge": FakeModel(judge=True)}) as fp, httpx.AsyncClient() as client:
        text = await ask_judge(client, fp, [{"role": "user", "content": prompt}])
    assert LABEL_RE.findall(text) == ["B>>A"]
    assert MARKER_RE.findall("mixed <q=0.25> and ⟨q=0.75⟩") == ["0.25", "0.75"]


async def test_judge_no_label_then_labels_on_the_retry_turn() -> None:
    spec = FakeModel(judge=True, rate_no_label=1.0, rate_no_label_retry=0.0)
    prompt = {"role": "user", "content": judge_prompt(0.9, 0.1)}
    async with FakeProvider({"judge": spec}) as fp, httpx.AsyncClient() as client:
        first = await ask_judge(client, fp, [prompt])
        retry = await ask_judge(
            client, fp, [prompt, {"role": "assistant", "content": first}, {"role": "user", "content": "Label only."}]
        )
    assert LABEL_RE.findall(first) == []
    assert LABEL_RE.findall(retry) == ["A>>B"]


async def test_judge_retry_can_fail_too() -> None:
    spec = FakeModel(judge=True, rate_no_label=1.0, rate_no_label_retry=1.0)
    prompt = {"role": "user", "content": judge_prompt(0.9, 0.1)}
    async with FakeProvider({"judge": spec}) as fp, httpx.AsyncClient() as client:
        retry = await ask_judge(
            client, fp, [prompt, {"role": "assistant", "content": "hmm"}, {"role": "user", "content": "Label only."}]
        )
    assert LABEL_RE.findall(retry) == []


async def test_judge_conflicting_labels_and_position_bias() -> None:
    models = {
        "judge": FakeModel(judge=True, script=["conflicting", "bias", "no_label", "ok"]),
        "biased": FakeModel(judge=True, position_bias=1.0),
    }
    prompt = [{"role": "user", "content": judge_prompt(0.1, 0.9)}]
    async with FakeProvider(models) as fp, httpx.AsyncClient() as client:
        conflicting = await ask_judge(client, fp, prompt)
        biased = await ask_judge(client, fp, prompt)
        silent = await ask_judge(client, fp, prompt)
        honest = await ask_judge(client, fp, prompt)
        r = await post(client, fp, {"model": "biased", "messages": prompt})
    assert len(set(LABEL_RE.findall(conflicting))) == 2
    assert LABEL_RE.findall(biased) == ["A>B"]
    assert LABEL_RE.findall(silent) == []
    assert LABEL_RE.findall(honest) == ["B>>A"]
    assert LABEL_RE.findall(r.json()["choices"][0]["message"]["content"]) == ["A>B"]


async def test_judge_through_the_provider_client_matches_generated_qualities() -> None:
    """End to end: two planted models answer, the judge compares their answers."""
    models = {
        "strong": FakeModel(quality=0.85, quality_noise=0.0),
        "weak": FakeModel(quality=0.30, quality_noise=0.0),
        "judge": FakeModel(judge=True),
    }
    async with FakeProvider(models, seed=5) as fp:
        async with OpenAIProvider(
            fp.base_url,
            "sk-test",
            timeout=httpx.Timeout(5.0),
            limits=httpx.Limits(max_connections=10),
            deadline_s=10.0,
            max_retries=0,
            rng=random.Random(0),
        ) as provider:
            question = [{"role": "user", "content": "Explain tides."}]
            a = await provider.chat(ChatRequest(model="weak", messages=question))
            b = await provider.chat(ChatRequest(model="strong", messages=question))
            prompt = f"Question: Explain tides.\n[A]\n{a.content}\n[B]\n{b.content}\nVerdict?"
            verdict = await provider.chat(ChatRequest(model="judge", messages=[{"role": "user", "content": prompt}]))
    assert verdict.ok and verdict.content is not None
    assert LABEL_RE.findall(verdict.content) == ["B>>A"]
    assert fp.calls == {"weak": 1, "strong": 1, "judge": 1}


# --- streaming (server-sent events, as the OpenAI API sends them) ----------------------


def sse_events(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, checking the framing on the way."""
    text = raw.decode()
    assert text.endswith("\n\n"), text[-40:]
    events = text[:-2].split("\n\n")
    assert all(e.startswith("data: ") for e in events), events
    return [e[len("data: "):] for e in events]


async def stream_and_plain(models: dict[str, FakeModel], **params: Any) -> tuple[httpx.Response, httpx.Response]:
    """The same first call answered streamed and plain (two providers, same seed)."""
    out = []
    for stream in (True, False):
        async with FakeProvider(models, seed=4) as fp, httpx.AsyncClient() as client:
            body = chat_body("cand", **params, **({"stream": True} if stream else {}))
            out.append(await post(client, fp, body))
    return out[0], out[1]


async def test_stream_sends_chunks_that_join_to_the_plain_answer_then_done() -> None:
    streamed, plain = await stream_and_plain({"cand": FakeModel(quality_noise=0.2)})
    assert streamed.status_code == 200
    assert streamed.headers["content-type"].startswith("text/event-stream")
    events = sse_events(streamed.content)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert {c["id"] for c in chunks} == {plain.json()["id"]}
    assert all("usage" not in c for c in chunks)  # not asked for: absent, as the OpenAI API does
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert len(chunks) > 3  # the text comes in pieces
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert text == plain.json()["choices"][0]["message"]["content"]
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}


async def test_stream_include_usage_adds_a_usage_chunk_and_null_usage_before() -> None:
    streamed, plain = await stream_and_plain({"cand": FakeModel()}, stream_options={"include_usage": True})
    chunks = [json.loads(e) for e in sse_events(streamed.content)[:-1]]
    *body, last = chunks
    assert last["choices"] == [] and last["usage"] == plain.json()["usage"]
    assert all(c["usage"] is None for c in body)


async def test_stream_tool_call_deltas_rebuild_the_call() -> None:
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    models = {"cand": FakeModel(tool_arguments={"city": "Oslo", "days": 3})}
    streamed, plain = await stream_and_plain(models, tools=tools, tool_choice="required")
    chunks = [json.loads(e) for e in sse_events(streamed.content)[:-1]]
    calls = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
    assert calls[0]["function"]["name"] == "lookup" and calls[0]["id"]
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert json.loads(arguments) == {"city": "Oslo", "days": 3}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert plain.json()["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == arguments


async def test_stream_faults_answer_before_the_stream_or_break_it() -> None:
    models = {"cand": FakeModel(script=["429", "503", "malformed", "ok"])}
    async with FakeProvider(models) as fp, httpx.AsyncClient() as client:
        responses = [await post(client, fp, chat_body("cand", stream=True)) for _ in range(4)]
    assert [r.status_code for r in responses] == [429, 503, 200, 200]
    assert responses[0].headers["content-type"].startswith("application/json")
    broken = sse_events(responses[2].content)
    with pytest.raises(ValueError):
        json.loads(broken[0])
    assert "[DONE]" not in broken
    assert sse_events(responses[3].content)[-1] == "[DONE]"


async def test_stream_is_deterministic_and_the_response_id_can_repeat() -> None:
    models = {"cand": FakeModel(quality_noise=0.3, response_id="chatcmpl-same")}

    async def run() -> list[bytes]:
        async with FakeProvider(models, seed=9) as fp, httpx.AsyncClient() as client:
            return [(await post(client, fp, chat_body("cand", stream=True))).content for _ in range(3)]

    first, again = await run(), await run()
    assert first == again and len(set(first)) == 3
    ids = {json.loads(e)["id"] for raw in first for e in sse_events(raw)[:-1]}
    assert ids == {"chatcmpl-same"}


async def test_official_openai_client_reads_the_stream() -> None:
    import openai  # here, not at the top: importing the client costs every collecting worker about a second

    models = {"cand": FakeModel(quality=0.7, quality_noise=0.0)}
    async with FakeProvider(models, seed=2) as fp:
        async with openai.AsyncOpenAI(base_url=fp.base_url, api_key="sk-test", max_retries=0) as client:
            stream = await client.chat.completions.create(
                model="cand", messages=[{"role": "user", "content": "hi"}], stream=True,
                stream_options={"include_usage": True},
            )
            pieces, usage = [], None
            async for chunk in stream:
                pieces.extend(c.delta.content or "" for c in chunk.choices)
                usage = chunk.usage or usage
            plain = await client.chat.completions.create(model="cand", messages=[{"role": "user", "content": "hi"}])
    assert MARKER_RE.findall("".join(pieces)) == ["0.700"]
    assert usage is not None and usage.completion_tokens > 0
    assert plain.choices[0].message.content and MARKER_RE.findall(plain.choices[0].message.content) == ["0.700"]
