"""Invalid UTF-8 in a tap body is a 400 naming where (issue 21, item 6).

It used to be accepted when it sat in an object key or an ignored field: msgspec checks the
UTF-8 of the strings it keeps only, so a corrupted ``params`` key read as an unknown field
and the exchange was taken (202) without its parameters.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.ingest.wire import DecodeError, decode_batch
from tests.harness import Harness, exchange

GOOD = json.dumps([exchange(1)]).encode()


def refusal(body: bytes, content_type: str = "application/json") -> DecodeError:
    with pytest.raises(DecodeError) as caught:
        decode_batch(body, content_type)
    return caught.value


def test_every_single_byte_flip_inside_a_string_is_refused_naming_where() -> None:
    """0xff written over each byte of each key and string value of a good exchange: every one
    is refused, and the path names the key or the value the byte is in."""
    doc = json.loads(GOOD)[0]
    flips = 0
    at = 0
    while (start := GOOD.find(b'"', at)) >= 0:
        end = GOOD.index(b'"', start + 1)
        token = GOOD[start + 1 : end]
        is_key = GOOD[end + 1 : end + 2] == b":"
        for i in range(len(token)):
            body = GOOD[: start + 1 + i] + b"\xff" + GOOD[start + 2 + i :]
            error = refusal(body)
            assert error.path is not None and error.path.startswith("$[0]"), (body, str(error), error.path)
            assert ("in an object key" in str(error)) == is_key, (body, str(error))
            assert f"(byte {start + 1 + i})" in str(error)
            flips += 1
        at = end + 1
    assert flips > 100, flips
    assert doc["request"]["params"] == {"max_tokens": 64}  # what the params flip used to lose


@pytest.mark.parametrize(
    ("body", "path"),
    [
        (GOOD.replace(b'"params"', b'"par\xffams"'), '$[0].request["par\\xffams"]'),
        (GOOD.replace(b'"max_tokens"', b'"max_\xc0\xafokens"'), '$[0].request.params["max_\\xc0\\xafokens"]'),
        (GOOD.replace(b'"gateway": "gw-1"', b'"gateway": "gw-1", "extra": {"k\xed\xa0\x80": 1}'),
         '$[0].extra["k\\xed\\xa0\\x80"]'),
        (GOOD.replace(b'"gateway": "gw-1"', b'"gateway": "gw-1", "extra": [1, "\xe2\x82"]'), "$[0].extra[1]"),
        (GOOD.replace(b'"question 1"', b'"question \x80"'), "$[0].request.messages[0].content"),
    ],
)
def test_invalid_utf8_in_keys_and_ignored_fields_is_refused(body: bytes, path: str) -> None:
    error = refusal(body)
    assert error.path == path and "invalid UTF-8" in str(error)


def test_ndjson_names_the_line() -> None:
    line = json.dumps(exchange(2)).encode()
    body = line + b"\n" + line.replace(b'"team"', b'"te\xffam"') + b"\n"
    for content_type in ("application/x-ndjson", "application/json"):
        error = refusal(body, content_type)
        assert error.path == 'line 2: $["te\\xffam"]', (content_type, error.path)


@pytest.mark.parametrize(
    ("raw", "path"),
    [
        (b"NaN", "$[0].latency_ms"),
        (b"-Infinity", "$[0].latency_ms"),
        (b'"\\ud800"', "$[0].latency_ms"),
    ],
)
def test_malformed_values_name_their_field(raw: bytes, path: str) -> None:
    error = refusal(GOOD.replace(b"250.0", raw))
    assert error.path == path, str(error)


def test_half_a_surrogate_pair_in_an_ignored_field_names_it() -> None:
    error = refusal(GOOD.replace(b'"gateway": "gw-1"', b'"gateway": "gw-1", "extra": "\\udc00"'))
    assert error.path == "$[0].extra" and "surrogate" in str(error)


def test_a_number_out_of_range_in_params_names_the_parameter() -> None:
    error = refusal(GOOD.replace(b'"max_tokens": 64', b'"max_tokens": 64, "seed": 1e999'))
    assert error.path == "$[0].request.params.seed"


def test_valid_utf8_passes_untouched() -> None:
    body = GOOD.replace(b"question 1", "quéstion ① 🦜 \u202e".encode())
    ((where, ex),) = decode_batch(body)
    assert where == "$[0]" and ex.request.messages[0]["content"] == "quéstion ① 🦜 \u202e"


async def test_the_tap_refuses_a_corrupted_params_key_with_400_naming_it(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.tap
        trial = await h.create_trial()
        r = await h.tap.post("/v1/exchanges", content=GOOD.replace(b'"params"', b'"par\xffams"'),
                             headers={"Content-Type": "application/json"})
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_exchange" and error["field"] == '$[0].request["par\\xffams"]', error
        assert error["message"].startswith("invalid UTF-8 in an object key (byte "), error
        # The webhook route names where too.
        r = await h.tap.post("/v1/integrations/litellm?team=team-a", content=b'[{"k\xff": 1}]',
                             headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["field"] == '$[0]["k\\xff"]', r.text
        assert (await h.send([exchange(1)]))["sampled"] == 1
        view = await h.settle(trial["id"], 1)
        assert view["funnel"]["total"] == 1


@pytest.mark.parametrize("depth", [100, 5_000, 50_000])
def test_invalid_utf8_under_deep_nesting_is_a_refusal_not_a_crash(depth: int) -> None:
    """Found by the fuzz: the UTF-8 check ran outside the decoder's recursion guard (a 500)."""
    error = refusal(b"[" * depth + b'{"a": "\xff"}' + b"]" * depth + b"\n{}")
    assert error.path is not None and "$[0][0]" in error.path and "invalid UTF-8" in str(error)


def test_a_long_batch_is_checked_piece_by_piece_to_the_same_verdict() -> None:
    """Bodies past one validation piece (sidecar.ingest.wire._UTF8_PIECE): a 3-byte character
    in an ignored field at every offset around the first piece boundaries is accepted, and a
    bad byte there (or in the last exchange) is refused at its byte, as a whole-body check
    would."""
    from sidecar.ingest import wire

    exchanges = [exchange(i) for i in range(120)]
    body = json.dumps(exchanges, ensure_ascii=False).encode()
    assert len(body) > 2 * wire._UTF8_PIECE
    ok = 0
    for boundary in (wire._UTF8_PIECE, 2 * wire._UTF8_PIECE):
        cut = body.find(b'"', boundary)  # where a piece ends: the next quote
        for shift in range(-3, 4):
            at = cut + shift
            good = body[:at] + "€".encode() + body[at:]
            if good.decode("utf-8", "replace").count("\ufffd") == 0:
                try:
                    decode_batch(good)
                except DecodeError as error:
                    assert "UTF-8" not in str(error), (shift, str(error))
                else:
                    ok += 1
            bad = body[:at] + b"\xe2\x82" + body[at:]
            try:
                bad.decode("utf-8")
            except UnicodeDecodeError as expected:
                error = refusal(bad)
                assert f"(byte {expected.start})" in str(error), (shift, str(error))
    assert ok > 0
    last = body.rfind(b"question 119")
    error = refusal(body[:last] + b"\xff" + body[last + 1 :])
    assert error.path == "$[119].request.messages[0].content"
