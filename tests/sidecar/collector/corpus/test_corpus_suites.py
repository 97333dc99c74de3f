"""Suites over the corpus API: pinned dataset versions and exactly versioned metrics
(issue 13, item 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from judge.version import JudgeSpec, judge_version
from policies.graders import check_grader, grader_version
from tests.sidecar.collector.corpus.corpus_kit import CorpusKit, items
from tests.sidecar.collector.corpus.test_corpus_datasets import error

METRICS: list[dict[str, Any]] = [
    {"name": "pref", "kind": "paired_judge"},
    {"name": "score", "kind": "absolute_judge", "judge": {"rubric_text": "Rate helpfulness.", "scale": [1, 5]}},
    {"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}},
    {"name": "has-ref", "kind": "grader", "grader": {"type": "contains", "value": "answer"}},
    {"name": "label", "kind": "grader", "grader": {"type": "regex", "pattern": r"label: (\w+)", "capture": True}},
    {"name": "json", "kind": "grader", "grader": {"type": "json_schema", "schema": {"type": "object"}}},
    {"name": "latency", "kind": "latency"},
    {"name": "cost", "kind": "cost"},
]


async def dataset(kit: CorpusKit, n: int = 10) -> str:
    r = await kit.import_jsonl(items(n, tag_every=2))
    assert r.status_code == 201, r.text
    ds: str = r.json()["id"]
    return ds


async def test_a_suite_pins_every_metric_to_an_exact_version(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        ds = await dataset(kit)
        r = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1,
                                                       "metrics": METRICS})
        assert r.status_code == 201, r.text
        suite = r.json()
        assert (suite["version"], suite["item_count"], suite["dataset"]) == (1, 10, {"id": ds, "version": 1})
        by_name = {m["name"]: m for m in suite["metrics"]}
        assert {n: (m["family"], m["direction"]) for n, m in by_name.items()} == {
            "pref": ("paired", "higher"), "score": ("absolute", "higher"), "exact": ("grader", "higher"),
            "has-ref": ("grader", "higher"), "label": ("grader", "categorical"), "json": ("grader", "higher"),
            "latency": ("latency", "lower"), "cost": ("cost", "lower")}
        assert by_name["pref"]["version"] == judge_version(JudgeSpec(name="pref", model="judge-1", max_tokens=512)).id
        assert by_name["exact"]["version"] == grader_version("exact_match", check_grader("exact_match", {}))
        assert by_name["score"]["version"] != by_name["pref"]["version"]
        again = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1,
                                                           "metrics": METRICS})
        assert again.json()["version"] == 2 and again.json()["id"] != suite["id"]
        assert again.json()["digest"] == suite["digest"]
        assert (await kit.call("GET", f"/v1/suites/{suite['id']}")).json() == suite  # never changes
        listed = (await kit.call("GET", "/v1/suites")).json()["suites"]
        assert [s["version"] for s in listed] == [2, 1]


async def test_a_pinned_version_must_be_what_the_definition_is(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        ds = await dataset(kit)
        pinned = grader_version("regex", check_grader("regex", {"pattern": "yes"}))
        ok = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1, "metrics": [
            {"name": "yes", "kind": "grader", "grader": {"type": "regex", "pattern": "yes"}, "version": pinned}]})
        assert ok.status_code == 201 and ok.json()["metrics"][0]["version"] == pinned
        drifted = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1,
                                                             "metrics": [{"name": "yes", "kind": "grader", "version": pinned,
                                                                          "grader": {"type": "regex", "pattern": "yes!"}}]})
        assert drifted.status_code == 422 and error(drifted)["code"] == "grader_version_mismatch"
        assert error(drifted)["field"] == "$.metrics[0].version"


async def test_bad_definitions_name_their_field(tmp_path: Path) -> None:
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"name": "m", "kind": "grader", "grader": {"type": "regex", "pattern": "("}}, 422, "suite_invalid",
         "$.metrics[0].grader.pattern"),
        ({"name": "m", "kind": "grader", "grader": {"type": "fuzzy"}}, 422, "suite_invalid", "$.metrics[0].grader.type"),
        ({"name": "m", "kind": "grader"}, 422, "suite_invalid", "$.metrics[0].grader"),
        ({"name": "m", "kind": "latency", "direction": "higher"}, 422, "suite_invalid", "$.metrics[0].direction"),
        ({"name": "m", "kind": "absolute_judge"}, 422, "suite_invalid", "$.metrics[0].judge.rubric_text"),
        ({"name": "m", "kind": "absolute_judge", "judge": {"rubric": "pairwise-v1", "rubric_text": "x"}}, 422,
         "suite_invalid", "$.metrics[0].judge.rubric"),
        ({"name": "m", "kind": "paired_judge", "judge": {"rubric": "no-such"}}, 422, "suite_invalid",
         "$.metrics[0].judge"),
        ({"name": "m", "kind": "cost", "grader": {"type": "exact_match"}}, 422, "suite_invalid", "$.metrics[0].grader"),
        ({"name": "m", "kind": "vibes"}, 400, "invalid_request", "$.metrics[0].kind"),
    ]
    async with CorpusKit(tmp_path) as kit:
        ds = await dataset(kit)
        for metric, status, code, field in cases:
            r = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1,
                                                           "metrics": [metric]})
            assert (r.status_code, error(r)["code"], error(r)["field"]) == (status, code, field), (metric, r.text)
        r = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "metrics": [METRICS[0]]})
        assert r.status_code == 400 and error(r)["field"] == "$.dataset_version"  # never "latest"
        r = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1,
                                                       "metrics": [METRICS[2], METRICS[2]]})
        assert r.status_code == 422 and error(r)["field"] == "$.metrics[1].name"
        r = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 2,
                                                       "metrics": [METRICS[2]]})
        assert r.status_code == 404 and error(r)["field"] == "$.dataset_version"
        assert (await kit.call("GET", "/v1/suites")).json()["suites"] == []


async def test_a_suite_over_a_slice(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        ds = await dataset(kit)
        await kit.call("POST", f"/v1/datasets/{ds}/slices", json={"name": "hard", "version": 1,
                                                                   "filter": {"tags_all": ["hard"]}})
        r = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1,
                                                       "slice": {"name": "hard", "version": 1}, "metrics": [METRICS[2]]})
        assert r.status_code == 201 and r.json()["item_count"] == 5 and r.json()["slice"] == {"name": "hard", "version": 1}
        r = await kit.call("POST", "/v1/suites", json={"name": "s", "dataset_id": ds, "dataset_version": 1,
                                                       "slice": {"name": "hard", "version": 2}, "metrics": [METRICS[2]]})
        assert r.status_code == 404 and error(r)["field"] == "$.slice"


async def test_suite_rights(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        ds = await dataset(kit)
        body = {"name": "s", "dataset_id": ds, "dataset_version": 1, "metrics": [METRICS[2]]}
        for role in ("auditor", "viewer", "finops"):
            r = await kit.call("POST", "/v1/suites", json=body, roles=[role])
            assert r.status_code == 403, role
        made = await kit.call("POST", "/v1/suites", json=body, roles=["security_officer"])
        assert made.status_code == 201
        assert len((await kit.call("GET", "/v1/suites", roles=["finops"])).json()["suites"]) == 1
        other: dict[str, Any] = {"roles": ["tenant_admin"], "teams": ["team-b"]}
        r = await kit.call("POST", "/v1/suites", json=body, **other)
        assert r.status_code == 404 and error(r)["field"] == "$.dataset_id"
        assert (await kit.call("GET", f"/v1/suites/{made.json()['id']}", **other)).status_code == 404
        assert (await kit.call("GET", "/v1/suites", **other)).json()["suites"] == []
