"""Datasets over the corpus API on loopback: imports (JSONL, CSV, multipart), versions,
revision ids, edits, slices, seeding and rights (issue 13, item 1)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.datasets import DatasetService, SeedIn
from sidecar.errors import ApiError
from tests.harness import exchange
from tests.sidecar.collector.corpus.corpus_kit import DEFAULTS, CorpusKit, exchanges_of, items


async def all_items(kit: CorpusKit, ds: str, version: int) -> list[dict[str, Any]]:
    r = await kit.call("GET", f"/v1/datasets/{ds}/versions/{version}/items", params={"limit": 10_000})
    assert r.status_code == 200, r.text
    got: list[dict[str, Any]] = r.json()["items"]
    return got


def error(r: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = r.json()["error"]
    assert set(body) == {"code", "message", "field"}
    return body


async def test_a_1000_item_jsonl_import(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        started = time.perf_counter()
        r = await kit.import_jsonl(items(1000, tag_every=10))
        elapsed = time.perf_counter() - started
        assert r.status_code == 201, r.text
        made = r.json()
        print(f"\n1,000-item JSONL import (SQLite, over HTTP): {elapsed * 1000:.0f} ms")
        assert made["version"]["version"] == 1 and made["version"]["item_count"] == 1000
        assert made["evidence"] == "corpus"
        got = await all_items(kit, made["id"], 1)
        assert len(got) == 1000
        assert got[3] == {"id": got[3]["id"], "revision_id": got[3]["revision_id"],
                          "input": [{"role": "user", "content": "question 3"}], "expected": "answer 3",
                          "tags": [], "metadata": {"lang": "fr", "n": 3}}
        assert len({i["id"] for i in got}) == 1000 and len({i["revision_id"] for i in got}) == 1000
        listed = (await kit.call("GET", "/v1/datasets")).json()["datasets"]
        assert [d["id"] for d in listed] == [made["id"]]


async def test_revision_ids_are_stable_across_identical_imports_and_change_with_content(tmp_path: Path) -> None:
    rows = items(20)
    async with CorpusKit(tmp_path) as kit:
        first = (await kit.import_jsonl(rows)).json()
        ds = first["id"]
        again = await kit.call("POST", f"/v1/datasets/{ds}/versions", params={"format": "jsonl"},
                               content="\n".join(json.dumps(r) for r in rows).encode())
        assert again.status_code == 201 and again.json()["version"] == 2 and again.json()["parent"] == 1
        assert again.json()["digest"] == first["version"]["digest"]  # same content, a new version all the same
        v1, v2 = await all_items(kit, ds, 1), await all_items(kit, ds, 2)
        assert [(i["id"], i["revision_id"]) for i in v1] == [(i["id"], i["revision_id"]) for i in v2]
        edited = [dict(r) for r in rows]
        for n in range(10):
            edited[n] = {**edited[n], "expected": f"revised {n}"}
        third = await kit.call("POST", f"/v1/datasets/{ds}/versions", params={"format": "jsonl", "base_version": "2"},
                               content="\n".join(json.dumps(r) for r in edited).encode())
        assert third.status_code == 201, third.text
        v3 = await all_items(kit, ds, 3)
        assert [i["id"] for i in v3] == [i["id"] for i in v1]  # the id follows the input
        changed = [a["id"] for a, b in zip(v1, v3) if a["revision_id"] != b["revision_id"]]
        assert changed == [i["id"] for i in v1[:10]]
        stale = await kit.call("POST", f"/v1/datasets/{ds}/versions", params={"format": "jsonl", "base_version": "2"},
                               content=b'{"input": "x"}')
        assert stale.status_code == 409 and error(stale) == {
            "code": "version_conflict", "field": "base_version",
            "message": f"dataset {ds!r} is at version 3, not 2; read it again and redo the change"}
        assert (await all_items(kit, ds, 1)) == v1  # versions are immutable


async def test_csv_import_and_a_bad_row_named_by_its_line(tmp_path: Path) -> None:
    good = ('id,input,expected,tags,metadata.lang\n'
            'q1,"What is 2+2?",4,math;easy,en\n'
            'q2,"A question\nover two lines",,hard,fr\n'
            'q3,Bonjour,Salut,,\n')
    async with CorpusKit(tmp_path) as kit:
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "csv"}, content=good.encode(),
                           headers={"Content-Type": "text/csv"})
        assert r.status_code == 201, r.text
        got = await all_items(kit, r.json()["id"], 1)
        assert [(i["id"], i["expected"], i["tags"], i["metadata"]) for i in got] == [
            ("q1", "4", ["easy", "math"], {"lang": "en"}), ("q2", None, ["hard"], {"lang": "fr"}),
            ("q3", "Salut", [], {})]
        assert got[1]["input"] == [{"role": "user", "content": "A question\nover two lines"}]
        bad_cells = good + 'q4,only two\n'
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "bad", "format": "csv"},
                           content=bad_cells.encode())
        assert r.status_code == 400 and error(r)["code"] == "invalid_dataset"
        assert error(r)["field"] == "line 6"  # the two-line cell makes q4 the sixth line
        bad_json = 'input,metadata\nfine,{}\n"also fine","{""a"": 1}"\nbroken,{nope\n'
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "bad", "format": "csv"},
                           content=bad_json.encode())
        assert r.status_code == 400 and error(r)["field"] == "line 4: metadata"
        assert error(r)["message"].startswith("line 4: metadata is not JSON")
        bad_column = 'input,expectd\nx,y\n'
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "bad", "format": "csv"},
                           content=bad_column.encode())
        assert r.status_code == 400 and error(r)["field"] == "line 1: expectd"
        bad_messages = 'messages\n"[{""role"": ""user"", ""content"": ""hi""}]"\n"[{""role"": ""robot"", ""content"": ""x""}]"\n'
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "bad", "format": "csv"},
                           content=bad_messages.encode())
        assert r.status_code == 400 and error(r)["field"] == "line 3: messages", r.text
        assert (await kit.call("GET", "/v1/datasets")).json()["datasets"][0]["name"] == "csv"  # nothing else made


@pytest.mark.parametrize(("line", "field"), [
    ({"input": "x", "expected": 3}, "line 2: $.expected"),
    ({"input": [{"role": "user", "content": "x", "extra": 1}]}, "line 2: $.input[0].extra"),
    ({"inptu": "x"}, "line 2: $.inptu"),
    ({"input": "x", "metadata": {"a": [1]}}, "line 2: $.metadata[...]"),
    ({"input": ""}, "line 2: $.input"),
])
async def test_jsonl_errors_name_the_line_and_field(tmp_path: Path, line: dict[str, Any], field: str) -> None:
    async with CorpusKit(tmp_path) as kit:
        r = await kit.import_jsonl([{"input": "fine"}, line])
        assert r.status_code == 400, r.text
        assert error(r)["code"] == "invalid_dataset" and error(r)["field"] == field, r.text
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "x", "format": "jsonl"},
                           content=b'{"input": "a", "id": "same"}\n{"input": "b", "id": "same"}\n')
        assert error(r)["field"] == "line 2: id" and "line 1" in error(r)["message"]
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "x", "format": "jsonl"},
                           content=b'{"input": "a"}\nnot json\n')
        assert error(r)["field"] == "line 2: $"
        r = await kit.call("POST", "/v1/datasets", params={"team": "team-a", "name": "x"}, content=b'{"input": "a"}')
        assert r.status_code == 400 and error(r)["field"] == "format"


async def test_multipart_import_and_a_taken_name(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        files = {"file": ("cases.jsonl", b'{"input": "a"}\n{"input": "a"}\n', "application/octet-stream")}
        r = await kit.call("POST", "/v1/datasets", data={"team": "team-a", "name": "mp"}, files=files)
        assert r.status_code == 201, r.text
        got = await all_items(kit, r.json()["id"], 1)
        assert got[1]["id"] == got[0]["id"] + "~2"  # the same input twice: distinct, stable ids
        again = await kit.call("POST", "/v1/datasets", data={"team": "team-a", "name": "mp"}, files=files)
        assert again.status_code == 409 and error(again)["code"] == "dataset_exists"


async def test_edits_make_new_versions(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        made = (await kit.import_jsonl([{"id": "a", "input": "A"}, {"id": "b", "input": "B"},
                                        {"id": "c", "input": "C"}])).json()
        ds = made["id"]
        before = await all_items(kit, ds, 1)
        r = await kit.call("POST", f"/v1/datasets/{ds}/edits", json={
            "base_version": 1, "upsert": [{"id": "b", "input": "B", "expected": "bee"}, {"id": "d", "input": "D"}],
            "remove": ["a"]})
        assert r.status_code == 201 and r.json()["source"] == "edit" and r.json()["item_count"] == 3, r.text
        after = await all_items(kit, ds, 2)
        assert [i["id"] for i in after] == ["b", "c", "d"]
        assert after[0]["revision_id"] != before[1]["revision_id"] and after[1] == before[2]
        r = await kit.call("POST", f"/v1/datasets/{ds}/edits", json={"base_version": 1, "remove": ["c"]})
        assert r.status_code == 409 and error(r)["code"] == "version_conflict"
        r = await kit.call("POST", f"/v1/datasets/{ds}/edits", json={"base_version": 2, "remove": ["zz"]})
        assert r.status_code == 400 and error(r)["field"] == "$.remove[0]"
        r = await kit.call("POST", f"/v1/datasets/{ds}/edits", json={"base_version": 2, "upsert": [{"input": 1}]})
        assert r.status_code == 400 and error(r)["field"] == "$.upsert[0].input"
        r = await kit.call("POST", f"/v1/datasets/{ds}/edits", json={
            "base_version": 2, "upsert": [{"id": "e", "input": "E"}, {"id": "e", "input": "E2"}]})
        assert r.status_code == 400 and error(r)["field"] == "$.upsert[1].id" and "$.upsert[0].id" in error(r)["message"]
        r = await kit.call("POST", f"/v1/datasets/{ds}/edits", json={"base_version": 7, "remove": ["b"]})
        assert r.status_code == 404 and error(r)["field"] == "$.base_version"
        r = await kit.import_jsonl([{"id": " padded", "input": "x"}], name="ids")
        assert error(r)["field"] == "line 1: $.id" and "no whitespace at either end" in error(r)["message"]
        versions = (await kit.call("GET", f"/v1/datasets/{ds}/versions")).json()["versions"]
        assert [(v["version"], v["parent"]) for v in versions] == [(1, None), (2, 1)]


async def test_slices_are_saved_versioned_filters(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        ds = (await kit.import_jsonl(items(30, tag_every=3))).json()["id"]
        r = await kit.call("POST", f"/v1/datasets/{ds}/slices",
                           json={"name": "hard-fr", "version": 1,
                                 "filter": {"tags_all": ["hard"], "metadata": {"lang": "fr"}}})
        assert r.status_code == 201, r.text
        assert (r.json()["version"], r.json()["item_count"]) == (1, 5)  # 3, 9, 15, 21, 27
        r = await kit.call("POST", f"/v1/datasets/{ds}/slices", json={"name": "hard-fr", "version": 1,
                                                                      "filter": {"tags_all": ["hard"]}})
        assert (r.json()["version"], r.json()["item_count"]) == (2, 10)
        listed = (await kit.call("GET", f"/v1/datasets/{ds}/slices")).json()["slices"]
        assert [(s["name"], s["version"], s["dataset_version"]) for s in listed] == [("hard-fr", 1, 1), ("hard-fr", 2, 1)]
        r = await kit.call("POST", f"/v1/datasets/{ds}/slices", json={"name": "x", "version": 9})
        assert r.status_code == 404 and error(r)["field"] == "$.version"
        r = await kit.call("POST", f"/v1/datasets/{ds}/slices", json={"name": "x", "version": 1, "filter": {"tag": []}})
        assert r.status_code == 400 and error(r)["field"] == "$.filter.tag"


async def test_seeding_is_refused_with_retention_off_and_reads_nothing(tmp_path: Path) -> None:
    read: list[str] = []

    async def retained(team: str) -> Any:
        read.append(team)
        async for ex in exchanges_of([exchange(i, team=team) for i in range(3)]):
            yield ex

    async with CorpusKit(tmp_path, retention={"team-a": False}, retained=retained) as kit:
        r = await kit.call("POST", "/v1/datasets/seed", json={"team": "team-a", "name": "from-traffic"})
        assert r.status_code == 409 and error(r) == {
            "code": "dataset_seeding_unavailable", "field": "team",
            "message": "seeding from traffic is unavailable for team 'team-a': prompt retention is off for this "
                       "team: no prompt is kept after its case is judged"}
        assert read == []
        assert kit.store is not None  # the stored posture wins over the configured default
        await kit.store.put_posture("team-a", prompt_retention=True, cut_over=False, expected_revision=None,
                                    site="local", now=1.0, by="x", reason="test")
        r = await kit.call("POST", "/v1/datasets/seed", json={"team": "team-a", "name": "from-traffic"})
        assert r.status_code == 201 and r.json()["version"]["source"] == "seed" and r.json()["skipped"] == 0
        assert read == ["team-a"]
        got = await all_items(kit, r.json()["id"], 1)
        assert [i["id"] for i in got] == ["ex-0", "ex-1", "ex-2"] and got[0]["tags"] == ["traffic"]
        await kit.store.put_posture("team-a", prompt_retention=False, cut_over=False, expected_revision=None,
                                    site="local", now=2.0, by="x", reason="test")
        r = await kit.call("POST", "/v1/datasets/seed", json={"team": "team-a", "name": "again"})
        assert r.status_code == 409 and read == ["team-a"]


async def test_the_seeding_seam_takes_any_exchanges(tmp_path: Path) -> None:
    from policies.roles import LOCAL_DEVELOPMENT

    async with CorpusKit(tmp_path, retention={"team-b": False}) as kit:
        assert kit.store is not None
        service = DatasetService(CorpusContext(store=kit.store, clock=time.time, resolve=kit.resolve,
                                               defaults=DEFAULTS, default_retention=lambda t: t != "team-b"))
        rows = [exchange(1), exchange(2, redacted=True), exchange(1), exchange(3)]
        made = await service.seed(LOCAL_DEVELOPMENT, SeedIn(team="team-a", name="s"), exchanges_of(rows))
        assert made["version"]["item_count"] == 2 and made["skipped"] == 2  # redacted, repeated
        with pytest.raises(ApiError) as refused:
            await service.seed(LOCAL_DEVELOPMENT, SeedIn(team="team-b", name="s"), exchanges_of(rows))
        assert refused.value.code == "dataset_seeding_unavailable"
        with pytest.raises(ApiError) as unbuilt:  # retention on, no retained-traffic source yet
            await service.seed(LOCAL_DEVELOPMENT, SeedIn(team="team-a", name="t"))
        assert unbuilt.value.code == "not_implemented"


async def test_rights(tmp_path: Path) -> None:
    async with CorpusKit(tmp_path) as kit:
        ds = (await kit.import_jsonl(items(3), roles=["developer"])).json()["id"]
        viewer: dict[str, Any] = {"roles": ["viewer"], "teams": ["team-a"]}
        assert (await kit.call("GET", "/v1/datasets", **viewer)).json()["datasets"][0]["id"] == ds
        assert (await kit.call("GET", f"/v1/datasets/{ds}", **viewer)).status_code == 200
        r = await kit.import_jsonl(items(3), name="mine", **viewer)
        assert r.status_code == 403 and error(r)["field"] == "team"
        r = await kit.call("POST", f"/v1/datasets/{ds}/slices", json={"name": "s", "version": 1}, **viewer)
        assert r.status_code == 403
        r = await kit.call("GET", f"/v1/datasets/{ds}/versions/1/items", **viewer)
        assert r.status_code == 403 and "content permission" in error(r)["message"]
        r = await kit.call("GET", f"/v1/datasets/{ds}/versions/1/items", reads_content=True, **viewer)
        assert r.status_code == 200
        other: dict[str, Any] = {"roles": ["tenant_admin"], "teams": ["team-b"]}
        missing = await kit.call("GET", "/v1/datasets/ds_nope", **other)
        hidden = await kit.call("GET", f"/v1/datasets/{ds}", **other)
        assert hidden.status_code == missing.status_code == 404
        assert error(hidden)["message"] == f"no dataset {ds!r}"
        assert (await kit.call("GET", "/v1/datasets", **other)).json()["datasets"] == []
        r = await kit.import_jsonl(items(3), **other)
        assert r.status_code == 403 and error(r)["message"] == "team 'team-a' is not one of your teams"
        anonymous = await kit.client.get(kit.url + "/v1/datasets")
        assert anonymous.status_code == 401 and error(anonymous)["code"] == "unauthorized"


async def test_a_1000_item_import_on_postgres(tmp_path: Path, pg_server: Any) -> None:
    dsn = pg_server.create_database()
    try:
        async with CorpusKit(tmp_path, store_url=dsn) as kit:
            started = time.perf_counter()
            r = await kit.import_jsonl(items(1000))
            elapsed = time.perf_counter() - started
            assert r.status_code == 201, r.text
            print(f"\n1,000-item JSONL import (PostgreSQL, over HTTP): {elapsed * 1000:.0f} ms")
            ds = r.json()["id"]
            again = await kit.call("POST", f"/v1/datasets/{ds}/versions", params={"format": "jsonl"},
                                   content="\n".join(json.dumps(i) for i in items(1000)).encode())
            assert again.status_code == 201 and again.json()["digest"] == r.json()["version"]["digest"]
            assert len(await all_items(kit, ds, 2)) == 1000
    finally:
        pg_server.drop_database(dsn)
