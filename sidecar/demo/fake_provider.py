"""A fake OpenAI- and Anthropic-compatible provider, served for real on loopback.

``shadowtrial demo`` runs it as the incumbent, candidate and judge; the tests
run it on port 0 and point real clients at it::

    async with FakeProvider({"cand": FakeModel(quality=0.7)}, seed=1) as fp:
        ...  # POST fp.base_url + "/chat/completions"
        assert fp.calls["cand"] == 1

Each model's behaviour is a :class:`FakeModel`: a planted answer quality, a
latency range, fault rates, an exact fault ``script`` for its first calls, and
for judges the label behaviour. Everything random is drawn from one RNG per
model seeded from ``(seed, model)``, and a request draws everything it needs
before its first await, so sequential calls are exactly reproducible.

Generation answers embed a hidden quality marker ``⟨q=0.734⟩``; its ASCII form
``<q=0.734>`` is read the same (typed into a file of exchanges). A judge model
reads the markers of the last user message that has them (first = answer A,
second = B) and ends a short rationale with one label ``[[A>>B]]``, ``[[A>B]]``,
``[[A=B]]``, ``[[B>A]]`` or ``[[B>>A]]``; with fewer than two markers it says
``[[A=B]]``. Asked by the absolute judge (a system message asking for ``[[rating: N]]``),
it rates the one answer's marker ``q`` as ``[[rating: round(1 + 9q)]]``.

Faults (also the words of ``script``): ``ok``, ``429`` (with ``Retry-After``),
``500``, ``502``, ``503``, ``504``, ``timeout`` (the server stalls until it is
shut down, then drops the connection), ``reset`` (the connection is aborted
without an answer), ``malformed`` (200 with invalid JSON); for judges also
``no_label``, ``conflicting`` and ``bias`` (answers, but with that label fault).

Streaming: a chat-completions request with ``"stream": true`` is answered as
the OpenAI API answers it, with server-sent events (``text/event-stream``):
``data: {chat.completion.chunk}`` events — a first one with the role, the text
in word-sized pieces, tool-call deltas, one with the ``finish_reason`` — then,
when ``stream_options.include_usage`` is true, a chunk with empty ``choices``
and the usage (every earlier chunk then carries ``"usage": null``), and
``data: [DONE]``. The answer, usage and faults are drawn exactly as for a
plain call; status faults answer before the stream starts, ``malformed`` sends
an event that is not JSON. Messages-API (Anthropic) calls never stream.
"""

from __future__ import annotations

import asyncio
import functools
import json
import math
import random
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any, Literal, NamedTuple

import msgspec
from aiohttp import web

TRANSPORT_FAULTS = ("ok", "429", "500", "502", "503", "504", "timeout", "reset", "malformed")
JUDGE_FAULTS = ("no_label", "conflicting", "bias")
#: The quality marker a judge reads: ``⟨q=0.55⟩`` (U+27E8/U+27E9, what generation plants) or
#: its ASCII form ``<q=0.55>``, which is easier to type into a file of exchanges.
MARKER_RE = re.compile(r"(?:⟨|<)q=([0-9]*\.?[0-9]+)(?:⟩|>)")
#: MARKER_RE without its opening bracket: a literal start the regex engine scans for quickly.
_MARKER_TAIL_RE = re.compile(r"q=([0-9]*\.?[0-9]+)(?:⟩|>)")


def _markers(text: str) -> list[str]:
    """``MARKER_RE.findall(text)``, several times faster on long text: the matches of the
    tail that follow an opening bracket. The same list, since a tail match holds no opening
    bracket (so none hides a marker) and a marker is a bracket then a tail match."""
    return [m.group(1) for m in _MARKER_TAIL_RE.finditer(text) if m.start() and text[m.start() - 1] in "⟨<"]

_FILLER = (
    "the answer considers context constraints and the likely intent then weighs each option "
    "against the evidence before settling on a recommendation with caveats where needed"
).split()
_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_ANSWERED = frozenset(("ok", *JUDGE_FAULTS))

