"""Hostile and absurd admin input (issue 8, item 4): every refusal is a 4xx in the documented
JSON shape naming the field, and every value accepted is inside its documented range.

Each case below answered 500 in plain text, or was accepted and silently changed (a cap of
1e-300 dollars stored as 0 micro-dollars), before the ranges were declared.

The cases share one sidecar (the ``admin`` fixture, one per module: starting one per case was
most of this file's CPU, issue 29); a refusal is checked to have created no trial by the list
before and after it. The one test that reads the whole list starts its own.
"""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiohttp import web

from sidecar.api.admin import admin_app
from sidecar.config import MAX_PRICE_PER_MTOK_USD, MAX_TOKENS, load_config
from sidecar.runtime import RUNTIME
from sidecar.trials.create import MAX_CAP_USD, MAX_CASES, MIN_CAP_USD
from tests.harness import CANDIDATE, INCUMBENT, Harness


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def admin(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[httpx.AsyncClient]:
    """The admin client of one sidecar shared by the module's cases."""
    async with Harness(tmp_path_factory.mktemp("admin-input")) as h:
        assert h.admin
        yield h.admin


async def trial_ids(admin: httpx.AsyncClient) -> list[str]:
    r = await admin.get("/v1/trials")
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()["trials"]]


def body(**over: Any) -> dict[str, Any]:
    b: dict[str, Any] = {
        "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE, "spend_cap_usd": 5.0,
    }
    b.update(over)
    return b


def error_of(r: httpx.Response) -> dict[str, Any]:
    assert 400 <= r.status_code < 500, (r.status_code, r.text)
    assert r.headers["content-type"].startswith("application/json"), r.text
    data = r.json()
    assert set(data) == {"error"} and set(data["error"]) == {"code", "message", "field"}, data
    assert isinstance(data["error"]["code"], str) and data["error"]["message"]
    return data["error"]


def price(inp: float, out: float = 1.0) -> dict[str, float]:
    return {"input_per_mtok_usd": inp, "output_per_mtok_usd": out}


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"spend_cap_usd": 1e14}, "$.spend_cap_usd"),
        ({"spend_cap_usd": MAX_CAP_USD * 1.0001}, "$.spend_cap_usd"),
        ({"spend_cap_usd": 1e-300}, "$.spend_cap_usd"),
        ({"candidate_price": price(1e13)}, "$.candidate_price.input_per_mtok_usd"),
        ({"judge_price": price(1.0, 1e13)}, "$.judge_price.output_per_mtok_usd"),
        ({"incumbent_price": price(1e-9)}, "$.incumbent_price.input_per_mtok_usd"),
        ({"expected_cases": 2**63}, "$.expected_cases"),
        ({"expected_cases": 2**63 - 1}, "$.expected_cases"),
        ({"min_cases": 2**63}, "$.min_cases"),
        ({"max_tokens": 2**63}, "$.max_tokens"),
        ({"max_tokens": 2**63 - 1}, "$.max_tokens"),
        ({"max_tokens": 2**64 + 1}, "$.max_tokens"),
        ({"judge": {"max_tokens": 2**63 - 1}}, "$.judge.max_tokens"),
        ({"judge": {"temperature": 1e300}}, "$.judge.temperature"),
        ({"judge": {"rubric": "no-such-rubric"}}, "$.judge.rubric"),
        ({"tolerance": 1e-300}, "$.tolerance"),
        ({"team": "team-a\n"}, "$.team"),
        ({"team": "team-a "}, "$.team"),
        ({"candidate_model": "a\x00b"}, "$.candidate_model"),
        ({"route": "x" * 257}, "$.route"),
    ],
)
async def test_values_outside_their_documented_range_are_refused_naming_the_field(
    admin: httpx.AsyncClient, over: dict[str, Any], field: str
) -> None:
    before = await trial_ids(admin)
    r = await admin.post("/v1/trials", json=body(**over))
    err = error_of(r)
    assert (r.status_code, err["code"], err["field"]) == (400, "invalid_request", field), err
    assert await trial_ids(admin) == before


async def test_values_at_the_documented_bounds_are_accepted_as_sent(admin: httpx.AsyncClient) -> None:
    r = await admin.post("/v1/trials", json=body(
        spend_cap_usd=MIN_CAP_USD, expected_cases=MAX_CASES, min_cases=MAX_CASES, max_tokens=MAX_TOKENS,
        tolerance=0.001, judge={"max_tokens": MAX_TOKENS, "temperature": 2.0},
        candidate_price=price(MAX_PRICE_PER_MTOK_USD, 0.000001), judge_price=price(0.0, 0.0),
    ))
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["spend"]["cap_micros"] == 1  # one micro-dollar, not rounded away to nothing
    assert t["verdict"]["tolerance"] == 0.001
    r = await admin.post("/v1/trials", json=body(spend_cap_usd=MAX_CAP_USD))
    assert r.status_code == 201, r.text
    assert r.json()["spend"]["cap_micros"] == 1_000_000_000_000


