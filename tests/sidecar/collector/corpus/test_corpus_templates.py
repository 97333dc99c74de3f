"""Comparison templates with versions over HTTP (issue 24, item 12): every save is a new
version; a save against a stale revision is ``409 template_revision_conflict`` and writes
nothing; a retried save with its request key returns the committed version, even after the
template moved on and after a collector restart — never a conflict, never a duplicate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeProvider
from tests.sidecar.collector.corpus.runs_kit import Api, collector_toml, group_body, open_collector, planted_models

METRICS: list[dict[str, Any]] = [{"name": "marker", "kind": "grader", "grader": {"type": "contains", "value": "⟨q="}}]


async def test_template_versions_revision_conflicts_and_request_key_recovery(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=5) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            suite = await api.suite(await api.dataset(5), METRICS)
            config = group_body(suite, primary="marker")

            async def save(url: str, body: dict[str, Any], key: str | None, **kw: Any) -> Any:
                headers = {} if key is None else {"Idempotency-Key": key}
                return await api.call("POST", url, json=body, headers=headers, **kw)

            made = await save("/v1/comparison-templates", {"name": "weekly", "config": config}, "t-create")
            tid = made.json()["id"]
            versions = f"/v1/comparison-templates/{tid}/versions"
            v2 = await save(versions, {"expected_revision": 1, "config": {**config, "repetitions": 2}}, "t-v2")
            stale = await save(versions, {"expected_revision": 1, "config": {**config, "repetitions": 3}}, "t-v3")
            taken = await save("/v1/comparison-templates", {"name": "weekly", "config": config}, "t-create-2")
            no_key = await save(versions, {"expected_revision": 2, "config": config}, None)
            viewer = await save(versions, {"expected_revision": 2, "config": config}, "t-viewer", roles=("viewer",))
            other_body = await save(versions, {"expected_revision": 1, "config": config}, "t-v2")
            v3 = await save(versions, {"expected_revision": 2, "config": {**config, "repetitions": 3}}, "t-v3b")
            await api.aclose()
            await server.stop()
            server = await open_collector(path)  # a lost answer and a restart: the same save again
            api = Api(auth, server.url)
            retried = await save(versions, {"expected_revision": 1, "config": {**config, "repetitions": 2}}, "t-v2")
            shown = await api.call("GET", f"/v1/comparison-templates/{tid}", roles=("viewer",))
            listed = await api.call("GET", "/v1/comparison-templates", roles=("viewer",))
            foreign = await api.call("GET", f"/v1/comparison-templates/{tid}", teams=("team-b",))
        finally:
            await api.aclose()
            await server.stop()

    assert made.status_code == 201, made.text
    assert made.json()["revision"] == 1 and made.json()["saved"]["version"] == 1
    assert v2.status_code == 201 and v2.json()["revision"] == 2 and v2.json()["saved"]["config"]["repetitions"] == 2
    assert stale.status_code == 409, stale.text
    error = stale.json()["error"]
    assert error["code"] == "template_revision_conflict" and error["field"] == "$.expected_revision"
    assert "revision 2" in error["message"]
    assert taken.status_code == 409 and taken.json()["error"]["code"] == "template_exists"
    assert no_key.status_code == 400 and no_key.json()["error"]["field"] == "Idempotency-Key"
    assert viewer.status_code == 403
    assert other_body.status_code == 409 and other_body.json()["error"]["code"] == "request_key_conflict"
    assert v3.status_code == 201 and v3.json()["saved"]["version"] == 3
    assert retried.status_code == 200, retried.text
    assert retried.json()["saved"] == v2.json()["saved"], "the committed version, not a conflict or a duplicate"
    assert retried.json()["revision"] == 3
    body = shown.json()
    assert shown.status_code == 200 and [v["version"] for v in body["versions"]] == [3, 2, 1]
    assert [v["config"]["repetitions"] for v in body["versions"]] == [3, 2, 1]
    assert [t["id"] for t in listed.json()["templates"]] == [tid]
    assert foreign.status_code == 404