Shape = Literal["openai", "anthropic"]


@dataclass
class FakeModel:
    """How one fake model behaves. Rates are probabilities per call, in [0, 1].

    ``quality`` (± ``quality_noise``, Gaussian, clamped to [0, 1]) is planted in
    each answer as ``⟨q=…⟩``; the filler after it is ``filler_words`` words long
    (uniform). ``latency_ms`` is a uniform range the server waits before
    answering. The fault rates together must not exceed 1; ``script`` overrides
    the draw for this model's first ``len(script)`` calls. When a request has
    tools and ``tool_choice`` is ``"required"`` or names a function, the answer
    also calls that tool (the first one for ``"required"``) with
    ``tool_arguments``.

    ``quality_when`` scripts quality per request: when the request's last user
    message contains one of its keys (the first in the mapping's order that
    matches), that key's quality is planted instead of ``quality`` (still with
    ``quality_noise``). ``FakeModel(quality=0.9, quality_when={"reasoning": 0.1})``
    is a model that is good on everything but prompts mentioning ``reasoning``:
    a planted regression in one segment of the traffic.

    Judge knobs (``judge=True``): a tie below ``tie_margin`` of quality gap, a
    strong preference (``>>``) at ``strong_margin`` or more; ``rate_no_label``
    (a reply without a label), replaced by ``rate_no_label_retry`` when the
    conversation already has an assistant turn (the judge's "label only,
    please" retry); ``rate_conflicting_labels`` (two different labels);
    ``position_bias`` (just says ``[[A>B]]``).
    """

    quality: float = 0.5
    quality_noise: float = 0.05
    latency_ms: tuple[float, float] = (0.0, 0.0)
    filler_words: tuple[int, int] = (5, 40)
    rate_429: float = 0.0
    retry_after_s: float = 1.0
    rate_500: float = 0.0
    rate_503: float = 0.0
    rate_timeout: float = 0.0
    rate_reset: float = 0.0
    rate_malformed: float = 0.0
    script: list[str] = field(default_factory=list)
    tool_arguments: dict[str, Any] = field(default_factory=dict)
    judge: bool = False
    tie_margin: float = 0.05
    strong_margin: float = 0.25
    rate_no_label: float = 0.0
    rate_no_label_retry: float = 0.0
    rate_conflicting_labels: float = 0.0
    position_bias: float = 0.0
    #: Report this (input, output) usage instead of the true one: a provider whose figures
    #: are wrong (over-reported, negative, absurd, not numbers) or quirky (``50.0``; a float
    #: NaN or infinity goes out as the JSON literal ``NaN``/``Infinity``, as Python writes it).
    usage_override: tuple[Any, Any] | None = None
    #: Give every chat-completions answer (streamed or not) this id instead of a per-call
    #: one: a provider whose ids repeat (as they do after an upstream restart).
    response_id: str | None = None
    #: Quality by prompt: the first key found in the last user message plants its value (see above).
    quality_when: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if any(not 0.0 <= q <= 1.0 for q in self.quality_when.values()):
            raise ValueError("FakeModel quality_when qualities must lie in [0, 1]")
        rates = self._fault_rates()
        judge_rates = (self.rate_no_label, self.rate_no_label_retry, self.rate_conflicting_labels, self.position_bias)
        if any(not 0.0 <= r <= 1.0 for r in (*rates.values(), *judge_rates)):
            raise ValueError("FakeModel rates must lie in [0, 1]")
        if sum(rates.values()) > 1.0:
            raise ValueError("FakeModel fault rates add up to more than 1")
        unknown = [s for s in self.script if s not in TRANSPORT_FAULTS + JUDGE_FAULTS]
        if unknown:
            raise ValueError(f"unknown script entries {unknown}; known: {TRANSPORT_FAULTS + JUDGE_FAULTS}")

    def _fault_rates(self) -> dict[str, float]:
        return {
            "429": self.rate_429,
            "500": self.rate_500,
            "503": self.rate_503,
            "timeout": self.rate_timeout,
            "reset": self.rate_reset,
            "malformed": self.rate_malformed,
        }

    def draw_fault(self, rng: random.Random) -> str:
        """One call's transport fault from the rates (``"ok"`` most of the time)."""
        u = rng.random()
        # The order of _fault_rates, without building its dict on every call.
        for fault, rate in (("429", self.rate_429), ("500", self.rate_500), ("503", self.rate_503),
                            ("timeout", self.rate_timeout), ("reset", self.rate_reset),
                            ("malformed", self.rate_malformed)):
            if u < rate:
                return fault
            u -= rate
        return "ok"


