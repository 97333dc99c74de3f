"""The A/B comparisons API (issue 13, item 6): ``/v1/evaluations/comparisons`` on the collector.
Every ``comparison_invalid`` case names its field, an unknown suite is ``404``, every role is
answered as the issue lists, a model-vs-model comparison reaches its verdict through the runner,
and ``outputs`` are scored with no model call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeProvider
from tests.sidecar._no_zero_width import assert_no_zero_width
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, wait_for
from tests.sidecar.collector.corpus.runs_kit import GENERATORS, TEAM, Api, collector_toml, open_collector, planted_models

PATH = "/v1/evaluations/comparisons"


def body(suite: str, **over: Any) -> dict[str, Any]:
    # No version: these aliases name none (a version they cannot pin is refused: test_corpus_ab_sides.py).
    return {"suite_id": suite, "baseline": {"type": "model", "ref": INCUMBENT, "version": ""},
            "candidate": {"type": "model", "ref": CANDIDATE, "version": ""}, "tolerance": 0.05, **over}


async def finished(api: Api, cid: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update((await api.call("GET", f"{PATH}/{cid}")).json())
        return seen["verdict"] is not None

    await wait_for(done, what="the A/B comparison's verdict")
    return seen


async def test_ab_comparisons_validate_answer_roles_and_reach_verdicts(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=9) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            ds = await api.dataset(6)
            suite = await api.suite(ds, [{"name": "pref", "kind": "paired_judge"},
                                         {"name": "marker", "kind": "grader",
                                          "grader": {"type": "contains", "value": "⟨q="}},
                                         {"name": "cost", "kind": "cost"}])
            # Issue 23, item 1: a verdict rests on an interval, and 20 items at least; the outputs-only
            # comparison runs on 30 (no model is called, so it costs nothing).
            ds30 = await api.dataset(30, name="ds30")
            graders_only = await api.suite(ds30, [{"name": "exact", "kind": "grader",
                                                   "grader": {"type": "exact_match"}}], name="exact")
            b = body(suite)
            invalid = {
                "$.baseline.ref": {**b, "baseline": {"type": "model"}},
                "$.candidate.ref": {**b, "candidate": {"type": "model", "ref": ""}},
                "$.baseline.type": {**b, "baseline": {"type": "robot", "ref": INCUMBENT}},
                "$.candidate": {**b, "candidate": dict(b["baseline"])},
                "$.tolerance": {**b, "tolerance": 1.5},
                "$.outputs": {**b, "outputs": ["not", "an", "object"]},
                "$.outputs.baseline": {**b, "outputs": {"baseline": ["one answer for six items"]}},
                "$.colour": {**b, "colour": "blue"},
            }
            answers: dict[str, tuple[int, str, str | None]] = {}
            for field, bad in invalid.items():
                r = await api.call("POST", PATH, json=bad)
                answers[field] = (r.status_code, r.json()["error"]["code"], r.json()["error"]["field"])
            negative = await api.call("POST", PATH, json={**b, "tolerance": -0.1})
            missing = await api.call("POST", PATH, json=body("su_nope"))
            # Roles: writers create, readers read, platform_admin passes; another team sees nothing.
            roles: dict[str, tuple[int, int, int]] = {}
            made: list[str] = []
            for role in ("tenant_admin", "developer", "security_officer", "auditor", "viewer", "finops",
                         "platform_admin"):
                teams = () if role == "platform_admin" else (TEAM,)
                created = await api.call("POST", PATH, json=b, roles=(role,), teams=teams)
                if created.status_code == 201:
                    made.append(created.json()["id"])
                listed = await api.call("GET", PATH, roles=(role,), teams=teams)
                one = await api.call("GET", f"{PATH}/{made[0]}", roles=(role,), teams=teams)
                roles[role] = (created.status_code, listed.status_code, one.status_code)
            stranger = await api.call("GET", f"{PATH}/{made[0]}", roles=("tenant_admin",), teams=("team-b",))
            stranger_list = await api.call("GET", PATH, roles=("tenant_admin",), teams=("team-b",))
            verdict = await finished(api, made[0])
            for other in made[1:]:  # every model-vs-model run ended: the count below is the outputs' own
                await finished(api, other)
            generations = sum(fake.calls[m] for m in GENERATORS)
            # Given outputs on both sides (an agent and a prompt): scored, no model called at all.
            calls_before = sum(fake.calls[m] for m in (*GENERATORS, JUDGE))
            given = await api.call("POST", PATH, json={
                "suite_id": graders_only, "baseline": {"type": "prompt", "ref": "support-v1"},
                "candidate": {"type": "agent", "ref": "support-bot", "version": "7"},
                "outputs": {"baseline": {f"{i}": "wrong" for i in range(6)},
                            "candidate": {"0": "a map may leave items out"}}})
            # An unregistered agent with nothing given is refused naming it (issue 24, item 3).
            unregistered = await api.call("POST", PATH, json={
                "suite_id": graders_only, "baseline": {"type": "model", "ref": INCUMBENT},
                "candidate": {"type": "agent", "ref": "support-bot"}, "outputs": {"baseline": [], "candidate": {}}})
            assert given.status_code == 201, given.text
            items = (await api.call("GET", f"/v1/datasets/{ds30}/versions/1/items", reads_content=True)).json()["items"]
            right = await api.call("POST", PATH, json={
                "suite_id": graders_only, "baseline": {"type": "prompt", "ref": "support-v1"},
                "candidate": {"type": "agent", "ref": "support-bot", "version": "7"},
                "outputs": {"baseline": {it["id"]: "wrong" for it in items},
                            "candidate": {it["id"]: it["expected"] for it in items}}})
            scored = await finished(api, right.json()["id"])
            no_calls = sum(fake.calls[m] for m in (*GENERATORS, JUDGE)) - calls_before
            by_suite = await api.call("GET", PATH, params={"suite_id": graders_only})
            listed_all = (await api.call("GET", PATH)).json()
        finally:
            await api.aclose()
            await server.stop()
    print(f"\ncomparison_invalid: {answers}; tolerance -0.1 → {negative.status_code} "
          f"{negative.json()['error']['field']}; unknown suite → {missing.status_code} "
          f"{missing.json()['error']['code']}; roles (create, list, get) {roles}; model vs model: "
          f"{verdict['verdict']} {[(m['metric'], m['delta'], m['threshold']) for m in verdict['metrics']]}; "
          f"outputs only: {scored['verdict']}, {no_calls} provider calls")
    for field, got in answers.items():
        assert got == (422, "comparison_invalid", field), (field, got)
    assert unregistered.status_code == 422 and unregistered.json()["error"]["field"] == "$.candidate.ref"
    assert negative.status_code == 422 and negative.json()["error"]["field"] == "$.tolerance"
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    for role in ("tenant_admin", "developer", "security_officer", "platform_admin"):
        assert roles[role] == (201, 200, 200), role
    for role in ("auditor", "viewer", "finops"):
        assert roles[role] == (403, 200, 200), role
    assert stranger.status_code == 404 and stranger_list.json()["comparisons"] == []
    # Six items cannot settle anything: no interval below 20 items, so no direction (before issue 23
    # this read candidate_better from point differences alone).
    assert verdict["verdict"] == "inconclusive"
    assert all(m["interval"] is None and m["interval_note"] == "small sample" for m in verdict["metrics"])
    assert verdict["baseline_run_id"] != verdict["candidate_run_id"]
    assert {m["metric"] for m in verdict["metrics"]} == {"pref", "marker", "cost"}
    assert {"metric", "baseline", "candidate", "delta", "comparator", "threshold"} <= set(verdict["metrics"][0])
    assert generations >= 12
    assert scored["verdict"] == "candidate_better" and scored["metrics"][0]["candidate"] == 1.0
    # Every item differs by exactly 1: no zero-width "95%" interval, the exact no-spread bound instead.
    exact = scored["metrics"][0]
    assert exact["paired_items"] == 30 and exact["interval"][1] == 1.0 and 0.05 < exact["interval"][0] < 0.9
    assert no_calls == 0, "given outputs are scored without calling any model"
    assert_no_zero_width(verdict, scored, listed_all, by_suite.json())
    assert [c["suite_id"] for c in by_suite.json()["comparisons"]] == [graders_only] * 2
