"""What the evidence comparison refuses, and the spend it reports, over HTTP (issue 24, items 10
and 11): an unfinished (``cap_reached``) or archived experiment cannot be compared; two
experiments compare only within one team and dataset — two datasets with identical content
(so identical content revision ids) are refused, not paired; the full-run spend of a group's
two arms adds up to the group's own spend, judge calls included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeProvider
from tests.sidecar.collector.corpus.runs_kit import (
    TEAM,
    Api,
    collector_toml,
    group_body,
    open_collector,
    planted_models,
    start_group,
)
from tests.sidecar.collector.corpus.test_corpus_runs import wait_done

METRICS: list[dict[str, Any]] = [
    {"name": "marker", "kind": "grader", "grader": {"type": "contains", "value": "⟨q="}},
    {"name": "pref", "kind": "paired_judge"},
]
ITEMS = 12


async def _dataset(api: Api, name: str) -> str:
    lines = "\n".join(json.dumps({"id": f"i{i}", "input": f"question {i}", "expected": f"answer {i}"})
                      for i in range(ITEMS))
    made = await api.call("POST", "/v1/datasets", params={"team": TEAM, "name": name, "format": "jsonl"},
                          content=lines.encode())
    assert made.status_code == 201, made.text
    dataset_id: str = made.json()["id"]
    return dataset_id


async def _group(api: Api, dataset_id: str, key: str, **extra: Any) -> dict[str, Any]:
    suite = await api.suite(dataset_id, METRICS, name=f"suite-{key}")
    started = await start_group(api, group_body(suite, primary="marker", **extra), key)
    assert started.status_code == 201, started.text
    return await wait_done(api, started.json()["id"])


async def test_unfinished_archived_and_foreign_dataset_experiments_are_refused(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=21) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            first, twin = await _dataset(api, "ds-a"), await _dataset(api, "ds-b")  # same content, two datasets
            a = await _group(api, first, "ga")
            b = await _group(api, twin, "gb")
            capped = await _group(api, first, "gcap", spend_cap_usd=0.0005)
            assert a["status"] == b["status"] == "completed" and capped["status"] == "cap_reached"

            async def compare(base: str, cand: str, **kw: Any) -> Any:
                return await api.call("GET", "/v1/evaluations/evidence", params={"baseline": base, "candidate": cand},
                                      **kw)

            same_group = await compare(f"{a['id']}:today", f"{a['id']}:next", roles=("viewer",))
            other_dataset = await compare(f"{a['id']}:next", f"{b['id']}:next")
            unfinished = await compare(f"{capped['id']}:next", f"{a['id']}:next")
            archive_viewer = await api.call("POST", f"/v1/comparisons/{b['id']}/archive", roles=("viewer",))
            archived = await api.call("POST", f"/v1/comparisons/{b['id']}/archive")
            archived_again = await api.call("POST", f"/v1/comparisons/{b['id']}/archive")
            after_archive = await compare(f"{b['id']}:today", f"{b['id']}:next")
            still_readable = await api.call("GET", f"/v1/comparisons/{b['id']}")
        finally:
            await api.aclose()
            await server.stop()

    assert same_group.status_code == 200, same_group.text
    ev = same_group.json()
    # item 11: generation and every grading pass; the two arms add up to the group's own spend
    group_spend = a["run"]["spend"]
    assert ev["candidate"]["grading_spend"]["known_micros"] > 0, "the paired judge's calls are counted"
    assert ev["baseline"]["spend"]["known_micros"] + ev["candidate"]["spend"]["known_micros"] \
        == group_spend["known_micros"], (ev["baseline"]["spend"], ev["candidate"]["spend"], group_spend)

    for refused, field, words in ((other_dataset, "candidate", "dataset"), (unfinished, "baseline", "cap_reached"),
                                  (after_archive, "baseline", "archived")):
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] == "comparison_invalid" and error["field"] == field, error
        assert error["message"].startswith("The evaluation comparison is invalid: ") and words in error["message"]
    assert archive_viewer.status_code == 403
    assert archived.status_code == 200 and archived_again.json()["archived_at"] == archived.json()["archived_at"]
    assert still_readable.status_code == 200, "an archived group stays readable"
    print(f"\nrefused: {other_dataset.json()['error']['message']}\n         {unfinished.json()['error']['message']}"
          f"\n         {after_archive.json()['error']['message']}\nspend: group {group_spend['known_micros']} µ$ = "
          f"{ev['baseline']['spend']['known_micros']} + {ev['candidate']['spend']['known_micros']} "
          f"(grading {ev['candidate']['grading_spend']['known_micros']})")