class RecordedRequest(NamedTuple):
    """One call as the server saw it: the model asked for, headers, parsed JSON body."""

    model: str | None
    headers: dict[str, str]
    body: Any


class _Answer(NamedTuple):
    text: str
    tool: tuple[str, dict[str, Any]] | None
    finish_reason: str
    input_tokens: Any  # int, unless the model's usage_override says otherwise
    output_tokens: Any


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def judge_reply(spec: FakeModel, rng: random.Random, messages: list[dict[str, Any]], forced: str | None) -> str:
    """The fake judge's reply to ``messages`` (see the module docstring)."""
    retry = any(m.get("role") == "assistant" for m in messages)
    u_no_label, u_bias, u_conflict = rng.random(), rng.random(), rng.random()
    no_label_rate = spec.rate_no_label_retry if retry else spec.rate_no_label
    if forced == "no_label" or (forced is None and u_no_label < no_label_rate):
        return "Both answers have merit; weighing them carefully, it is hard to decide."
    markers: list[float] = []
    for message in reversed(messages):
        if message.get("role") == "user":
            markers = [float(q) for q in _markers(_text_of(message.get("content")))]
            if markers:
                break
    if any(m.get("role") == "system" and "[[rating: N]]" in _text_of(m.get("content")) for m in messages):
        # The absolute judge (judge/absolute.py): one answer, rated from its marker.
        rating = max(1, min(10, round(1 + 9 * markers[0]))) if markers else 5
        return f"The answer is rated on its own. [[rating: {rating}]]"
    if forced == "bias" or (forced is None and u_bias < spec.position_bias):
        label, why = "A>B", "Assistant A's answer comes first and reads well."
    elif len(markers) < 2:
        label, why = "A=B", "I cannot tell the two answers apart."
    else:
        gap = markers[0] - markers[1]
        better = "A" if gap > 0 else "B"
        worse = "B" if gap > 0 else "A"
        if abs(gap) < spec.tie_margin:
            label, why = "A=B", "Both answers are about equally good."
        elif abs(gap) >= spec.strong_margin:
            label, why = f"{better}>>{worse}", f"Assistant {better}'s answer is much better."
        else:
            label, why = f"{better}>{worse}", f"Assistant {better}'s answer is somewhat better."
    if forced == "conflicting" or (forced is None and u_conflict < spec.rate_conflicting_labels):
        other = "B>A" if label in ("A>>B", "A>B", "A=B") else "A>B"
        return f"{why} Verdict: [[{label}]]. On reflection, perhaps [[{other}]]."
    return f"{why} Verdict: [[{label}]]"


def planted_quality(spec: FakeModel, messages: list[dict[str, Any]]) -> float:
    """The quality ``spec`` plants for a request of ``messages``: ``quality``, unless the last
    user message contains a key of ``quality_when`` (the first that matches wins)."""
    if spec.quality_when:
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), None)
        text = _text_of(last_user.get("content")) if last_user is not None else ""
        for key, quality in spec.quality_when.items():
            if key in text:
                return quality
    return spec.quality


def generation_text(
    model: str, spec: FakeModel, rng: random.Random, messages: list[dict[str, Any]] | None = None
) -> str:
    """A generation answer of ``model``: its planted quality marker, then filler words."""
    q = min(1.0, max(0.0, rng.gauss(planted_quality(spec, messages or []), spec.quality_noise)))
    n = rng.randint(*spec.filler_words)
    return f"Answer from {model} {marker(q)} {_filler(n)}".rstrip()


