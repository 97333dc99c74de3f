"""The tap under hostile input: values out of range, deep nesting, compressed bodies.

Every refusal is the documented JSON shape naming the field; nothing refused
reaches the engine; figures that would poison the paired view are excluded and
counted. A real sidecar beside a real fake provider on loopback (``tests.harness``).

The refusal cases that send nothing the tap accepts share one sidecar (the ``shared`` fixture,
one per module: a sidecar per case was most of their CPU, issue 29); each creates its own
trial and checks that the counters did not move rather than that they are zero. Cases that
send accepted exchanges, or need their own settings, start their own.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.harness import CANDIDATE, Harness, exchange
from tests.sidecar.api.test_tap import NDJSON, error_of, ndjson, post


pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    """One sidecar for the module's cases that only send what the tap refuses."""
    async with Harness(tmp_path_factory.mktemp("tap-input")) as h:
        yield h


def nested(depth: int, leaf: str = '"x"') -> str:
    return "[" * depth + leaf + "]" * depth


def splice(ex: dict[str, Any], marker: str, raw: str) -> bytes:
    """``ex`` as JSON with the string ``marker`` replaced by raw JSON text (json.dumps cannot nest 1,000 deep)."""
    text = json.dumps(ex)
    assert text.count(json.dumps(marker)) == 1
    return text.replace(json.dumps(marker), raw).encode()


async def metric_lines(h: Harness, name: str) -> dict[str, float]:
    assert h.admin
    r = await h.admin.get("/metrics")
    assert r.status_code == 200
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in r.text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    }


# -- request values the engine relies on: the batch is refused, naming the field -----------------------


@pytest.mark.parametrize("value", ["abc", -5, 0, [5], {"n": 5}, 10**30, 1e300, 64.5, True, 2**31])
async def test_an_unusable_max_tokens_refuses_the_batch_naming_the_field(shared: Harness, value: Any) -> None:
    h = shared
    received, called = h.runtime.counters["exchanges_received"], h.fake.calls[CANDIDATE]
    trial = await h.create_trial(sample_rate=1.0)
    batch = [exchange(i) for i in range(3)]
    bad = exchange(3)
    bad["request"]["params"]["max_tokens"] = value
    r = await post(h, json.dumps(batch + [bad]).encode())
    assert r.status_code == 400, (value, r.text)
    err = error_of(r)
    assert err["code"] == "invalid_exchange"
    assert err["field"] == "$[3].request.params.max_tokens"
    assert "max_tokens" in err["message"]
    # max_completion_tokens, the newer name, is held to the same rule; in NDJSON the line is named.
    alt = exchange(4)
    alt["request"]["params"] = {"max_completion_tokens": value}
    r = await post(h, ndjson([exchange(5), alt]), NDJSON)
    assert r.status_code == 400, (value, r.text)
    assert error_of(r)["field"] == "line 2: $.request.params.max_completion_tokens"
    # Nothing of a refused batch was counted or run.
    view = await h.trial(trial["id"])
    assert view["funnel"]["total"] == 0
    assert h.runtime.counters["exchanges_received"] == received
    assert h.fake.calls[CANDIDATE] == called