@pytest.mark.parametrize(
    "value", ["clé".encode(), b"cl\xe9", b"tab\there", b"", b"k" * 256], ids=["utf8", "latin1", "control", "empty", "long"]
)
async def test_a_bad_idempotency_key_is_400_naming_the_header(admin: httpx.AsyncClient, value: bytes) -> None:
    before = await trial_ids(admin)
    r = await admin.post("/v1/trials", json=body(), headers={"Idempotency-Key": value})
    err = error_of(r)
    assert (r.status_code, err["field"]) == (400, "Idempotency-Key"), err
    assert await trial_ids(admin) == before


async def test_two_idempotency_keys_are_400(admin: httpx.AsyncClient) -> None:
    headers = httpx.Headers([("Idempotency-Key", "a"), ("Idempotency-Key", "b")])
    r = await admin.post("/v1/trials", json=body(), headers=headers)
    assert error_of(r)["field"] == "Idempotency-Key"


@pytest.mark.parametrize(
    ("encoding", "content"),
    [
        ("gzip", b'{"team": "x"}'),  # the reproduction: a plain body labelled gzip
        ("gzip", gzip.compress(b'{"team": "x"}')),
        ("deflate", b"plain"),
        ("br", b"plain"),
        ("zstd", b"plain"),
        ("x-unheard-of", b"plain"),
    ],
    ids=["gzip-on-plain", "gzip", "deflate", "br", "zstd", "unknown"],
)
async def test_a_content_encoding_is_415_json_naming_the_header(
    admin: httpx.AsyncClient, encoding: str, content: bytes
) -> None:
    r = await admin.post("/v1/trials", content=content,
                         headers={"Content-Encoding": encoding, "Content-Type": "application/json"})
    err = error_of(r)
    assert (r.status_code, err["code"], err["field"]) == (415, "unsupported_content_encoding", "Content-Encoding")
    # An identity encoding is no encoding at all.
    r = await admin.post("/v1/trials", json=body(), headers={"Content-Encoding": "identity"})
    assert r.status_code == 201, r.text


async def test_an_expectation_other_than_100_continue_is_417_json(admin: httpx.AsyncClient) -> None:
    """aiohttp answers an unknown ``Expect`` in plain text before any middleware; found by the fuzz."""
    for path in ("/v1/trials", "/v1/trials/tr_nope", "/nowhere"):
        r = await admin.post(path, json=body(), headers={"Expect": "k-1"})
        err = error_of(r)
        assert (r.status_code, err["code"], err["field"]) == (417, "expectation_failed", "Expect"), (path, err)
    r = await admin.post("/v1/trials", json=body(), headers={"Expect": "100-continue"})
    assert r.status_code == 201, r.text


async def test_a_wrong_method_is_405_json_with_allow(admin: httpx.AsyncClient) -> None:
    r = await admin.post("/v1/live")
    assert error_of(r)["code"] == "method_not_allowed" and r.status_code == 405
    assert set(r.headers["Allow"].split(",")) == {"GET", "HEAD"}
    r = await admin.delete("/v1/trials/tr_1")
    assert r.status_code == 405 and set(r.headers["Allow"].split(",")) == {"GET", "HEAD"}
    assert error_of(await admin.get("/v1/nowhere"))["code"] == "not_found"
    assert (await admin.head("/healthz")).status_code == 200


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=bogus", "status"),
        ("status=", "status"),
        ("status=running&status=stopped", "status"),
        ("team=", "team"),
        ("team=a%0Ab", "team"),
        ("staus=running", "staus"),
    ],
)
async def test_a_bad_list_filter_is_400_naming_the_parameter(admin: httpx.AsyncClient, query: str, field: str) -> None:
    r = await admin.get(f"/v1/trials?{query}")
    err = error_of(r)
    assert (r.status_code, err["field"]) == (400, field), err


