"""The fake provider answers exactly as it always has: a fixed run of varied calls replayed
against outputs recorded from the implementation before its per-call work was made cheaper.

Every test that seeds the fake depends on this: the same bodies byte for byte, the same
random draws in the same order (verdict rates, latencies, faults, usage figures). The run
covers candidates, judges (paired, absolute, the retry turn, every label fault), the
Messages API, tools, truncation, streaming, status faults, resets and bad requests, with
ASCII, non-ASCII, astral and escaped text. After each call it also records a digest of
every model's random state, so a draw added, dropped or reordered shows at the call where
it happens, even when the body would hide it.

The recording is ``fake_provider_golden.json`` beside this file. To record it again (only
when the fake's behaviour is *meant* to change, and then say so)::

    python tests/sidecar/demo/test_fake_provider_golden.py > tests/sidecar/demo/fake_provider_golden.json
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from sidecar.demo import fake_provider
from sidecar.demo.fake_provider import MARKER_RE, FakeModel, FakeProvider

GOLDEN = Path(__file__).with_name("fake_provider_golden.json")
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "other", "parameters": {"type": "object"}}}]
ANTHROPIC_TOOLS = [{"name": "search", "input_schema": {"type": "object"}}]
TEXTS = [
    "hello",
    "plain ascii question about tides",
    "naïve café — “quotes” ⟨q=0.420⟩ and <q=0.9>",
    "emoji 😀 astral",
    "control \x01\x1f and del \x7f and tab\t newline\n",
    "a literal backslash-u \\u00e9 and \\\\u0041 and \"quoted\"",
    "reasoning: prove that the sum of two even numbers is even",
    "x" * 700,
    "日本語のテキスト",
]


def models() -> dict[str, FakeModel]:
    return {
        "cand": FakeModel(quality=0.6, quality_noise=0.15, filler_words=(0, 60), rate_429=0.08, rate_500=0.04,
                          rate_503=0.04, rate_malformed=0.04, retry_after_s=1.5, latency_ms=(0.0, 0.001),
                          tool_arguments={"city": "Oslo", "days": 3, "ü": "é", "nested": [1, 2.5, None]},
                          quality_when={"reasoning": 0.2}),
        "judge": FakeModel(judge=True, rate_no_label=0.2, rate_no_label_retry=0.3, rate_conflicting_labels=0.15,
                           position_bias=0.1, tie_margin=0.05, strong_margin=0.25,
                           script=["no_label", "conflicting", "bias", "ok", "503"]),
        "scripted": FakeModel(script=["429", "500", "502", "503", "504", "malformed", "reset", "ok"],
                              retry_after_s=2),
        "odd-usage": FakeModel(usage_override=(50.0, float("nan")), response_id="chatcmpl-same", filler_words=(3, 9)),
        "str-usage": FakeModel(usage_override=("12", None), filler_words=(0, 2)),
        "claude": FakeModel(quality=0.4, quality_noise=0.0, tool_arguments={"q": "ß"}),
    }


def judge_messages(rng: random.Random) -> list[dict[str, Any]]:
    qa, qb = rng.random(), rng.random()
    form = rng.choice(["⟨q={:.3f}⟩", "<q={:.3f}>"])
    kind = rng.randrange(5)
    user = {"role": "user", "content": f"[A] text {form.format(qa)} more\n[B] text {form.format(qb)} Which?"}
    if kind == 0:  # the absolute judge
        return [{"role": "system", "content": "Rate it. End with [[rating: N]]."},
                {"role": "user", "content": f"Answer: {form.format(qa)}"}]
    if kind == 1:  # the retry turn
        return [user, {"role": "assistant", "content": "hmm"}, {"role": "user", "content": "Label only."}]
    if kind == 2:  # content in parts
        return [{"role": "user", "content": [{"type": "text", "text": user["content"]}, {"type": "image"}]}]
    if kind == 3:  # a single marker: a tie
        return [{"role": "user", "content": f"only {form.format(qa)}"}]
    return [{"role": "system", "content": "You judge."}, user]


def calls(n: int = 135) -> list[tuple[str, str | bytes]]:
    """The run: ``(path, body)`` pairs, a body as JSON text (or raw bytes for broken ones)."""
    rng = random.Random(29)
    out: list[tuple[str, str | bytes]] = []
    chat, messages_api = "/v1/chat/completions", "/v1/messages"
    for i in range(n):
        kind = i % 9
        text = rng.choice(TEXTS) + f" #{i}"
        body: dict[str, Any]
        if kind in (0, 1):
            body = {"model": "cand", "messages": [{"role": "system", "content": "Be brief."},
                                                  {"role": "user", "content": text}]}
            limit = rng.choice([None, None, 3, 16, 200])
            if limit is not None:
                body["max_tokens" if rng.random() < 0.7 else "max_completion_tokens"] = limit
            choice = rng.choice([None, "required", {"type": "function", "function": {"name": "other"}}, "none"])
            if choice is not None:
                body["tools"], body["tool_choice"] = TOOLS, choice
            if kind == 1:
                body["stream"] = True
                if rng.random() < 0.5:
                    body["stream_options"] = {"include_usage": True}
            out.append((chat, json.dumps(body, ensure_ascii=rng.random() < 0.5)))
        elif kind in (2, 3):
            out.append((chat, json.dumps({"model": "judge", "messages": judge_messages(rng), "max_tokens": 512})))
        elif kind == 4:
            body = {"model": "claude", "max_tokens": rng.choice([5, 300]),
                    "messages": [{"role": "user", "content": text}]}
            if rng.random() < 0.5:
                body["system"] = "Answer in one line ⟨sys⟩."
            if rng.random() < 0.5:
                body["tools"], body["tool_choice"] = ANTHROPIC_TOOLS, {"type": "any"}
            out.append((messages_api, json.dumps(body)))
        elif kind == 5:
            model = "scripted" if (i // 9) % 2 == 0 else rng.choice(["odd-usage", "str-usage"])
            body = {"model": model, "messages": [{"role": "user", "content": text}],
                    "stream": rng.random() < 0.3}
            out.append((chat if rng.random() < 0.8 or model == "scripted" else messages_api,
                        json.dumps({**body, "max_tokens": 64})))
        elif kind == 6:
            # Numbers the standard decoder reads but stricter ones do not: NaN, 1e400, huge ints.
            extra = rng.choice(['"n": NaN', '"big": 1e400', '"huge": 123456789012345678901234567890', '"f": 0.1'])
            out.append((chat, '{"model": "cand", "messages": [{"role": "user", "content": %s, %s}]}'
                        % (json.dumps(text), extra)))
        elif kind == 7:
            bad = [b"not json", b'{"model": "cand"}', b'{"model": "cand", "messages": []}',
                   b'{"model": "nobody", "messages": [{"role": "user", "content": "x"}]}',
                   b'{"model": "claude", "messages": [{"role": "user", "content": "x"}]}',
                   b'{"model": "claude", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}',
                   b'{"model": "cand", "messages": ["str"]}', b'[1, 2]', b'\xef\xbb\xbf{"model": "cand"}',
                   # A lone surrogate: the prompt's size cannot be taken in UTF-8 (a 500, as ever).
                   b'{"model": "cand", "messages": [{"role": "user", "content": "\\ud800"}]}']
            raw = bad[(i // 9) % len(bad)]
            out.append((messages_api if b"claude" in raw else chat, raw))
        else:
            # An answer quoted back to the judge, with tool calls in the conversation.
            body = {"model": "judge", "messages": [
                {"role": "user", "content": text},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}]},
                {"role": "user", "content": f"A: ⟨q={rng.random():.3f}⟩ B: ⟨q={rng.random():.3f}⟩"}]}
            out.append((chat, json.dumps(body, ensure_ascii=False)))
    return out


def _digest(data: bytes | str) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:24]


async def replay() -> dict[str, Any]:
    """Run :func:`calls` through a fresh provider, one at a time; what came back, per call."""
    steps: list[list[Any]] = []
    async with FakeProvider(models(), seed=2026) as fp, httpx.AsyncClient(timeout=30.0) as client:
        for path, body in calls():
            content = body.encode() if isinstance(body, str) else body
            try:
                r = await client.post(fp.root_url + path, content=content,
                                      headers={"content-type": "application/json"})
                got = [r.status_code, r.headers.get("content-type"), r.headers.get("retry-after"),
                       len(r.content), _digest(r.content)]
            except (httpx.RemoteProtocolError, httpx.ReadError):
                got = ["reset"]
            _, states = fp.draw_state()
            got.append(_digest(repr(sorted(states.items()))))
            steps.append(got)
        calls_per_model = {str(k): v for k, v in sorted(fp.calls.items(), key=lambda kv: str(kv[0]))}
    return {"calls": calls_per_model, "steps": steps}


async def test_a_fixed_run_answers_byte_for_byte_as_recorded() -> None:
    golden = json.loads(GOLDEN.read_text())
    now = await replay()
    assert now["calls"] == golden["calls"]
    assert len(now["steps"]) == len(golden["steps"])
    for i, (got, want) in enumerate(zip(now["steps"], golden["steps"], strict=True)):
        assert got == want, f"call {i} ({calls()[i]!r:.300}) answers differently"


async def test_the_replay_notices_one_extra_random_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recording is sensitive: one draw more in one judge reply breaks it."""
    real = fake_provider.judge_reply
    seen = []

    def judge_reply_drawing_once_more(spec: FakeModel, rng: random.Random, *args: Any) -> str:
        if not seen:
            seen.append(rng.random())
        return real(spec, rng, *args)

    monkeypatch.setattr(fake_provider, "judge_reply", judge_reply_drawing_once_more)
    golden = json.loads(GOLDEN.read_text())
    now = await replay()
    assert seen
    assert now["steps"] != golden["steps"]


