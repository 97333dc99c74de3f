"""The admin API over real HTTP: trials, idempotency, errors, live view, health, OpenAPI."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from sidecar.api.admin import admin_app
from sidecar.api.tap import tap_app
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for

UNPRICED_ALIAS = "unpriced-model"
UNPRICED_EXTRA = f"""
[models.{UNPRICED_ALIAS}]
provider = "local"
"""


def body(**over: Any) -> dict[str, Any]:
    b: dict[str, Any] = {
        "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
        "spend_cap_usd": 5.0, "sample_rate": 0.25,
    }
    b.update(over)
    return b


def admin(h: Harness) -> httpx.AsyncClient:
    assert h.admin
    return h.admin


def error_of(r: httpx.Response) -> dict[str, Any]:
    assert r.headers["content-type"].startswith("application/json"), r.text
    data = r.json()
    assert set(data) == {"error"}, data
    assert set(data["error"]) == {"code", "message", "field"}, data
    assert isinstance(data["error"]["code"], str) and data["error"]["message"]
    return data["error"]


# -- create ------------------------------------------------------------------------------------------


async def test_create_returns_the_full_view(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).post("/v1/trials", json=body())
        assert r.status_code == 201, r.text
        t = r.json()
        assert t["id"].startswith("tr_")
        assert t["status"] == "running"
        assert t["team"] == "team-a"
        assert (t["incumbent_model"], t["candidate_model"]) == (INCUMBENT, CANDIDATE)
        assert t["sample_rate"] == 0.25
        assert t["spend_cap_usd"] == 5.0
        assert t["ended_at"] is None
        assert t["execution_site"] == "local"

        funnel = t["funnel"]
        assert funnel["total"] == 0 and funnel["in_flight"] == 0
        assert set(funnel["outcomes"]) >= {
            "not_sampled", "skipped_redacted", "shed_queue_full", "cap_reached",
            "candidate_failed", "judge_failed", "judged", "indeterminate",
        }
        assert all(n == 0 for n in funnel["outcomes"].values())

        spend = t["spend"]
        assert spend["cap_micros"] == 5_000_000
        assert spend["known_micros"] == 0
        assert spend["coverage"] == "complete"
        assert spend["basis"] == "list_price"
        assert spend["reserved_micros"] == 0
        assert spend["remaining_micros"] == 5_000_000

        verdict = t["verdict"]
        assert verdict["code"] == "inconclusive"
        assert verdict["wording"] == "Collecting"
        assert verdict["evidence"] == "traffic"
        assert verdict["cases"] == 0
        assert verdict["interval"] is None
        assert verdict["small_sample"] is True

        judge = t["judge"]
        assert judge["model"] == JUDGE
        assert isinstance(judge["version_id"], str) and len(judge["version_id"]) >= 12
        assert judge["name"]

        # GET shows the same trial.
        got = await h.trial(t["id"])
        assert got["id"] == t["id"] and got["judge"] == judge and got["spend"] == spend


async def test_unknown_field_in_the_create_body_is_400_naming_it(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).post("/v1/trials", json=body(sampel_rate=0.5))
        assert r.status_code == 400, r.text
        err = error_of(r)
        assert err["code"] == "invalid_request"
        assert err["field"] == "$.sampel_rate"
        assert "sampel_rate" in err["message"]
        # Nested objects refuse typos too.
        r = await admin(h).post("/v1/trials", json=body(judge={"modle": JUDGE}))
        assert r.status_code == 400, r.text
        assert error_of(r)["field"] == "$.judge.modle"
        # A missing required field is named as well.
        b = body()
        del b["spend_cap_usd"]
        r = await admin(h).post("/v1/trials", json=b)
        assert r.status_code == 400, r.text
        assert error_of(r)["field"] == "$.spend_cap_usd"
        assert (await admin(h).get("/v1/trials")).json()["trials"] == []


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"sample_rate": 1.5}, "$.sample_rate"),
        ({"sample_rate": -0.1}, "$.sample_rate"),
        ({"spend_cap_usd": 0}, "$.spend_cap_usd"),
        ({"team": ""}, "$.team"),
        ({"candidate_price": {"input_per_mtok_usd": "cheap", "output_per_mtok_usd": 1}}, "$.candidate_price.input_per_mtok_usd"),
    ],
)
async def test_invalid_values_are_400_naming_the_field(tmp_path: Path, over: dict[str, Any], field: str) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).post("/v1/trials", json=body(**over))
        assert r.status_code == 400, r.text
        err = error_of(r)
        assert err["code"] == "invalid_request"
        assert err["field"] == field


async def test_a_body_that_is_not_json_is_400(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).post("/v1/trials", content=b"{team: a}", headers={"Content-Type": "application/json"})
        assert r.status_code == 400
        assert error_of(r)["code"] == "invalid_request"


@pytest.mark.parametrize("candidate", [UNPRICED_ALIAS, "mystery-model"], ids=["alias-without-price", "bare-name"])
async def test_a_candidate_without_a_list_price_is_refused_unless_one_is_supplied(tmp_path: Path, candidate: str) -> None:
    async with Harness(tmp_path, extra=UNPRICED_EXTRA) as h:
        r = await admin(h).post("/v1/trials", json=body(candidate_model=candidate))
        assert r.status_code == 422, r.text
        err = error_of(r)
        assert err["code"] == "spend_unbounded"
        assert err["field"] == "$.candidate_price"
        assert candidate in err["message"]
        assert (await admin(h).get("/v1/trials")).json()["trials"] == []

        price = {"input_per_mtok_usd": 1.0, "output_per_mtok_usd": 3.0}
        r = await admin(h).post("/v1/trials", json=body(candidate_model=candidate, candidate_price=price))
        assert r.status_code == 201, r.text
        assert r.json()["candidate_model"] == candidate


async def test_a_judge_without_a_list_price_is_refused(tmp_path: Path) -> None:
    async with Harness(tmp_path, extra=UNPRICED_EXTRA) as h:
        r = await admin(h).post("/v1/trials", json=body(judge={"model": UNPRICED_ALIAS}))
        assert r.status_code == 422, r.text
        err = error_of(r)
        assert (err["code"], err["field"]) == ("spend_unbounded", "$.judge_price")


# -- idempotency -------------------------------------------------------------------------------------


async def test_idempotency_key_returns_the_original_trial(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        c = admin(h)
        key = {"Idempotency-Key": "create-7f3a"}
        first = await c.post("/v1/trials", json=body(), headers=key)
        assert first.status_code == 201, first.text
        again = await c.post("/v1/trials", json=body(), headers=key)
        assert again.status_code == 200, again.text
        assert again.json()["id"] == first.json()["id"]
        # The same body written differently (key order, whitespace) is the same request.
        reordered = json.dumps(dict(reversed(list(body().items()))), indent=2).encode()
        r = await c.post("/v1/trials", content=reordered, headers={**key, "Content-Type": "application/json"})
        assert r.status_code == 200, r.text
        assert r.json()["id"] == first.json()["id"]

        other = await c.post("/v1/trials", json=body(sample_rate=0.5), headers=key)
        assert other.status_code == 409, other.text
        assert error_of(other)["code"] == "request_key_conflict"

        # Without a key (or with another one) each call creates a trial.
        r = await c.post("/v1/trials", json=body(), headers={"Idempotency-Key": "create-other"})
        assert r.status_code == 201
        assert r.json()["id"] != first.json()["id"]
        trials = (await c.get("/v1/trials")).json()["trials"]
        assert len(trials) == 2
        # Only the created trials are running (the replays did not register a second copy).
        assert len(h.runtime.routing.current) == 2


async def test_concurrent_creates_with_one_key_make_one_trial(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        c = admin(h)
        key = {"Idempotency-Key": "burst-1"}
        replies = await asyncio.gather(*(c.post("/v1/trials", json=body(), headers=key) for _ in range(8)))
        assert sorted(r.status_code for r in replies) == [200] * 7 + [201]
        assert len({r.json()["id"] for r in replies}) == 1
        assert len((await c.get("/v1/trials")).json()["trials"]) == 1
        assert len(h.runtime.routing.current) == 1


async def test_an_overlong_idempotency_key_is_400(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).post("/v1/trials", json=body(), headers={"Idempotency-Key": "k" * 256})
        assert r.status_code == 400
        assert error_of(r)["field"] == "Idempotency-Key"


# -- read, list, stop ----------------------------------------------------------------------------------


async def test_unknown_trial_is_404_with_the_error_shape(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).get("/v1/trials/tr_nope")
        assert r.status_code == 404
        assert error_of(r)["code"] == "not_found"
        r = await admin(h).post("/v1/trials/tr_nope/stop")
        assert r.status_code == 404
        assert error_of(r)["code"] == "not_found"
        # A route that does not exist at all answers in the same shape.
        r = await admin(h).get("/v1/nothing-here")
        assert r.status_code == 404
        error_of(r)


async def test_list_shows_every_trial_with_verdict_and_spend(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        a = await h.create_trial()
        b = await h.create_trial(team="team-b")
        r = await admin(h).get("/v1/trials")
        assert r.status_code == 200
        items = r.json()["trials"]
        assert {t["id"] for t in items} == {a["id"], b["id"]}
        for t in items:
            assert t["status"] == "running"
            assert t["verdict"]["wording"] == "Collecting"
            assert t["verdict"]["cases"] == 0
            assert t["spend"]["cap_micros"] == 10_000_000
        only_b = (await admin(h).get("/v1/trials", params={"team": "team-b"})).json()["trials"]
        assert [t["id"] for t in only_b] == [b["id"]]


async def test_stop_ends_the_trial_and_a_second_stop_is_409(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        t = await h.create_trial(sample_rate=1.0)
        other = await h.create_trial(sample_rate=1.0)
        r = await admin(h).post(f"/v1/trials/{t['id']}/stop")
        assert r.status_code == 200, r.text
        stopped = r.json()
        assert stopped["status"] == "stopped"
        assert stopped["ended_at"] is not None
        assert stopped["verdict"]["code"] == "inconclusive"
        assert stopped["verdict"]["wording"] == "Inconclusive"
        assert (await h.trial(t["id"]))["status"] == "stopped"

        r = await admin(h).post(f"/v1/trials/{t['id']}/stop")
        assert r.status_code == 409
        assert error_of(r)["code"] == "trial_not_running"

        # A stopped trial samples nothing more; the other trial still does.
        reply = await h.send([exchange(i) for i in range(3)])
        assert reply == {"accepted": 3, "sampled": 3, "shed": 0}
        await h.settle(other["id"], 3)
        assert (await h.trial(t["id"]))["funnel"]["total"] == 0
        running = (await admin(h).get("/v1/trials", params={"status": "running"})).json()["trials"]
        assert [x["id"] for x in running] == [other["id"]]


async def test_live_shows_running_trials_and_evaluation_spend(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        t = await h.create_trial(sample_rate=1.0)
        gone = await h.create_trial(team="team-b")
        await admin(h).post(f"/v1/trials/{gone['id']}/stop")
        await h.send([exchange(i) for i in range(4)])
        view = await h.settle(t["id"], 4)
        live: dict[str, Any] = {}

        async def engine_idle() -> bool:
            # The store finishes a case a moment before its worker is free again.
            nonlocal live
            r = await admin(h).get("/v1/live")
            assert r.status_code == 200
            live = r.json()
            return bool(live["intake"]["in_flight"] == 0)

        await wait_for(engine_idle, timeout=10, what="the engine to be idle")
        assert [x["id"] for x in live["running_trials"]] == [t["id"]]
        running = live["running_trials"][0]
        assert running["verdict"]["cases"] == 4
        assert running["spend"]["known_micros"] == view["spend"]["known_micros"] > 0
        spend = live["evaluation_spend"]
        assert spend["known_micros"] == view["spend"]["known_micros"]
        assert spend["reserved_micros"] == 0
        assert "never summed" in spend["note"]
        assert live["alerts"] == [] and live["watches"] == []
        assert live["intake"]["depth"] == 0


async def test_healthz_and_readyz(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).get("/healthz")
        assert (r.status_code, r.json()) == (200, {"status": "ok"})
        r = await admin(h).get("/readyz")
        assert (r.status_code, r.json()) == (200, {"status": "ready"})
        assert h.tap
        r = await h.tap.get("/healthz")
        assert r.status_code == 200
        # Not ready while stopping: readiness follows the runtime.
        h.runtime.ready = False
        try:
            r = await admin(h).get("/readyz")
            assert r.status_code == 503
            assert error_of(r)["code"] == "not_ready"
        finally:
            h.runtime.ready = True


# -- OpenAPI -------------------------------------------------------------------------------------------


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "$ref" and isinstance(v, str):
                yield v
            else:
                yield from _refs(v)
    elif isinstance(node, list):
        for v in node:
            yield from _refs(v)


def _served_routes(h: Harness) -> set[tuple[str, str]]:
    """(METHOD, path template) of every API route the admin app and the tap app register (the
    operator console under ``/console`` serves HTML pages, not the API: tests/console/)."""
    served: set[tuple[str, str]] = set()
    for app in (admin_app(h.runtime), tap_app(h.runtime)):
        for route in app.router.routes():
            if route.method in ("HEAD", "*") or route.resource is None:
                continue
            if route.resource.canonical.startswith("/console"):  # the console's HTML pages, not the API
                continue
            served.add((route.method, route.resource.canonical))
    return served


async def test_openapi_document_lists_every_served_route(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        r = await admin(h).get("/openapi.json")
        assert r.status_code == 200
        doc = r.json()
        assert doc["openapi"].startswith("3.1")
        assert doc["info"]["title"] and doc["info"]["version"]

        documented = {(m.upper(), path) for path, ops in doc["paths"].items() for m in ops}
        assert documented == _served_routes(h)

        for path, ops in doc["paths"].items():
            for method, op in ops.items():
                assert op.get("summary"), (method, path)
                assert op["responses"], (method, path)
                assert all(code.isdigit() for code in op["responses"]), (method, path)
                for p in op.get("parameters", []):
                    if p["in"] == "path":
                        assert "{" + p["name"] + "}" in path
            for name in (seg[1:-1] for seg in path.split("/") if seg.startswith("{")):
                for op in ops.values():
                    assert any(p["name"] == name and p["in"] == "path" for p in op.get("parameters", [])), (path, name)

        schemas = doc["components"]["schemas"]
        for ref in _refs(doc):
            assert ref.startswith("#/components/schemas/"), ref
            assert ref.rsplit("/", 1)[1] in schemas, ref
        # The request schema is the decoder's: unknown fields are refused, the required ones named.
        create = schemas["TrialCreate"]
        assert set(create["required"]) == {"team", "incumbent_model", "candidate_model", "spend_cap_usd"}
        assert create.get("additionalProperties") is False
        assert "exchange_id" in schemas["Exchange"]["properties"]


async def test_concurrent_stops_one_wins(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.admin is not None
        trial = await h.create_trial()
        replies = await asyncio.gather(*(h.admin.post(f"/v1/trials/{trial['id']}/stop") for _ in range(6)))
    codes = sorted(r.status_code for r in replies)
    assert codes == [200, 409, 409, 409, 409, 409]
