"""Comparing evidence across runs over HTTP (issue 13 item 5): two groups over two versions of
one dataset, where 10 items were revised between them. Those 10 are listed unmatched on both
sides, never paired; the other items pair on revision and repetition, and each side keeps its
own denominators and spend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeProvider
from tests.sidecar._no_zero_width import assert_no_zero_width
from tests.sidecar.collector.corpus.runs_kit import TEAM, Api, collector_toml, open_collector, planted_models, start_group
from tests.sidecar.collector.corpus.test_corpus_runs import wait_done

METRICS: list[dict[str, Any]] = [
    {"name": "marker", "kind": "grader", "grader": {"type": "contains", "value": "⟨q="}},
    {"name": "latency", "kind": "latency"},
]
ITEMS = 30


async def _suite(api: Api, dataset_id: str, version: int, name: str) -> str:
    r = await api.call("POST", "/v1/suites", json={"name": name, "dataset_id": dataset_id,
                                                    "dataset_version": version, "metrics": METRICS})
    assert r.status_code == 201, r.text
    suite_id: str = r.json()["id"]
    return suite_id


async def test_evidence_across_two_dataset_versions_leaves_revised_items_unmatched(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=11) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            lines = "\n".join(json.dumps({"id": f"i{i}", "input": f"question {i}", "expected": f"answer {i}"})
                              for i in range(ITEMS))
            made = await api.call("POST", "/v1/datasets", params={"team": TEAM, "name": "ds", "format": "jsonl"},
                                  content=lines.encode())
            assert made.status_code == 201, made.text
            ds = made.json()["id"]
            revised = await api.call("POST", f"/v1/datasets/{ds}/edits", json={"base_version": 1, "upsert": [
                {"id": f"i{i}", "input": f"question {i}, revised", "expected": f"answer {i}"} for i in range(10)]})
            assert revised.status_code == 201, revised.text
            groups = []
            for version in (1, 2):
                suite = await _suite(api, ds, version, f"suite-v{version}")
                body = {"suite_id": suite, "repetitions": 2, "primary_metric": "marker",
                        "arms": [{"name": "today", "model": "inc-model"}, {"name": "next", "model": "cand-model"}]}
                started = await start_group(api, body, f"k-v{version}")
                assert started.status_code == 201, started.text
                groups.append(started.json()["id"])
                assert (await wait_done(api, groups[-1]))["status"] == "completed"
            params = {"baseline": f"{groups[0]}:next", "candidate": f"{groups[1]}:next"}
            r = await api.call("GET", "/v1/evaluations/evidence", params=params, roles=("viewer",))
            bad = await api.call("GET", "/v1/evaluations/evidence", params={"baseline": groups[0]})
            other = await api.call("GET", "/v1/evaluations/evidence", params=params, teams=("team-b",))
        finally:
            await api.aclose()
            await server.stop()
    assert r.status_code == 200, r.text
    ev = r.json()
    unmatched = {(u["item_id"], u["reason"]) for u in ev["baseline"]["unmatched"]}
    assert unmatched == {(f"i{i}", "revision_differs") for i in range(10) for _ in (0, 1)}
    assert len(ev["baseline"]["unmatched"]) == len(ev["candidate"]["unmatched"]) == 10 * 2
    assert ev["matched_pairs"] == (ITEMS - 10) * 2, "the 20 unrevised items, each repetition"
    for side in ("baseline", "candidate"):
        assert ev[side]["generation"]["numerator"] == ev[side]["generation"]["denominator"] == ITEMS * 2
        assert ev[side]["spend"]["coverage"] == "complete" and ev[side]["spend"]["known_micros"] > 0
    marker = next(m for m in ev["metrics"] if m["metric_id"] == "marker")
    # Both sides always carry the marker: every case differs by 0. Before issue 23 that was a
    # zero-width [0, 0] "95%" interval; now it is withheld as no_spread (item 6).
    assert marker["paired"] == (ITEMS - 10) * 2 and marker["withheld"] == "no_spread", marker
    assert marker["interval"] is None and marker["mean_delta"] == 0.0
    assert_no_zero_width(ev)
    assert "Adoptable" not in r.text and ev["evidence"] == "corpus"
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "baseline"
    assert other.status_code == 404, "another team's groups are not there"
    print(f"\nevidence: {ev['matched_pairs']} pairs, {len(ev['baseline']['unmatched'])} unmatched per side "
          f"(revised items x repetitions)")
