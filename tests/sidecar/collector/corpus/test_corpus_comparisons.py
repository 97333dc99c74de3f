"""Comparison groups up to admission over the corpus API: readiness, the invocation limit,
request keys and stale preflights (issue 13, item 3). Nothing here runs a group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from policies.money import Price
from sidecar.trials.create import Resolved
from tests.sidecar.collector.corpus.corpus_kit import CorpusKit, items
from tests.sidecar.collector.corpus.test_corpus_datasets import error


async def suite(kit: CorpusKit, n: int, *, judged: bool = True, name: str = "s") -> str:
    r = await kit.import_jsonl(items(n), name=f"ds-{name}")
    assert r.status_code == 201, r.text
    metrics: list[dict[str, Any]] = [{"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}},
                                     {"name": "label", "kind": "grader",
                                      "grader": {"type": "regex", "pattern": "(a|b)", "capture": True}}]
    if judged:
        metrics.insert(0, {"name": "pref", "kind": "paired_judge"})
    r = await kit.call("POST", "/v1/suites", json={"name": name, "dataset_id": r.json()["id"], "dataset_version": 1,
                                                   "metrics": metrics})
    assert r.status_code == 201, r.text
    suite_id: str = r.json()["id"]
    return suite_id


def group(suite_id: str, reps: int = 1, **over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "suite_id": suite_id, "repetitions": reps, "primary_metric": "exact",
        "arms": [{"name": "today", "model": "model-a"},
                 {"name": "next", "model": "model-b", "system_prompt": "Be brief.", "params": {"temperature": 0.2}}],
    }
    body.update(over)
    return body


async def ready(kit: CorpusKit, body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    r = await kit.call("POST", "/v1/comparisons/readiness", json=body, **kw)
    assert r.status_code == 200, r.text
    answer: dict[str, Any] = r.json()
    return answer


async def start(kit: CorpusKit, body: dict[str, Any], key: str, **kw: Any) -> Any:
    return await kit.call("POST", "/v1/comparisons", json=body, headers={"Idempotency-Key": key}, **kw)


async def test_readiness_shows_arms_differences_and_plan(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        s = await suite(kit, 200)
        answer = await ready(kit, group(s, 3))
        assert answer["evidence"] == "corpus" and answer["provider_calls"] == 0 and answer["items"] == 200
        assert [a["resolved"] for a in answer["arms"]] == [
            {"provider": "fake", "upstream_model": "upstream-a", "priced": True,
             "list_price": {"input_micros_per_mtok": 1_000_000, "output_micros_per_mtok": 2_000_000}},
            {"provider": "fake", "upstream_model": "upstream-b", "priced": True,
             "list_price": {"input_micros_per_mtok": 3_000_000, "output_micros_per_mtok": 6_000_000}}]
        assert answer["arms"][0]["prompt_hash"] is None and len(answer["arms"][1]["prompt_hash"]) == 64
        assert answer["arms"][0]["settings"] == {"max_tokens": 256}
        assert [d["setting"] for d in answer["differences"]] == ["system_prompt", "params.temperature"]
        # Issue 24, item 6: five attempts per judgment; the paired judge judges the non-baseline arm.
        assert answer["planned"]["per_arm"] == [
            {"arm": "today", "generations": 600, "judgments": 0, "grader_allowance": 0, "total": 600},
            {"arm": "next", "generations": 600, "judgments": 600, "grader_allowance": 3000, "total": 3600}]
        assert answer["planned"]["group_total"] == 4200
        assert answer["admission"] == {"admitted": False, "over": [{"arm": "next", "total": 3600}]}
        assert answer["problems"] == []
        assert (await ready(kit, group(s, 3)))["readiness_token"] == answer["readiness_token"]  # read-only, stable
        assert (await kit.call("GET", "/v1/comparisons")).json()["comparisons"] == []


async def test_admission_at_exactly_the_limit_and_one_over(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        at = await suite(kit, 200, judged=False, name="at")  # 200 x 5 = 1,000 (assertions call nothing)
        over = await suite(kit, 1001, judged=False, name="over")  # 1,001 x 1
        body = group(at, 5)
        answer = await ready(kit, body)
        assert [p["total"] for p in answer["planned"]["per_arm"]] == [1000, 1000] and answer["admission"]["admitted"]
        r = await start(kit, {**body, "readiness_token": answer["readiness_token"]}, "k-at")
        assert r.status_code == 201 and r.json()["status"] == "admitted", r.text
        body = group(over, 1)
        answer = await ready(kit, body)
        assert answer["admission"] == {"admitted": False, "over": [{"arm": "today", "total": 1001},
                                                                   {"arm": "next", "total": 1001}]}
        r = await start(kit, {**body, "readiness_token": answer["readiness_token"]}, "k-over")
        assert r.status_code == 422 and error(r)["code"] == "comparison_invocation_limit"
        assert "arm 'today' plans 1,001" in error(r)["message"] and "never raised automatically" in error(r)["message"]
        listed = (await kit.call("GET", "/v1/comparisons")).json()["comparisons"]
        assert [c["suite_id"] for c in listed] == [at]


async def test_request_keys_and_stale_preflight(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        s = await suite(kit, 20)
        body = group(s, 2)
        token = (await ready(kit, body))["readiness_token"]
        no_key = await kit.call("POST", "/v1/comparisons", json={**body, "readiness_token": token})
        assert no_key.status_code == 400 and error(no_key)["field"] == "Idempotency-Key"
        no_token = await start(kit, body, "k0")
        assert no_token.status_code == 400 and error(no_token)["field"] == "$.readiness_token"
        first = await start(kit, {**body, "readiness_token": token}, "k1")
        assert first.status_code == 201, first.text
        view = first.json()
        assert view["evidence"] == "corpus" and view["planned_total"] == 40 + (40 + 5 * 40)
        replay = await start(kit, {**body, "readiness_token": token}, "k1")  # the answer was lost: retry
        assert replay.status_code == 200 and replay.json() == view
        other = await start(kit, {**body, "repetitions": 1, "readiness_token": token}, "k1")
        assert other.status_code == 409 and error(other)["code"] == "request_key_conflict"
        kit.models["model-b"] = Resolved("fake", "upstream-b", Price(4_000_000, 6_000_000))  # its price changed
        stale = await start(kit, {**body, "readiness_token": token}, "k2")
        assert stale.status_code == 409 and error(stale)["code"] == "stale_preflight"
        assert (await start(kit, {**body, "readiness_token": token}, "k1")).json() == view  # the key still answers
        fresh = (await ready(kit, body))["readiness_token"]
        assert fresh != token
        assert (await start(kit, {**body, "readiness_token": fresh}, "k2")).status_code == 201
        got = await kit.call("GET", f"/v1/comparisons/{view['id']}")
        assert got.json() == view
        assert len((await kit.call("GET", "/v1/comparisons", params={"suite_id": s})).json()["comparisons"]) == 2
        assert (await kit.call("GET", "/v1/comparisons", params={"suite_id": "su_x"})).json()["comparisons"] == []
    async with CorpusKit(tmp_path, store_url=kit.store_url) as again:  # a restart: same store, new process state
        again.models["model-b"] = kit.models["model-b"]
        replay = await start(again, {**body, "readiness_token": token}, "k1")
        assert replay.status_code == 200 and replay.json() == view


async def test_problems_refuse_a_start(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        s = await suite(kit, 5)
        for model, code in (("no-such-model", "model_unresolved"), ("free-model", "spend_unbounded")):
            body = group(s, arms=[{"name": "a", "model": "model-a"}, {"name": "b", "model": model}])
            answer = await ready(kit, body)
            assert [p["code"] for p in answer["problems"]] == [code]
            assert answer["problems"][0]["field"] == "$.arms[1].model"
            r = await start(kit, {**body, "readiness_token": answer["readiness_token"]}, f"k-{code}")
            assert r.status_code == 422 and error(r)["code"] == code and error(r)["field"] == "$.arms[1].model"


async def test_invalid_groups_name_their_field(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        s = await suite(kit, 5)
        arm = {"name": "a", "model": "model-a"}
        cases: list[tuple[dict[str, Any], int, str, str]] = [
            (group(s, arms=[arm]), 400, "invalid_request", "$.arms"),
            (group(s, arms=[{**arm, "name": f"a{i}"} for i in range(6)]), 400, "invalid_request", "$.arms"),
            (group(s, 6), 400, "invalid_request", "$.repetitions"),
            (group(s, 0), 400, "invalid_request", "$.repetitions"),
            (group(s, arms=[arm, arm]), 422, "comparison_invalid", "$.arms[1].name"),
            (group(s, primary_metric="nope"), 422, "comparison_primary_invalid", "$.primary_metric"),  # issue 24
            (group(s, primary_metric="label"), 422, "comparison_primary_invalid", "$.primary_metric"),
            (group("su_missing"), 404, "not_found", "$.suite_id"),
            (group(s, arms=[arm, {**arm, "name": "b", "params": {"temprature": 1}}]), 400, "invalid_request",
             "$.arms[1].params.temprature"),
        ]
        for body, status, code, field in cases:
            r = await kit.call("POST", "/v1/comparisons/readiness", json=body)
            assert (r.status_code, error(r)["code"], error(r)["field"]) == (status, code, field), (body, r.text)


async def test_comparison_rights_and_wording(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        s = await suite(kit, 5)
        body = group(s)
        token = (await ready(kit, body, roles=["viewer"]))["readiness_token"]  # readiness only reads
        for role in ("viewer", "auditor", "finops"):
            r = await start(kit, {**body, "readiness_token": token}, f"k-{role}", roles=[role])
            assert r.status_code == 403 and error(r)["field"] == "team", role
        made = await start(kit, {**body, "readiness_token": token}, "k-dev", roles=["developer"])
        assert made.status_code == 201
        other: dict[str, Any] = {"roles": ["tenant_admin"], "teams": ["team-b"]}
        r = await kit.call("POST", "/v1/comparisons/readiness", json=body, **other)
        assert r.status_code == 404 and error(r)["field"] == "$.suite_id"
        assert (await kit.call("GET", f"/v1/comparisons/{made.json()['id']}", **other)).status_code == 404
        r = await start(kit, {**body, "readiness_token": token}, "k-dev", **other)  # another team's key
        assert r.status_code == 404
        assert (await kit.call("GET", "/v1/comparisons", **other)).json()["comparisons"] == []
        everything = json.dumps([(await kit.call("GET", path)).json() for path in (
            "/v1/comparisons", f"/v1/comparisons/{made.json()['id']}", "/v1/suites", "/v1/datasets")])
        assert "adoptable" not in everything.lower()


async def test_two_starts_with_one_key_at_once_make_one_group(tmp_path: Path) -> None:
    import asyncio

    async with CorpusKit(tmp_path) as kit:
        s = await suite(kit, 10)
        body = group(s)
        body["readiness_token"] = (await ready(kit, body))["readiness_token"]
        answers = await asyncio.gather(*(start(kit, body, "same-key") for _ in range(4)))
        assert sorted(r.status_code for r in answers) == [200, 200, 200, 201]
        assert len({r.json()["id"] for r in answers}) == 1
        assert len((await kit.call("GET", "/v1/comparisons")).json()["comparisons"]) == 1
