"""The tap's fast decode (:mod:`sidecar.ingest.fast_decode`) against the full path it shortens
(:func:`sidecar.ingest.wire.decode_body`, then the screen exchange by exchange): for every body,
the same exchanges and exclusions, or the same refusal with the same path (issue 29)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from sidecar.engine.pipe import decode_claims, encode_claims
from sidecar.ingest.claims import Claim
from sidecar.ingest.fast_decode import decode_fast
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.intake import ingest
from sidecar.ingest.journal import Journal
from sidecar.ingest.routing import Route, RoutingTable, Routes
from sidecar.ingest.screen import screen_exchanges
from sidecar.ingest.wire import DecodeError, Exchange, decode_body
from sidecar.telemetry.counters import TapCounters
from tests.fuzz.test_tap_fuzz import body_of, generate

JSON = "application/json"


def exchange(**changes: Any) -> dict[str, Any]:
    ex: dict[str, Any] = {
        "exchange_id": "ex-1", "team": "team-a", "gateway": "gw", "route": "/v1/chat/completions", "model": "m",
        "request": {
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Grüße, 2+2?"}],
            "params": {"temperature": 0.2, "max_tokens": 256},
        },
        "response": {"content": "4", "finish_reason": "stop", "usage": {"input_tokens": 9, "output_tokens": 1}},
        "served_at": "2026-12-01T00:00:00Z", "latency_ms": 812.5,
    }
    ex.update(changes)
    return ex


def batch(*exchanges: dict[str, Any]) -> bytes:
    return json.dumps(list(exchanges), ensure_ascii=False).encode()


def full(body: bytes, content_type: str = JSON) -> tuple[Any, ...]:
    """What the full path makes of ``body``: the screened exchanges as the schema's JSON and the
    exclusions, or the refusal's message and path."""
    try:
        decoded = decode_body(body, content_type)
        return _outcome(screen_exchanges(decoded.exchanges, decoded.where))
    except DecodeError as exc:
        return ("refused", str(exc), exc.path)


def fast(body: bytes, content_type: str = JSON) -> tuple[Any, ...]:
    """The same, as the tap does it: the fast decode first (intake.ingest)."""
    try:
        decoded = decode_fast(body, content_type) or decode_body(body, content_type)
        return _outcome(screen_exchanges(decoded.exchanges, decoded.where, decoded.plain))
    except DecodeError as exc:
        return ("refused", str(exc), exc.path)


def _outcome(screened: Any) -> tuple[Any, ...]:
    # Structs of two types never compare equal: compare what the engine's pipe carries.
    as_schema = msgspec.json.decode(msgspec.json.encode(screened.exchanges), type=list[Exchange])
    return ("accepted", msgspec.json.encode(as_schema), dict(screened.excluded))


def test_a_gateways_plain_batch_takes_the_one_pass_path() -> None:
    body = batch(exchange(), exchange(exchange_id="ex-2", tags={"tier": "fast"}))
    decoded = decode_fast(body, JSON)
    assert decoded is not None and decoded.plain
    assert [ex.exchange_id for ex in decoded.exchanges] == ["ex-1", "ex-2"]
    assert all(isinstance(ex, Exchange) for ex in decoded.exchanges)
    one = decode_fast(json.dumps(exchange()).encode(), JSON)
    assert one is not None and one.plain and one.where(0) == "$"
    assert fast(body) == full(body) and fast(body)[0] == "accepted"


def test_a_batch_with_tool_calls_is_decoded_strictly_and_screened_exchange_by_exchange() -> None:
    tools = exchange(exchange_id="ex-2")
    tools["request"]["messages"].append({"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]})
    body = batch(exchange(), tools)
    decoded = decode_fast(body, JSON)
    assert decoded is not None and not decoded.plain
    assert fast(body) == full(body)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(batch(exchange(), exchange(exchange_id="ex-2", newer_field=1)), id="unknown-field"),
        pytest.param(batch(exchange(latency_ms=-1)), id="latency-out-of-range"),
        pytest.param(batch(exchange(latency_ms=1e9)), id="latency-over-a-day"),
        pytest.param(batch(exchange(response={"usage": {"cost_usd": 10_001}})), id="cost-out-of-range"),
        pytest.param(batch(exchange(response={"usage": {"prompt_tokens": 10**8 + 1}})), id="tokens-out-of-range"),
        pytest.param(batch(exchange(extra="BAD")).replace(b'"BAD"', b'"\xff"'), id="bad-utf8-ignored-value"),
        pytest.param(batch(exchange(x=1)).replace(b'"x"', b'"\xc3"'), id="bad-utf8-unknown-key"),
        pytest.param(b"\n".join(json.dumps(exchange(exchange_id=f"e{i}")).encode() for i in range(2)), id="ndjson"),
    ],
)
def test_what_the_strict_decoders_refuse_takes_the_full_path(body: bytes) -> None:
    assert decode_fast(body, JSON) is None
    assert fast(body) == full(body)