# --- the rewritten pieces against plain reference implementations, over many inputs -----


def reference_openai_body(model: str, n: int, a: Any, spec: FakeModel) -> dict[str, Any]:
    """The answer body as it was built before (a dict for ``web.json_response``)."""
    message: dict[str, Any] = {"role": "assistant", "content": a.text}
    if a.tool:
        arguments = json.dumps(a.tool[1], separators=(",", ":"))
        message["tool_calls"] = [{"id": f"call_{n}", "type": "function",
                                  "function": {"name": a.tool[0], "arguments": arguments}}]
    usage = {"prompt_tokens": a.input_tokens, "completion_tokens": a.output_tokens,
             "total_tokens": fake_provider._total(a.input_tokens, a.output_tokens)}
    return {
        "id": spec.response_id if spec.response_id is not None else f"chatcmpl-fake-{n}",
        "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": a.finish_reason}], "usage": usage,
    }


def reference_anthropic_body(model: str, n: int, a: Any) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": a.text}]
    if a.tool:
        content.append({"type": "tool_use", "id": f"toolu_{n}", "name": a.tool[0], "input": a.tool[1]})
    stop = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}[a.finish_reason]
    return {
        "id": f"msg_fake_{n}", "type": "message", "role": "assistant", "model": model, "content": content,
        "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": a.input_tokens, "output_tokens": a.output_tokens},
    }


