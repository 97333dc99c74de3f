"""The tap, over real HTTP: what it accepts, what it refuses, and that it never waits.

A real sidecar beside a real fake provider on loopback (``tests.harness``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx

from policies.sampling import is_sampled
from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for

NDJSON = "application/x-ndjson"


def ndjson(items: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(x).encode() + b"\n" for x in items)


async def post(h: Harness, body: bytes, content_type: str = "application/json", **headers: str) -> httpx.Response:
    assert h.tap
    return await h.tap.post("/v1/exchanges", content=body, headers={"Content-Type": content_type, **headers})


def error_of(r: httpx.Response) -> dict[str, Any]:
    assert r.headers["content-type"].startswith("application/json"), r.text
    body = r.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    return body["error"]


# -- what is accepted --------------------------------------------------------------------------------


async def test_single_object_array_and_ndjson_are_accepted(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        await h.create_trial(sample_rate=1.0)
        # One exchange, as a bare object.
        r = await post(h, json.dumps(exchange(0)).encode())
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 1, "sampled": 1, "shed": 0}
        # A JSON array.
        r = await post(h, json.dumps([exchange(i) for i in range(1, 4)]).encode())
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 3, "sampled": 3, "shed": 0}
        # NDJSON with its content type (a blank line is tolerated).
        body = ndjson([exchange(i) for i in range(4, 7)]) + b"\n"
        r = await post(h, body, NDJSON)
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 3, "sampled": 3, "shed": 0}
        # NDJSON sent as application/json (a gateway that does not set the header).
        r = await post(h, ndjson([exchange(i) for i in range(7, 9)]))
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 2, "sampled": 2, "shed": 0}
        # NDJSON with CRLF line ends and no trailing newline.
        body = b"\r\n".join(json.dumps(exchange(i)).encode() for i in range(9, 11))
        r = await post(h, body, NDJSON)
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 2, "sampled": 2, "shed": 0}
        assert h.runtime.counters["exchanges_received"] == 11


async def test_exchanges_matching_no_trial_are_accepted_and_not_sampled(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        reply = await h.send([exchange(i) for i in range(5)])  # no trial exists
        assert reply == {"accepted": 5, "sampled": 0, "shed": 0}
        assert h.fake.calls[CANDIDATE] == 0


async def test_unknown_fields_from_a_newer_gateway_are_ignored(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        ex = exchange(1, gateway_version="9.9", trace={"span": "abc", "sampled": True})
        ex["request"]["cache_key"] = "k1"
        ex["response"]["provider"] = {"name": "x", "region": "eu"}
        ex["response"]["usage"]["cached_tokens"] = 3
        r = await post(h, json.dumps([ex]).encode())
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 1, "sampled": 1, "shed": 0}
        view = await h.settle(trial["id"], 1)
        assert view["funnel"]["outcomes"]["judged"] == 1


# -- what is refused ---------------------------------------------------------------------------------


async def test_malformed_json_is_400(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        await h.create_trial(sample_rate=1.0)
        for body in (b'{"exchange_id": "x", ', b"[{]", b"not json at all"):
            r = await post(h, body)
            assert r.status_code == 400, (body, r.text)
            err = error_of(r)
            assert err["code"] == "invalid_exchange"
            assert err["message"]
        assert h.runtime.counters["exchanges_received"] == 0
        assert h.runtime.counters["tap_rejected_malformed"] == 3
        assert h.fake.calls[CANDIDATE] == 0


async def test_wrong_type_deep_inside_names_the_path(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        bad = exchange(1)
        bad["request"]["messages"] = "hello"  # must be a list of message objects
        r = await post(h, json.dumps([exchange(0), bad, exchange(2)]).encode())
        assert r.status_code == 400, r.text
        err = error_of(r)
        assert err["field"] == "$[1].request.messages"
        assert err["message"] == "must be a list, got a string"
        # The whole batch is refused: nothing of it was offered or counted.
        view = await h.trial(trial["id"])
        assert view["funnel"]["total"] == 0

        # A missing required field is named by its own path, at the root and deeper.
        missing = exchange(3)
        del missing["response"]
        r = await post(h, json.dumps(missing).encode())
        assert r.status_code == 400
        err = error_of(r)
        assert err["field"] == "$.response"
        assert "response" in err["message"]
        no_messages = exchange(4)
        del no_messages["request"]["messages"]
        r = await post(h, json.dumps([exchange(0), no_messages]).encode())
        assert r.status_code == 400
        assert error_of(r)["field"] == "$[1].request.messages"

        bad_usage = exchange(5)
        bad_usage["response"]["usage"]["input_tokens"] = "twelve"
        r = await post(h, json.dumps(bad_usage).encode())
        assert r.status_code == 400
        assert error_of(r)["field"] == "$.response.usage.input_tokens"


async def test_ndjson_error_names_the_line(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        await h.create_trial(sample_rate=1.0)
        bad = exchange(2, team=7)
        lines = [exchange(1), bad, exchange(3)]
        for content_type in (NDJSON, "application/json"):
            r = await post(h, ndjson(lines), content_type)
            assert r.status_code == 400, (content_type, r.text)
            err = error_of(r)
            assert err["field"] == "line 2: $.team", content_type
            assert err["message"].startswith("line 2:")
        # A bad first line is named as line 1 even without the NDJSON content type.
        for content_type in (NDJSON, "application/json"):
            r = await post(h, ndjson([bad, exchange(3)]), content_type)
            assert r.status_code == 400, (content_type, r.text)
            assert error_of(r)["field"] == "line 1: $.team", content_type
        # A line that is not JSON at all.
        r = await post(h, json.dumps(exchange(1)).encode() + b"\n{oops\n", NDJSON)
        assert r.status_code == 400
        assert error_of(r)["field"] == "line 2: $"
        assert h.fake.calls[CANDIDATE] == 0


async def test_a_pretty_printed_single_exchange_is_not_mistaken_for_ndjson(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        await h.create_trial(sample_rate=1.0)
        r = await post(h, json.dumps(exchange(1), indent=2).encode())
        assert r.status_code == 202, r.text
        assert r.json()["accepted"] == 1
        bad = exchange(2, team=7)
        r = await post(h, json.dumps(bad, indent=2).encode())
        assert r.status_code == 400
        assert error_of(r)["field"] == "$.team"


async def test_empty_body_is_400(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        for body, content_type in ((b"", "application/json"), (b"  \n\t ", "application/json"), (b"\n\n", NDJSON)):
            r = await post(h, body, content_type)
            assert r.status_code == 400, (body, r.text)
            assert error_of(r)["code"] == "invalid_exchange"


async def test_oversized_body_is_413(tmp_path: Path) -> None:
    async with Harness(tmp_path, max_body_bytes=4096) as h:
        trial = await h.create_trial(sample_rate=1.0)
        small = json.dumps([exchange(0)]).encode()
        assert len(small) < 4096
        r = await post(h, small)
        assert r.status_code == 202, r.text

        big = json.dumps([exchange(i, content="x" * 500) for i in range(1, 40)]).encode()
        assert len(big) > 4096
        r = await post(h, big)
        assert r.status_code == 413, r.text
        err = error_of(r)
        assert err["code"] == "body_too_large"
        assert "4096" in err["message"]
        assert h.runtime.counters["tap_rejected_too_large"] == 1
        # Nothing of the refused body was counted; the tap keeps serving afterwards.
        r = await post(h, json.dumps([exchange(100)]).encode())
        assert r.status_code == 202, r.text
        view = await h.settle(trial["id"], 2)
        assert view["funnel"]["total"] == 2
        assert h.runtime.counters["exchanges_received"] == 2


# -- what happens to accepted exchanges --------------------------------------------------------------


async def test_redacted_exchanges_are_never_sampled(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        batch = [exchange(i, redacted=True) for i in range(6)] + [exchange(100 + i) for i in range(2)]
        reply = await h.send(batch)
        assert reply == {"accepted": 8, "sampled": 2, "shed": 0}
        view = await h.settle(trial["id"], 8)
        outcomes = view["funnel"]["outcomes"]
        assert outcomes["skipped_redacted"] == 6
        assert outcomes["judged"] == 2
        assert view["funnel"]["total"] == 8
        cand = [q for q in h.fake.requests if q.model == CANDIDATE]
        assert sorted(q.body["messages"][0]["content"] for q in cand) == ["question 100", "question 101"]


async def test_sampling_matches_the_published_function_exactly(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        rate = 0.3
        trial = await h.create_trial(sample_rate=rate)
        ids = [f"gw-req-{i:04d}" for i in range(200)]
        expected = {x for x in ids if is_sampled(trial["id"], x, rate)}
        assert 0 < len(expected) < len(ids)
        batch = [exchange(i, exchange_id=x) for i, x in enumerate(ids)]
        reply = await h.send(batch)
        assert reply == {"accepted": 200, "sampled": len(expected), "shed": 0}
        view = await h.settle(trial["id"], 200)
        assert view["funnel"]["outcomes"]["not_sampled"] == 200 - len(expected)
        # Exactly the sampled exchanges reached the candidate, identified by their messages.
        dispatched = {q.body["messages"][0]["content"] for q in h.fake.requests if q.model == CANDIDATE}
        assert dispatched == {f"question {ids.index(x)}" for x in expected}


async def test_a_full_intake_queue_sheds_while_the_tap_answers_at_once(tmp_path: Path) -> None:
    """Queue of 2, one worker, a candidate that takes 2 s: the tap replies while the engine is blocked."""
    models = {
        INCUMBENT: FakeModel(),
        CANDIDATE: FakeModel(quality=0.6, latency_ms=(2000.0, 2000.0)),
        JUDGE: FakeModel(judge=True),
    }
    # A short drain: the queued cases are not worth waiting for at shutdown (counted shed_stopped).
    async with Harness(tmp_path, models=models, workers=1, queue_size=2, drain=0.2) as h:
        rt = h.runtime
        trial = await h.create_trial(sample_rate=1.0)
        assert await h.send([exchange(0)]) == {"accepted": 1, "sampled": 1, "shed": 0}

        async def candidate_called() -> bool:
            return h.fake.calls[CANDIDATE] == 1

        await wait_for(candidate_called, timeout=10, what="the first candidate call")
        assert rt.engine.in_flight == 1 and rt.handoff.depth == 0

        # The worker is stuck on the candidate: two jobs fit in the queue, the rest are shed.
        reply = await h.send([exchange(i) for i in range(1, 6)])
        assert reply == {"accepted": 5, "sampled": 2, "shed": 3}
        reply = await h.send([exchange(i) for i in range(6, 9)])
        assert reply == {"accepted": 3, "sampled": 0, "shed": 3}
        # Both replies came back while the first case was still in the candidate's hands.
        assert not rt.progress.is_set(), "a case finished before the tap replied"
        assert rt.engine.in_flight == 1
        assert h.fake.calls[CANDIDATE] == 1

        # The admin API sees the shed counts at once, also while the engine is blocked.
        view = await h.trial(trial["id"])
        assert view["funnel"]["outcomes"]["shed_queue_full"] == 6
        assert rt.counters["cases_shed"] == 6
        assert h.admin
        live = (await h.admin.get("/v1/live")).json()
        assert live["intake"] == {"depth": 2, "capacity": 2, "in_flight": 1}
        assert not rt.progress.is_set()


async def test_tap_token_is_required_when_configured(tmp_path: Path) -> None:
    env = {"TAP_SHARED_TOKEN": "s3cret-tap-token"}
    async with Harness(tmp_path, tap_token_env="TAP_SHARED_TOKEN", environ=env) as h:
        trial = await h.create_trial(sample_rate=1.0)
        body = json.dumps([exchange(1)]).encode()
        r = await post(h, body)
        assert r.status_code == 401
        assert error_of(r)["code"] == "unauthorized"
        assert "s3cret" not in r.text
        for wrong in ("Bearer nope", "Bearer s3cret-tap-token-x", "s3cret-tap-toke", "Basic czNjcmV0"):
            r = await post(h, body, Authorization=wrong)
            assert r.status_code == 401, wrong
        assert h.runtime.counters["exchanges_received"] == 0

        r = await post(h, body, Authorization="Bearer s3cret-tap-token")
        assert r.status_code == 202, r.text
        assert r.json() == {"accepted": 1, "sampled": 1, "shed": 0}
        view = await h.settle(trial["id"], 1)
        assert view["funnel"]["total"] == 1


async def test_tap_auth_takes_exactly_one_bearer_token_in_any_case(tmp_path: Path) -> None:
    env = {"TAP_SHARED_TOKEN": "s3cret-tap-token"}
    async with Harness(tmp_path, tap_token_env="TAP_SHARED_TOKEN", environ=env) as h:
        trial = await h.create_trial(sample_rate=1.0)
        refused = (
            "s3cret-tap-token",  # a bare token, no scheme
            "Bearer  s3cret-tap-token",  # two spaces
            "Bearer\ts3cret-tap-token",
            "Bearer s3cret-tap-token s3cret-tap-token",  # two tokens
            "Bearer s3cret-tap-token extra",
            "Bearers3cret-tap-token",
            "Bearer",
            "Token s3cret-tap-token",
            "Basic s3cret-tap-token",
        )
        for i, value in enumerate(refused):
            r = await post(h, json.dumps([exchange(i)]).encode(), Authorization=value)
            assert r.status_code == 401, (value, r.text)
            assert error_of(r)["code"] == "unauthorized"
            assert r.headers["WWW-Authenticate"] == "Bearer"
        # Two Authorization headers, even both right: refused.
        assert h.tap
        both = httpx.Headers([("Authorization", "Bearer s3cret-tap-token")] * 2)
        r = await h.tap.post("/v1/exchanges", content=json.dumps([exchange(50)]).encode(), headers=both)
        assert r.status_code == 401, r.text
        assert h.runtime.counters["exchanges_received"] == 0
        assert h.runtime.counters["tap_rejected_unauthorized"] == len(refused) + 1

        # The scheme is case-insensitive (RFC 9110); the token is not.
        for i, value in enumerate(("bearer s3cret-tap-token", "BEARER s3cret-tap-token", "BeArEr s3cret-tap-token")):
            r = await post(h, json.dumps([exchange(100 + i)]).encode(), Authorization=value)
            assert r.status_code == 202, (value, r.text)
        r = await post(h, json.dumps([exchange(200)]).encode(), Authorization="Bearer S3CRET-TAP-TOKEN")
        assert r.status_code == 401
        view = await h.settle(trial["id"], 3)
        assert view["funnel"]["total"] == 3
        # /healthz stays open: an orchestrator probes it without the token.
        r = await h.tap.get("/healthz")
        assert r.status_code == 200 and r.json() == {"status": "ok"}
