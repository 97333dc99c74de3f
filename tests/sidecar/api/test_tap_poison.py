"""Poisoned exchanges (issue 21, items 1 and 6, and its must-show).

For each kind of hostile value — wide integers, deep nesting, invalid UTF-8 in keys and
values, NaN and Infinity literals, huge strings, odd types in every field — one poisoned
exchange goes to a real sidecar whose engine runs in its own process (the default, so every
sampled claim crosses the msgpack pipe and the intake journal), followed by five good ones.
Each time: the poison is answered ``202`` (and, when sampled, its case ends in an outcome) or
``400`` naming where, never ``5xx``; the five good ones are judged; and every case the tap
sampled has exactly one outcome. Values that are valid JSON (a 2**64 seed) reach the
candidate exactly as the gateway sent them.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from sidecar.engine.engine import Claim
from sidecar.engine.process import decode_claims, encode_claims
from sidecar.ingest.journal import Journal
from sidecar.ingest.wire import decode_exchanges
from tests.harness import CANDIDATE, Harness, exchange

#: The tap's decided outcomes; every other outcome ends a case the tap sampled.
TAP_DECIDED = ("not_sampled", "skipped_redacted", "shed_queue_full", "not_at_site")
P = '"@@P@@"'  # a value's place in the JSON text, replaced by raw bytes
K = '"@@K@@"'  # a key's place
ACCEPT = "202"


@dataclass(frozen=True)
class Poison:
    name: str
    body: bytes
    #: ``ACCEPT``, or the ``field`` a 400 must name.
    expect: str
    content_type: str = "application/json"
    #: For an accepted poison: a request parameter the candidate must receive exactly so.
    carried: tuple[str, Any] | None = None


def _ex(name: str) -> dict[str, Any]:
    ex = exchange(0, content=f"answer to {name}")
    ex["exchange_id"] = f"poison-{name}"
    ex["request"]["messages"][0]["content"] = f"poison {name}"
    return ex


def _body(ex: Any, **raw: bytes) -> bytes:
    text = json.dumps([ex]).encode()
    for marker, value in raw.items():
        text = text.replace(json.dumps(f"@@{marker}@@").encode(), value)
    return text


def _set(name: str, path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    ex = _ex(name)
    node: Any = ex
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
    node[path[-1]] = value
    return ex


def _raw(name: str, path: tuple[Any, ...], raw: bytes) -> bytes:
    return _body(_set(name, path, "@@P@@"), P=raw)


def _raw_key(name: str, path: tuple[Any, ...], key: bytes, value: Any = 1) -> bytes:
    ex = _set(name, (*path, "@@K@@"), value)
    return _body(ex, K=key)


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def poisons() -> list[Poison]:
    out: list[Poison] = []

    def add(name: str, body: bytes, expect: str, **kw: Any) -> None:
        out.append(Poison(name, body, expect, **kw))

    def setv(name: str, path: tuple[Any, ...], value: Any, expect: str, **kw: Any) -> None:
        add(name, _body(_set(name, path, value)), expect, **kw)

    params = ("request", "params")
    content = "$[0].request.messages[0].content"
    # -- wide integers: valid JSON, carried to the candidate exactly ------------------------------
    setv("seed-2^64", (*params, "seed"), 2**64, ACCEPT, carried=("seed", 2**64))
    setv("seed-below-int64", (*params, "seed"), -(2**63) - 1, ACCEPT, carried=("seed", -(2**63) - 1))
    setv("logit-bias-1e30", (*params, "logit_bias"), {"50256": 10**30}, ACCEPT, carried=("logit_bias", {"50256": 10**30}))
    setv("wide-int-in-a-message", ("request", "messages", 0, "n"), [2**200, -(2**100)], ACCEPT)
    setv("int-of-4300-digits", (*params, "seed"), int("9" * 4300), ACCEPT)
    add("int-of-4301-digits", _raw("x", (*params, "seed"), b"9" * 4301), "$[0].request.params.seed")
    setv("max-tokens-2^64", (*params, "max_tokens"), 2**64, "$[0].request.params.max_tokens")
    setv("usage-tokens-2^64", ("response", "usage", "input_tokens"), 2**64, ACCEPT)
    setv("latency-2^64", ("latency_ms",), 2**64, ACCEPT)
    setv("wide-int-ignored-field", ("gateway_extra",), 2**90, ACCEPT)
    # -- nesting ----------------------------------------------------------------------------------
    setv("tools-nested-40", (*params, "tools"), _nested(40), ACCEPT)
    setv("content-nested-100", ("request", "messages", 0, "content"), _nested(100), "$[0].request.messages[0]")
    setv("params-nested-100", (*params, "tools"), _nested(100), "$[0].request.params.tools")
    add("ignored-field-nested-5000", _raw("x", ("gateway_extra",), b"[" * 5000 + b"]" * 5000), "$")
    # -- invalid UTF-8, in keys and in values -----------------------------------------------------
    add("bad-utf8-in-a-params-key", _raw_key("x", params, b'"se\xffed"'), '$[0].request.params["se\\xffed"]')
    add("bad-utf8-in-the-params-key", _body(_ex("x"), **{}).replace(b'"params"', b'"par\xffams"'),
        '$[0].request["par\\xffams"]')
    add("bad-utf8-in-content", _raw("x", ("request", "messages", 0, "content"), b'"h\xffi"'), content)
    add("bad-utf8-in-a-message-key", _raw_key("x", ("request", "messages", 0), b'"ro\xc3le"', "user"),
        '$[0].request.messages[0]["ro\\xc3le"]')
    add("bad-utf8-in-an-ignored-key", _raw_key("x", (), b'"z\xfez"'), '$[0]["z\\xfez"]')
    add("bad-utf8-in-an-ignored-value", _raw("x", ("gateway_extra",), b'"\x80"'), "$[0].gateway_extra")
    add("overlong-utf8", _raw("x", ("request", "messages", 0, "content"), b'"\xc0\xaf"'), content)
    add("utf8-encoded-surrogate", _raw("x", ("request", "messages", 0, "content"), b'"\xed\xa0\x80"'), content)
    add("truncated-utf8", _raw("x", ("request", "messages", 0, "content"), b'"\xe2\x82"'), content)
    add("lone-surrogate-escape", _raw("x", ("request", "messages", 0, "content"), b'"\\ud800"'), content)
    add("lone-surrogate-ignored", _raw("x", ("gateway_extra",), b'"\\udc00x"'), "$[0].gateway_extra")
    add("bad-utf8-ndjson", _raw("x", ("request", "messages", 0, "content"), b'"\xff"')[1:-1] + b"\n",
        "line 1: $.request.messages[0].content", content_type="application/x-ndjson")
    # -- NaN and Infinity -------------------------------------------------------------------------
    add("nan-temperature", _raw("x", (*params, "temperature"), b"NaN"), "$[0].request.params.temperature")
    add("infinity-latency", _raw("x", ("latency_ms",), b"Infinity"), "$[0].latency_ms")
    add("minus-infinity-cost", _raw("x", ("response", "usage", "cost_usd"), b"-Infinity"), "$[0].response.usage.cost_usd")
    add("1e400-seed", _raw("x", (*params, "seed"), b"1e400"), "$[0].request.params.seed")
    add("1e400-latency", _raw("x", ("latency_ms",), b"-1e400"), "$[0].latency_ms")
    # -- huge strings -------------------------------------------------------------------------------
    setv("content-1mib", ("request", "messages", 0, "content"), "poison content-1mib " + "x" * 2**20, ACCEPT)
    ex = _ex("id-64kib")
    ex["exchange_id"] = "poison-id-" + "y" * 2**16
    add("id-64kib", _body(ex), ACCEPT)
    setv("param-key-64kib", (*params, "k" * 2**16), 1, ACCEPT)
    setv("team-10kib", ("team",), "t" * 10_240, ACCEPT)
    # -- odd types in every field ---------------------------------------------------------------
    for field_path, value in [
        (("exchange_id",), 5), (("team",), ["team-a"]), (("model",), None), (("gateway",), {}), (("route",), [1]),
        (("served_at",), 1), (("latency_ms",), "fast"), (("redacted",), "yes"), (("traceparent",), 7),
        (("request",), "hi"), (("request", "messages"), {"role": "user"}), (("request", "messages", 0), "hi"),
        (params, ["temperature"]), ((*params, "max_tokens"), True), (("response",), "ok"),
        (("response", "content"), 12), (("response", "finish_reason"), 1), (("response", "usage"), [1]),
        (("response", "usage", "input_tokens"), "12"), (("response", "usage", "cost_usd"), "0.1"),
    ]:
        where = "$[0]" + "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in field_path)
        setv(f"odd-{'.'.join(map(str, field_path))}", field_path, value, where)
    setv("odd-role-and-content", ("request", "messages", 0), {"role": 5, "content": {"a": [1, None]}}, ACCEPT)
    ex = _ex("odd-params")
    ex["request"]["params"].update(temperature="hot", tools=5, stop={}, n=1000, stream=True, top_p=[])
    add("odd-params", _body(ex), ACCEPT)
    add("exchange-null", b"[null]", "$[0]")
    add("duplicate-keys", _body(_ex("duplicate-keys")).replace(b'"team": "team-a"', b'"team": "team-b", "team": "team-a"'),
        ACCEPT)
    setv("control-characters", ("request", "messages", 0, "content"), "poison \u0000\u202e\ufeff\U0010ffff", ACCEPT)
    return out


POISONS = poisons()


async def test_one_poisoned_exchange_then_five_good_ones_every_kind(tmp_path: Path) -> None:
    assert len(POISONS) >= 30
    async with Harness(tmp_path, isolation="process", workers=4) as h:
        assert h.tap
        trial = await h.create_trial(spend_cap_usd=1_000.0)
        tid = trial["id"]
        sampled = 0
        seen: dict[str, int] = {}
        for n, poison in enumerate(POISONS):
            r = await h.tap.post("/v1/exchanges", content=poison.body, headers={"Content-Type": poison.content_type})
            seen[str(r.status_code)] = seen.get(str(r.status_code), 0) + 1
            assert r.status_code < 500, (poison.name, r.text)
            if poison.expect == ACCEPT:
                assert r.status_code == 202, (poison.name, r.text)
                sampled += r.json()["sampled"]
            else:
                assert r.status_code == 400, (poison.name, r.text)
                error = r.json()["error"]
                assert error["code"] == "invalid_exchange" and error["field"] == poison.expect, (poison.name, error)
            good = [exchange(1000 * (n + 1) + i) for i in range(5)]
            assert (await h.send(good))["sampled"] == 5, poison.name
            sampled += 5
            # Everything offered so far reached the engine's process and ended (a dead forwarder hangs here).
            await asyncio.wait_for(h.runtime.idle(), timeout=60)
            cases = {c["exchange_id"]: c for c in await h.runtime.store.cases(tid)}
            for ex in good:
                case = cases.get(ex["exchange_id"])
                assert case is not None and case["outcome"] == "judged", (poison.name, case)
            view = await h.trial(tid)
            ran = sum(k for o, k in view["funnel"]["outcomes"].items() if o not in TAP_DECIDED)
            assert ran == sampled and view["funnel"]["in_flight"] == 0, (poison.name, ran, sampled, view["funnel"])
        # Valid JSON numbers reached the candidate exactly as sent.
        sent = {r.body["messages"][0]["content"]: r.body for r in h.fake.requests
                if r.model == CANDIDATE and isinstance(r.body.get("messages", [{}])[0].get("content"), str)}
        for poison in POISONS:
            if poison.carried is not None:
                name, value = poison.carried
                assert sent[f"poison {poison.name}"][name] == value, poison.name
        odd = sent["poison odd-params"]
        assert "n" not in odd and "stream" not in odd and odd["temperature"] == "hot"
        assert h.runtime.ready and (await h.tap.get("/healthz")).status_code == 200
        print(f"\npoison: {len(POISONS)} kinds, statuses {seen}; {sampled} cases sampled, {sampled} outcomes")


@pytest.mark.parametrize("value", [2**64, -(2**63) - 1, 10**30, -(10**300), int("9" * 4300)])
def test_the_claim_codecs_carry_integers_wider_than_msgpack(tmp_path: Path, value: int) -> None:
    """Item 1: the engine's pipe and the intake journal write a 2**64 seed; they used to raise OverflowError."""
    body = json.dumps({"exchange_id": "e", "team": "t", "model": "m", "response": {},
                       "request": {"messages": [{"role": "user", "content": "x", "n": [value]}],
                                   "params": {"seed": value, "ok": 2**64 - 1, "low": -(2**63), "flag": True}}})
    (ex,) = decode_exchanges(body.encode())
    claims = [Claim("tr_1", ex, 7), Claim("tr_1", decode_exchanges(body.replace('"e"', '"f"').encode())[0], 8)]
    back = decode_claims(encode_claims(claims))
    assert [(c.seq, c.exchange) for c in back] == [(7, claims[0].exchange), (8, claims[1].exchange)]
    assert back[0].exchange.request.params["seed"] == value and back[0].exchange.request.params["flag"] is True
    journal = Journal(str(tmp_path / "j"))
    journal.open()
    journal.write(journal.number(claims))
    journal.close(keep=None)
    again = Journal(str(tmp_path / "j"))
    assert [c.exchange for c in again.open()] == [claims[0].exchange, claims[1].exchange]
    again.close(keep=None)
    # Ordinary claims keep the plain encoding: no extension values in them.
    plain = decode_exchanges(body.replace(str(value), "1").encode())[0]
    assert msgspec.msgpack.decode(encode_claims([Claim("tr_1", plain, 1)]))[0][2] == msgspec.to_builtins(plain)