def random_text(rng: random.Random) -> str:
    """Text from every range that escapes differently: ASCII, controls, DEL, 2- and 3-byte
    UTF-8, astral characters (surrogate pairs when escaped), quotes and backslashes."""
    pools = [(0x20, 0x7E), (0x00, 0x1F), (0x7F, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0xE000, 0xFFFF),
             (0x10000, 0x10FFFF)]
    chars = []
    for _ in range(rng.randrange(0, 40)):
        lo, hi = rng.choice(pools)
        chars.append(chr(rng.randint(lo, hi)))
        if rng.random() < 0.1:
            chars.append(rng.choice(['"', "\\", "\\u00e9", "u0041", "\n"]))
    return "".join(chars)


def test_answer_bodies_are_the_json_of_the_reference_dicts() -> None:
    rng = random.Random(5)
    usages: list[Any] = [7, 0, -3, 2**70, 50.0, float("nan"), float("inf"), None, "12", True, [1], {"a": 1}]
    for i in range(3000):
        tool = (random_text(rng) or "t", {random_text(rng): random_text(rng), "n": rng.random()}) if i % 3 == 0 else None
        answer = fake_provider._Answer(random_text(rng), tool, rng.choice(["stop", "length", "tool_calls"]),
                                       rng.choice(usages), rng.choice(usages))
        spec = FakeModel(response_id=rng.choice([None, "chatcmpl-same", random_text(rng)]))
        model = random_text(rng)
        assert fake_provider.openai_json(model, i, answer, spec) == json.dumps(
            reference_openai_body(model, i, answer, spec))
        assert fake_provider.anthropic_json(model, i, answer) == json.dumps(reference_anthropic_body(model, i, answer))