async def test_max_tokens_in_range_or_null_is_accepted(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        batch = [exchange(i) for i in range(2)]
        batch[0]["request"]["params"]["max_tokens"] = None  # the trial's default applies
        batch[1]["request"]["params"] = {"max_completion_tokens": 1}
        assert await h.send(batch) == {"accepted": 2, "sampled": 2, "shed": 0}
        await h.settle(trial["id"], 2)
        # The largest accepted: the tap takes it, the cap refuses the case (its worst case
        # exceeds the cap) and the trial runs on.
        big = exchange(2)
        big["request"]["params"]["max_tokens"] = 2**31 - 1
        assert await h.send([big]) == {"accepted": 1, "sampled": 1, "shed": 0}
        view = await h.settle(trial["id"], 3)
        outcomes = view["funnel"]["outcomes"]
        assert outcomes["judged"] == 2 and outcomes["cap_reached"] == 1, outcomes
        assert view["status"] == "running"


async def test_an_empty_exchange_id_is_refused(shared: Harness) -> None:
    h = shared
    trial = await h.create_trial(sample_rate=1.0)
    r = await post(h, json.dumps([exchange(0), exchange(1, exchange_id="")]).encode())
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["field"] == "$[1].exchange_id"
    assert (await h.trial(trial["id"]))["funnel"]["total"] == 0


# -- nesting -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [65, 980, 1_000, 5_000])
async def test_deeply_nested_content_is_refused_not_run(shared: Harness, depth: int) -> None:
    h = shared
    called = h.fake.calls[CANDIDATE]
    trial = await h.create_trial(sample_rate=1.0)
    ex = exchange(1)
    ex["request"]["messages"] = [{"role": "user", "content": "DEEP"}]
    body = b"[" + json.dumps(exchange(0)).encode() + b"," + splice(ex, "DEEP", nested(depth)) + b"]"
    r = await post(h, body)
    assert r.status_code == 400, r.text[:300]
    err = error_of(r)
    assert err["code"] == "invalid_exchange"
    assert err["field"] in ("$[1].request.messages[0]", "$"), err
    assert (await h.trial(trial["id"]))["funnel"]["total"] == 0
    assert h.fake.calls[CANDIDATE] == called


async def test_nesting_within_the_bound_is_accepted(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        # The exchange is level 1, request 2, messages 3, the message 4, its content 5:
        # content of 60 nested arrays reaches level 64, the most there may be.
        ex = exchange(2)
        ex["request"]["messages"] = [{"role": "user", "content": "DEEP"}]
        r = await post(h, splice(ex, "DEEP", nested(60)))
        assert r.status_code == 202, r.text
        r = await post(h, splice(exchange(3), "question 3", nested(61)))
        assert r.status_code == 400, r.text
        assert error_of(r)["field"] == "$.request.messages[0]"
        view = await h.settle(trial["id"], 1)
        assert view["funnel"]["outcomes"]["judged"] == 1


async def test_deep_nesting_in_params_is_refused_naming_the_parameter(shared: Harness) -> None:
    ex = exchange(1)
    ex["request"]["params"]["tools"] = "DEEP"
    r = await post(shared, splice(ex, "DEEP", nested(200)))
    assert r.status_code == 400, r.text
    assert error_of(r)["field"] == "$.request.params.tools"


@pytest.mark.parametrize("depth", [1_000, 3_000, 100_000])
async def test_nesting_anywhere_even_in_ignored_fields_is_400_json(tmp_path: Path, depth: int) -> None:
    async with Harness(tmp_path) as h:
        await h.create_trial(sample_rate=1.0)
        for shape in ("array", "object", "ndjson"):
            ex = exchange(1, gateway_trace="DEEP")  # an unknown field: ignored when it decodes
            one = splice(ex, "DEEP", nested(depth))
            body, ctype = {
                "array": (b"[" + one + b"]", "application/json"),
                "object": (one, "application/json"),
                "ndjson": (json.dumps(exchange(0)).encode() + b"\n" + one + b"\n", NDJSON),
            }[shape]
            r = await post(h, body, ctype)
            assert r.status_code == 400, (shape, r.status_code, r.text[:200])
            err = error_of(r)
            assert err["code"] == "invalid_exchange"
            assert err["field"] == ("line 2: $" if shape == "ndjson" else "$"), (shape, err)
        # A bare deep array, and a deep value at the root of the NDJSON sniffing path.
        for body in (nested(depth).encode(), (nested(depth) + "\n" + nested(depth)).encode()):
            r = await post(h, body)
            assert r.status_code == 400, r.text[:200]
            error_of(r)
        assert (await post(h, json.dumps([exchange(9)]).encode())).status_code == 202  # still serving


# -- the gateway's figures: excluded from the paired view and counted --------------------------------


async def test_nonsense_gateway_figures_are_excluded_and_counted(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        sane = [exchange(i) for i in range(4)]
        for ex in sane:
            ex["response"]["usage"]["cost_usd"] = 0.002
        bad: list[dict[str, Any]] = [exchange(10 + i) for i in range(7)]
        bad[0]["response"]["usage"]["cost_usd"] = -5
        bad[1]["response"]["usage"]["cost_usd"] = 1e300
        bad[2]["latency_ms"] = -1e9
        bad[3]["latency_ms"] = 1e12
        bad[4]["response"]["usage"]["input_tokens"] = 10**30
        bad[5]["response"]["usage"] = {"prompt_tokens": -3, "completion_tokens": 10**12}
        bad[6]["latency_ms"] = 1e308
        bad[6]["response"]["usage"]["cost_usd"] = 1e308
        reply = await h.send(sane + bad)
        assert reply == {"accepted": 11, "sampled": 11, "shed": 0}  # the exchanges themselves are good evidence
        counted = await metric_lines(h, "shadowtrial_tap_figures_excluded_total")
        assert counted == {
            'shadowtrial_tap_figures_excluded_total{field="cost_usd"}': 3.0,
            'shadowtrial_tap_figures_excluded_total{field="latency_ms"}': 3.0,
            'shadowtrial_tap_figures_excluded_total{field="input_tokens"}': 2.0,
            'shadowtrial_tap_figures_excluded_total{field="output_tokens"}': 1.0,
        }, counted
        view = await h.settle(trial["id"], 11)
        assert view["funnel"]["outcomes"]["judged"] == 11, view["funnel"]
        paired = view["paired"]
        # Latency: only the served latencies that make sense (250 ms each) enter the median.
        assert paired["latency_cases"] == 8, paired
        assert paired["incumbent_latency_ms_p50"] == 250.0
        # Cost: the excluded costs fall back to list price x tokens where the tokens are sane,
        # and nothing negative or astronomical enters the sums.
        assert 0 < paired["incumbent_cost_micros"] < 11 * 10_000, paired
        assert paired["cost_ratio"] is not None and 0 < paired["cost_ratio"] < 100, paired


# -- Content-Encoding ---------------------------------------------------------------------------------


async def test_gzip_bodies_are_decoded_within_the_size_bound(tmp_path: Path) -> None:
    async with Harness(tmp_path, max_body_bytes=64 * 1024) as h:
        trial = await h.create_trial(sample_rate=1.0)
        plain = json.dumps([exchange(i) for i in range(3)]).encode()
        # A plain body labelled gzip: 400, not 500.
        r = await post(h, plain, **{"Content-Encoding": "gzip"})
        assert r.status_code == 400, r.text
        assert error_of(r)["code"] == "invalid_encoding"
        # A truncated gzip body.
        r = await post(h, gzip.compress(plain)[:-12], **{"Content-Encoding": "gzip"})
        assert r.status_code == 400, r.text
        error_of(r)
        # A real gzip body is taken.
        r = await post(h, gzip.compress(plain), **{"Content-Encoding": "gzip"})
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 3, "sampled": 3, "shed": 0}
        # A small body that inflates past max_body_bytes: 413 without inflating it all.
        bomb = gzip.compress(b" " * (32 * 1024 * 1024))
        assert len(bomb) < 64 * 1024
        r = await post(h, bomb, **{"Content-Encoding": "gzip"})
        assert r.status_code == 413, r.text
        assert error_of(r)["code"] == "body_too_large"
        # Other codings are refused with 415, naming the one taken.
        for coding in ("br", "deflate", "zstd", "gzip, gzip", "compress"):
            r = await post(h, plain, **{"Content-Encoding": coding})
            assert r.status_code == 415, (coding, r.text)
            assert error_of(r)["code"] == "unsupported_encoding"
            assert r.headers["Accept-Encoding"] == "gzip"
        # identity is no encoding.
        r = await post(h, json.dumps(exchange(7)).encode(), **{"Content-Encoding": "identity"})
        assert r.status_code == 202, r.text
        view = await h.settle(trial["id"], 4)
        assert view["funnel"]["total"] == 4


async def test_other_paths_and_methods_answer_json(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.tap
        r = await h.tap.get("/v1/exchanges")
        assert r.status_code == 405
        assert error_of(r)["code"] == "method_not_allowed"
        r = await h.tap.post("/v1/nowhere", content=b"{}")
        assert r.status_code == 404
        assert error_of(r)["code"] == "not_found"


async def test_a_non_ascii_authorization_header_is_401_json(tmp_path: Path) -> None:
    env = {"TAP_SHARED_TOKEN": "s3cret-tap-token"}
    async with Harness(tmp_path, tap_token_env="TAP_SHARED_TOKEN", environ=env) as h:
        body = json.dumps([exchange(1)]).encode()
        for raw in ("Bearer s3cret-tap-tokén".encode(), b"Bearer \xff\xfe", "Bearer ünïcødé".encode("latin-1")):
            assert h.tap
            r = await h.tap.post("/v1/exchanges", content=body, headers=httpx.Headers([(b"Authorization", raw)]))
            assert r.status_code == 401, (raw, r.text)
            assert error_of(r)["code"] == "unauthorized"
        assert h.runtime.counters["exchanges_received"] == 0