@pytest.mark.parametrize(
    "params",
    [{"max_tokens": 0}, {"max_tokens": 2**31}, {"max_tokens": True}, {"max_completion_tokens": 1.0},
     {"max_tokens": "64"}, {"max_tokens": None, "max_completion_tokens": -3}],
    ids=repr,
)
def test_a_plain_batch_with_a_token_parameter_out_of_range_is_refused_as_before(params: dict[str, Any]) -> None:
    good = exchange()
    bad = exchange(exchange_id="ex-2")
    bad["request"]["params"] = params
    body = batch(good, bad)  # the first exchange's max_tokens is 256: a True must not hide behind a 1
    assert (decoded := decode_fast(body, JSON)) is not None and decoded.plain
    refused = fast(body)
    assert refused == full(body) and refused[0] == "refused" and refused[2].startswith("$[1].request.params.")


def test_a_bool_max_tokens_does_not_hide_behind_an_equal_count() -> None:
    one, true = exchange(), exchange(exchange_id="ex-2")
    one["request"]["params"] = {"max_tokens": 1}
    true["request"]["params"] = {"max_tokens": True}
    assert fast(batch(one, true)) == full(batch(one, true)) == (
        "refused", "max_tokens must be null or an integer from 1 to 2147483647", "$[1].request.params.max_tokens"
    )


def test_tags_of_a_plain_batch_are_still_checked() -> None:
    body = batch(exchange(), exchange(exchange_id="ex-2", tags={"": "x"}))
    assert (decoded := decode_fast(body, JSON)) is not None and decoded.plain
    refused = fast(body)
    assert refused == full(body) and refused[0] == "refused" and refused[2] == "$[1].tags"


def test_the_fast_and_full_paths_agree_on_the_tap_fuzzs_bodies() -> None:
    """The tap fuzz's generator (tests/fuzz/test_tap_fuzz.py): wrong types, missing fields,
    nesting thousands deep, invalid UTF-8 in keys and values, wide integers, figures out of
    range, as an object, an array or NDJSON, whole or broken."""
    paths: Counter[str] = Counter()
    for request in generate(300, part=29):
        if request.shape == "gzip":
            continue
        body, headers, _ = body_of(request.items, request.shape, request.broken)
        content_type = headers["Content-Type"]
        decoded = decode_fast(body, content_type)
        paths["plain" if decoded is not None and decoded.plain else "strict" if decoded is not None else "full"] += 1
        assert fast(body, content_type) == full(body, content_type), (request.shape, request.broken)
    # Each path is taken by some of them, so each was compared.
    print(dict(paths))
    assert min(paths["plain"], paths["strict"], paths["full"]) > 0, paths


def test_strictly_decoded_exchanges_cross_the_journal_and_the_engines_pipe_as_the_schemas(tmp_path: Path) -> None:
    body = batch(exchange(), exchange(exchange_id="ex-2", tags={"tier": "fast"}))
    given = msgspec.json.decode(body, type=list[Exchange])
    journal = Journal(str(tmp_path))
    journal.open()
    table = RoutingTable()
    table.current = Routes([Route("t1", "team-a", "m", None, None, 1.0, "local")])
    sink: Handoff[Claim] = Handoff(100)
    parts = SimpleNamespace(routing=table, sinks={"local": sink}, journals={"local": journal}, funnel=FunnelCounter(),
                            counters=TapCounters(), retention=None, outbox_full=False)
    reply = ingest(parts, body, JSON)
    assert (reply.accepted, reply.sampled, reply.shed) == (2, 2, 0)
    claims = sink.drain_remaining()
    assert [c.content() for c in claims] == given  # packed by the journal from the fast path's own structs
    assert [c.exchange for c in decode_claims(encode_claims(claims))] == given
    journal.close(keep=None)
    again = Journal(str(tmp_path))
    assert [c.exchange for c in again.open()] == given
    again.close(keep=None)