def test_prompt_size_is_the_utf8_length_of_the_unescaped_json() -> None:
    rng = random.Random(6)
    for _ in range(5000):
        messages: list[dict[str, Any]] = [{"role": random_text(rng), "content": random_text(rng)}
                                          for _ in range(rng.randrange(1, 4))]
        if rng.random() < 0.3:  # nested values; a float is left to the standard encoder
            messages[0]["extra"] = rng.choice([
                [rng.random(), 10**30, None, True, {random_text(rng): random_text(rng)}],
                [-(10**30), None, False, {random_text(rng): [random_text(rng), {}, []]}, [[]], {"k": {}}],
                {}, [], [{"type": "text", "text": random_text(rng)}, {"type": "image", "url": {"u": random_text(rng)}}],
            ])
        try:
            want: int | str = len(json.dumps(messages, ensure_ascii=False).encode())
        except UnicodeEncodeError:
            want = "UnicodeEncodeError"
        try:
            got: int | str = fake_provider.prompt_size(messages)
        except UnicodeEncodeError:
            got = "UnicodeEncodeError"
        assert got == want, messages
    with pytest.raises(UnicodeEncodeError):  # a lone surrogate: as the definition does
        fake_provider.prompt_size([{"content": "\ud800"}])


def test_the_marker_scan_finds_what_marker_re_finds() -> None:
    rng = random.Random(7)
    pieces = ["⟨", "<", "q=", "q", "=", "0", "7", ".", "..", "⟩", ">", " ", "x", "⟨q=0.5⟩", "<q=.25>", "<<q=1>>"]
    for _ in range(20000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 30)))
        assert fake_provider._markers(text) == MARKER_RE.findall(text), text


@pytest.mark.parametrize("raw", [
    b'{"a": 1, "a": 2, "b": 3}', b'{"x": 123456789012345678901234567890}', b'{"x": -9223372036854775809}',
    b'{"x": 1e400}', b'{"x": NaN}', b'{"x": -Infinity}', b'{"x": -0}', b'{"x": -0.0}', b'{"x": "\\ud800"}',
    b'{"x": "\\ud83d\\ude00"}', b'\xef\xbb\xbf{"x": 1}', b'{"x": 0.1000000000000000055511151231257827}',
    b'{"x": 5e-324}', b'{"x": 2.4703282292062327e-324}', b'{"x": 1E2}', b'{"x": "\x7f\xc3\xa9"}', b' {"x": 1} ',
    b'"abc"', b'{"k\\u00e9": "\\u00e9"}', '{"x": "\u00e9"}'.encode("utf-16"), b'[' * 3000 + b']' * 3000,
    b'{"x": 00}', b'{"x": [1,]}', b'{"x": "a\tb"}', b"\xff", b"",
])
def test_request_bodies_decode_as_the_standard_decoder_does(raw: bytes) -> None:
    def outcome(decode: Any) -> Any:
        try:
            value = decode(raw)
        except (ValueError, RecursionError) as e:
            return type(e).__name__ if isinstance(e, RecursionError) else "ValueError"
        return repr(value), [type(v) for v in (value.values() if isinstance(value, dict) else [value])]

    assert outcome(fake_provider._loads) == outcome(json.loads)


if __name__ == "__main__":
    json.dump(asyncio.run(replay()), sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")