async def test_list_filters_by_status_and_team(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.admin
        a = await h.create_trial()
        b = await h.create_trial(team="team-b")
        await h.admin.post(f"/v1/trials/{b['id']}/stop")

        def ids(r: httpx.Response) -> list[str]:
            assert r.status_code == 200, r.text
            return [t["id"] for t in r.json()["trials"]]

        assert ids(await h.admin.get("/v1/trials", params={"status": "running"})) == [a["id"]]
        assert ids(await h.admin.get("/v1/trials", params={"status": "stopped"})) == [b["id"]]
        assert ids(await h.admin.get("/v1/trials", params={"team": "team-b"})) == [b["id"]]
        assert ids(await h.admin.get("/v1/trials", params={"team": "team-b", "status": "running"})) == []
        assert ids(await h.admin.get("/v1/trials", params={"status": "cap_reached"})) == []


async def test_a_path_that_walks_out_of_the_trial_is_a_404_for_that_id(admin: httpx.AsyncClient) -> None:
    r = await admin.get("/v1/trials/..%2F..%2Fv1%2Flive")
    err = error_of(r)
    assert (r.status_code, err["code"]) == (404, "not_found")
    assert "../../v1/live" in err["message"]


async def test_the_openapi_document_shows_the_ranges(admin: httpx.AsyncClient) -> None:
    doc = (await admin.get("/openapi.json")).json()
    create = doc["components"]["schemas"]["TrialCreate"]["properties"]
    assert (create["spend_cap_usd"]["minimum"], create["spend_cap_usd"]["maximum"]) == (MIN_CAP_USD, MAX_CAP_USD)
    assert create["expected_cases"]["maximum"] == MAX_CASES
    assert create["tolerance"]["minimum"] == 0.001 and create["tolerance"]["exclusiveMaximum"] == 0.5
    assert create["team"]["maxLength"] == 256 and "pattern" in create["team"]
    price_in = doc["components"]["schemas"]["PriceIn"]["properties"]["input_per_mtok_usd"]
    assert price_in["maximum"] == MAX_PRICE_PER_MTOK_USD
    post = doc["paths"]["/v1/trials"]["post"]
    (key,) = [p for p in post["parameters"] if p["name"] == "Idempotency-Key"]
    assert (key["schema"]["minLength"], key["schema"]["maxLength"]) == (1, 255)
    assert "415" in post["responses"]
    listing = doc["paths"]["/v1/trials"]["get"]
    (status,) = [p for p in listing["parameters"] if p["name"] == "status"]
    assert set(status["schema"]["enum"]) == {"running", "cap_reached", "stopped", "posture_changed", "starter_unauthorized",
                                             "adopted", "decided"}
    assert "400" in listing["responses"]


# -- a defect still answers in the documented shape ----------------------------------------------


class _BrokenStore:
    async def list_trials(self, **_kw: Any) -> list[Any]:
        raise RuntimeError("a defect in the store")


class _BrokenRuntime:
    store = _BrokenStore()
    config = load_config(None, {})  # the defaults
    price_book = None
    # Each service is handed its family's context; the trials' reads the broken store.
    contexts = SimpleNamespace(trials=SimpleNamespace(store=store), posture=None, compare=None, watches=None,
                               promotion=None)


async def test_an_unexpected_error_is_a_500_in_the_json_shape() -> None:
    """The admin app over a runtime whose store fails unexpectedly (the catch-all, not a mock
    of the handler: a real app on a real loopback listener)."""
    app = admin_app(_BrokenRuntime())
    assert isinstance(app[RUNTIME], _BrokenRuntime)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as c:
            r = await c.get("/v1/trials")
            assert r.status_code == 500
            assert r.headers["content-type"].startswith("application/json")
            assert r.json() == {"error": {
                "code": "internal_error", "message": "the sidecar failed on this request; its log has the details",
                "field": None,
            }}
    finally:
        await runner.cleanup()


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        # Invalid UTF-8 in a key (msgspec would read it as an unknown field) and in a value.
        (b'{"team": "team-a", "incumbent_model": "m", "candidate_model": "c", "spend_cap_usd": 5, "ro\xffute": "x"}',
         '$["ro\\xffute"]'),
        (b'{"team": "team-\xff", "incumbent_model": "m", "candidate_model": "c", "spend_cap_usd": 5}', "$.team"),
        # A NaN literal and malformed JSON are named where they are (issue 21, item 6).
        (b'{"team": "team-a", "incumbent_model": "m", "candidate_model": "c", "spend_cap_usd": NaN}',
         "$.spend_cap_usd"),
        (b'{"team": "team-a", "incumbent_model": "m", "candidate_model": "c", "spend_cap_usd": 5,,}', "$"),
    ],
)
async def test_a_body_that_is_not_json_is_400_naming_where(admin: httpx.AsyncClient, raw: bytes, field: str) -> None:
    r = await admin.post("/v1/trials", content=raw, headers={"Content-Type": "application/json"})
    err = error_of(r)
    assert (r.status_code, err["code"]) == (400, "invalid_request"), err
    assert err["field"] is not None and err["field"].startswith(field[:3]), err
    assert err["field"] == field or field == "$", err