@functools.lru_cache(maxsize=4096)
def _filler(n: int) -> str:
    """The ``n`` filler words of an answer (a function of ``n`` alone, so built once per ``n``)."""
    return " ".join(_FILLER[(i * 7 + n) % len(_FILLER)] for i in range(n))


def marker(quality: float) -> str:
    """The quality marker of an answer of ``quality`` (in [0, 1]), as generation plants it."""
    return f"⟨q={quality:.3f}⟩"


def _requested_tool(params: Mapping[str, Any]) -> str | None:
    tools = params.get("tools") or []
    choice = params.get("tool_choice")
    if isinstance(choice, dict):
        # OpenAI {"function": {"name"}}, Anthropic {"type": "tool", "name"} or {"type": "any"}
        named = choice.get("function", {}).get("name") or choice.get("name")
        if named:
            return str(named)
        choice = choice.get("type")
    if choice in ("required", "any") and tools:
        first = tools[0]
        name = first.get("function", first).get("name")
        return str(name) if name else None
    return None


def make_answer(
    model: str,
    spec: FakeModel,
    rng: random.Random,
    messages: list[dict[str, Any]],
    params: Mapping[str, Any],
    forced: str | None,
    prompt_bytes: int,
) -> _Answer:
    """Text, tool call and usage for one successful call; truncated to ``max_tokens``."""
    text = judge_reply(spec, rng, messages, forced) if spec.judge else generation_text(model, spec, rng, messages)
    tool_name = _requested_tool(params)
    tool = (tool_name, dict(spec.tool_arguments)) if tool_name else None
    size = len(text.encode()) + (len(json.dumps(tool[1])) + len(tool[0]) if tool else 0)
    out_tokens = max(1, math.ceil(size / 4))
    finish = "tool_calls" if tool else "stop"
    limit = params.get("max_tokens", params.get("max_completion_tokens"))
    if isinstance(limit, int) and 0 < limit < out_tokens:
        text = text.encode()[: limit * 4].decode(errors="ignore")
        tool, out_tokens, finish = None, limit, "length"
    if spec.usage_override is not None:
        return _Answer(text, tool, finish, *spec.usage_override)
    return _Answer(text, tool, finish, max(1, prompt_bytes // 4), out_tokens)


def _openai_id(spec: FakeModel, n: int) -> str:
    return spec.response_id if spec.response_id is not None else f"chatcmpl-fake-{n}"


def _openai_usage(a: _Answer) -> dict[str, Any]:
    return {"prompt_tokens": a.input_tokens, "completion_tokens": a.output_tokens,
            "total_tokens": _total(a.input_tokens, a.output_tokens)}


def _tool_arguments(a: _Answer) -> str:
    assert a.tool is not None
    return json.dumps(a.tool[1], separators=(",", ":"))


# The plain answers are written straight as JSON text, exactly as ``json.dumps`` of the
# equivalent dict would write them (its default separators, ASCII-only): a call is a few
# string joins instead of building nested dicts and walking them in the encoder.


def _js(value: Any) -> str:
    """``json.dumps(value)``, quicker for the str and int a body is mostly made of."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if kind is int:
        return int.__repr__(value)
    return json.dumps(value)


def _openai_usage_json(a: _Answer) -> str:
    return (f'{{"prompt_tokens": {_js(a.input_tokens)}, "completion_tokens": {_js(a.output_tokens)}, '
            f'"total_tokens": {_js(_total(a.input_tokens, a.output_tokens))}}}')


def openai_json(model: str, n: int, a: _Answer, spec: FakeModel) -> str:
    """The body of a plain chat-completions answer, as JSON text."""
    tool_calls = ""
    if a.tool:
        tool_calls = (f', "tool_calls": [{{"id": "call_{n}", "type": "function", "function": '
                      f'{{"name": {_js(a.tool[0])}, "arguments": {_js(_tool_arguments(a))}}}}}]')
    return (
        f'{{"id": {_js(_openai_id(spec, n))}, "object": "chat.completion", "created": 0, "model": {_js(model)}, '
        f'"choices": [{{"index": 0, "message": {{"role": "assistant", "content": {_js(a.text)}{tool_calls}}}, '
        f'"finish_reason": {_js(a.finish_reason)}}}], "usage": {_openai_usage_json(a)}}}'
    )


def _text_pieces(text: str) -> list[str]:
    """The answer as a stream would carry it: word-sized pieces that join back to ``text``."""
    return re.findall(r"\s*\S+|\s+$", text)


def openai_chunks(model: str, n: int, a: _Answer, spec: FakeModel, *, include_usage: bool) -> list[dict[str, Any]]:
    """The ``chat.completion.chunk`` objects of one streamed answer, in order (see the module docstring)."""
    head = {"id": _openai_id(spec, n), "object": "chat.completion.chunk", "created": 0, "model": model}
    tail = {"usage": None} if include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **tail}

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in _text_pieces(a.text)]
    if a.tool:
        arguments = _tool_arguments(a)
        call = {"index": 0, "id": f"call_{n}", "type": "function", "function": {"name": a.tool[0], "arguments": ""}}
        chunks.append(chunk({"tool_calls": [call]}))
        half = len(arguments) // 2
        for part in (arguments[:half], arguments[half:]):
            chunks.append(chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]}))
    chunks.append(chunk({}, a.finish_reason))
    if include_usage:
        chunks.append({**head, "choices": [], "usage": _openai_usage(a)})
    return chunks


def _sse(data: str) -> bytes:
    return f"data: {data}\n\n".encode()


def _total(a: Any, b: Any) -> Any:
    try:
        return a + b
    except TypeError:
        return None


def anthropic_json(model: str, n: int, a: _Answer) -> str:
    """The body of a Messages-API answer, as JSON text."""
    tool_use = ""
    if a.tool:
        tool_use = (f', {{"type": "tool_use", "id": "toolu_{n}", "name": {_js(a.tool[0])}, '
                    f'"input": {json.dumps(a.tool[1])}}}')
    return (
        f'{{"id": "msg_fake_{n}", "type": "message", "role": "assistant", "model": {_js(model)}, '
        f'"content": [{{"type": "text", "text": {_js(a.text)}}}{tool_use}], '
        f'"stop_reason": {_js(_STOP_REASONS[a.finish_reason])}, "stop_sequence": null, '
        f'"usage": {{"input_tokens": {_js(a.input_tokens)}, "output_tokens": {_js(a.output_tokens)}}}}}'
    )


class _NotPlain(Exception):
    """A value :func:`prompt_size` leaves to the standard encoder (a float, say)."""


def _separator_bytes(value: Any) -> int:
    """How many bytes ``json.dumps``'s separators (``", "`` and ``": "``) add to the compact
    encoding of ``value``: one per item and per key; raises _NotPlain for anything but str,
    int, bool, None, lists and dicts (floats are written differently by the two encoders)."""
    kind = type(value)
    if kind is dict:
        total, items = 2 * len(value) - 1, value.values()
    elif kind is list:
        total, items = len(value) - 1, value
    elif kind is str or kind is int or kind is bool or value is None:
        return 0
    else:
        raise _NotPlain
    if not value:
        return 0
    for item in items:
        if type(item) is not str:  # most values are: no call for them
            total += _separator_bytes(item)
    return total


def prompt_size(messages: list[dict[str, Any]]) -> int:
    """``len(json.dumps(messages, ensure_ascii=False).encode())``, the prompt's size in bytes.

    msgspec writes the same UTF-8 text for strings, ints, booleans and nulls, only without
    the spaces after separators, so its length plus one byte per separator is the same
    figure at a fraction of the cost. Anything else (floats, values UTF-8 cannot encode)
    takes the slow way, which is the definition."""
    try:
        return len(msgspec.json.encode(messages)) + _separator_bytes(messages)
    except (_NotPlain, msgspec.EncodeError, UnicodeEncodeError, TypeError, RecursionError):
        return len(json.dumps(messages, ensure_ascii=False).encode())


def _loads(raw: bytes) -> Any:
    """``json.loads(raw)``: msgspec's decoder where it accepts the body (it then gives the same
    value), the standard one otherwise (NaN, 1e400, lone surrogates, other encodings, errors)."""
    try:
        return msgspec.json.decode(raw)
    except Exception:
        return json.loads(raw)


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "fake_error", "code": status}}
    return web.json_response(body, status=status, headers=headers)


class FakeProvider:
    """The fake upstream as an async context manager (see the module docstring).

    Entering starts an aiohttp server on ``host:port`` (port 0 picks a free
    one); leaving ends every stalled ``timeout`` call (its connection is
    dropped) and shuts the server down, so no test hangs on a stall.
    ``calls`` counts every request per requested model, faulted or not, known
    or not (a 404 for unknown models); ``requests`` keeps each one as a
    :class:`RecordedRequest`. ``models`` may be changed while running. With
    ``api_key`` set, requests without that key (Bearer or ``x-api-key``) get 401.
    """

    def __init__(
        self,
        models: Mapping[str, FakeModel],
        *,
        seed: int = 0,
        api_key: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self.models: dict[str, FakeModel] = dict(models)
        self.calls: Counter[str | None] = Counter()
        self.requests: list[RecordedRequest] = []
        self._seed = seed
        self._api_key = api_key
        self._host = host
        self._port = port
        self._rngs: dict[str, random.Random] = {}
        self._stopping = asyncio.Event()
        self._runner: web.AppRunner | None = None
        self._bound: int | None = None

    def __repr__(self) -> str:
        return f"FakeProvider(models={sorted(self.models)}, url={self.root_url if self._bound else None!r})"

    @property
    def root_url(self) -> str:
        """``http://host:port``: the base URL for an Anthropic client."""
        if self._bound is None:
            raise RuntimeError("FakeProvider is not running")
        return f"http://{self._host}:{self._bound}"

    @property
    def base_url(self) -> str:
        """``http://host:port/v1``: the base URL for an OpenAI client."""
        return f"{self.root_url}/v1"

    def make_app(self) -> web.Application:
        """The aiohttp app, for callers that run it under their own runner."""
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._list_models)
        return app

    async def start(self) -> None:
        """Start serving; ``base_url`` is valid afterwards."""
        self._stopping.clear()
        self._runner = web.AppRunner(self.make_app(), access_log=None, shutdown_timeout=5.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self._host, self._port, backlog=1024)
        await site.start()
        self._bound = self._runner.addresses[0][1]

    async def stop(self) -> None:
        """Release stalled calls, then stop the server. Idempotent."""
        self._stopping.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> FakeProvider:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    def draw_state(self) -> tuple[dict[str | None, int], dict[str, Any]]:
        """What the next answers depend on: the calls per model and each model's random state.
        A provider given it by :meth:`restore_draws` answers the next calls as this one would."""
        return dict(self.calls), {model: rng.getstate() for model, rng in self._rngs.items()}

    def restore_draws(self, state: tuple[Mapping[str | None, int], Mapping[str, Any]]) -> None:
        """Continue from another provider's :meth:`draw_state` (e.g. a test that starts from a
        copy of a store that provider's answers built)."""
        calls, rngs = state
        self.calls.clear()
        self.calls.update(calls)
        for model, rng_state in rngs.items():
            self._rng(model).setstate(rng_state)

    def _rng(self, model: str) -> random.Random:
        rng = self._rngs.get(model)
        if rng is None:
            rng = self._rngs[model] = random.Random(f"{self._seed}:{model}")
        return rng

    async def _list_models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": m, "object": "model"} for m in self.models]})

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "openai")

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "anthropic")

    def _authorised(self, request: web.Request) -> bool:
        if self._api_key is None:
            return True
        return request.headers.get("x-api-key") == self._api_key or (
            request.headers.get("authorization") == f"Bearer {self._api_key}"
        )

    async def _serve(self, request: web.Request, shape: Shape) -> web.StreamResponse:
        try:
            body = _loads(await request.read())
        except ValueError:
            return _error(400, "body is not JSON")
        model = body.get("model") if isinstance(body, dict) else None
        index = self.calls[model]
        self.calls[model] += 1
        self.requests.append(RecordedRequest(model, dict(request.headers), body))
        if not self._authorised(request):
            return _error(401, "invalid api key")
        spec = self.models.get(model) if isinstance(model, str) else None
        if spec is None or not isinstance(model, str):
            return _error(404, f"model {model!r} not found")
        problem = _validate(body, shape)
        if problem:
            return _error(400, problem)

        # Draw everything before the first await: reproducible under sequential use.
        rng = self._rng(model)
        fault = spec.script[index] if index < len(spec.script) else spec.draw_fault(rng)
        delay = rng.uniform(*spec.latency_ms) / 1000.0
        answer = None
        if fault in _ANSWERED:
            messages = list(body["messages"])
            if shape == "anthropic" and body.get("system"):
                messages.insert(0, {"role": "system", "content": body["system"]})
            prompt_bytes = prompt_size(messages)
            forced = fault if fault in JUDGE_FAULTS else None
            answer = make_answer(model, spec, rng, messages, body, forced, prompt_bytes)
        if delay > 0:
            await asyncio.sleep(delay)
        return await self._respond(request, shape, model, body, fault, answer, spec, index)

    async def _stream(self, request: web.Request, events: list[str]) -> web.StreamResponse:
        """Send ``events`` as server-sent events, each written (and flushed) on its own."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event in events:
            await response.write(_sse(event))
        await response.write_eof()
        return response

    async def _respond(
        self,
        request: web.Request,
        shape: Shape,
        model: str,
        body: dict[str, Any],
        fault: str,
        answer: _Answer | None,
        spec: FakeModel,
        index: int,
    ) -> web.StreamResponse:
        streamed = shape == "openai" and body.get("stream") is True
        if answer is not None:
            if streamed:
                options = body.get("stream_options")
                include_usage = isinstance(options, dict) and options.get("include_usage") is True
                events = [json.dumps(c) for c in openai_chunks(model, index, answer, spec, include_usage=include_usage)]
                return await self._stream(request, [*events, "[DONE]"])
            # As web.json_response would send the body's dict, without building it.
            if shape == "anthropic":
                return web.Response(text=anthropic_json(model, index, answer), content_type="application/json")
            return web.Response(text=openai_json(model, index, answer, spec), content_type="application/json")
        if fault == "429":
            retry_after = spec.retry_after_s
            value = str(int(retry_after)) if float(retry_after).is_integer() else f"{retry_after:g}"
            return _error(429, "rate limited", {"Retry-After": value})
        if fault in ("500", "502", "503", "504"):
            return _error(int(fault), f"fake {fault}")
        if fault == "malformed":
            if streamed:
                return await self._stream(request, ['{"choices": [{"delta": '])
            return web.Response(status=200, body=b'{"choices": [{"message": ', content_type="application/json")
        if fault == "timeout":
            await self._stopping.wait()
        # "reset", or a stall ended by shutdown: drop the connection without an answer.
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=204)


def _validate(body: Any, shape: Shape) -> str | None:
    """A 400 message for a body the real API would reject, else None."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list) or not body["messages"]:
        return "messages must be a non-empty list"
    if not all(isinstance(m, dict) for m in body["messages"]):
        return "each message must be an object"
    if shape == "anthropic":
        if not isinstance(body.get("max_tokens"), int):
            return "max_tokens: field required"
        if any(m.get("role") not in ("user", "assistant") for m in body["messages"]):
            return "messages: roles must be 'user' or 'assistant' (system goes top-level)"
    return None
