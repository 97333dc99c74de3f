"""Issue 24, items 4-8 and 13, over HTTP against a real collector: the A/B verdict's equivalent
and inconclusive rules, a delta exactly at the tolerance, the A/B API's messages and codes,
admission counting five attempts per judgment, a start retried under the caller's current
rights, and a group whose starter is revoked mid-run."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from sidecar.demo.fake_provider import FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, wait_for
from tests.sidecar.collector.corpus.corpus_kit import CorpusKit
from tests.sidecar.collector.corpus.runs_kit import (
    TEAM,
    Api,
    collector_toml,
    group_body,
    open_collector,
    planted_models,
)
from tests.sidecar.collector.corpus.test_corpus_comparisons import group, ready, start, suite

PATH = "/v1/evaluations/comparisons"
PREFIX = "The evaluation comparison is invalid: "


async def finished(api: Api, cid: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    async def done() -> bool:
        seen.update((await api.call("GET", f"{PATH}/{cid}")).json())
        return seen["verdict"] is not None

    await wait_for(done, what="the A/B comparison's verdict")
    return seen


async def dataset_items(api: Api, n: int, name: str) -> tuple[str, list[dict[str, Any]]]:
    ds = await api.dataset(n, name=name)
    got = await api.call("GET", f"/v1/datasets/{ds}/versions/1/items", reads_content=True)
    return ds, got.json()["items"]


def right_on(items: list[dict[str, Any]], k: int) -> dict[str, str]:
    """Given answers right (the expected text) on the first ``k`` items, wrong on the rest."""
    return {it["id"]: (it["expected"] if n < k else "wrong") for n, it in enumerate(items)}


def given(suite_id: str, baseline: dict[str, str] | None, candidate: dict[str, str] | None,
          **over: Any) -> dict[str, Any]:
    outputs = {side: answers for side, answers in (("baseline", baseline), ("candidate", candidate))
               if answers is not None}
    return {"suite_id": suite_id, "baseline": {"type": "prompt", "ref": "support-v1"},
            "candidate": {"type": "prompt", "ref": "support-v2"}, "tolerance": 0.05, "outputs": outputs, **over}


async def test_ab_deltas_within_and_at_the_tolerance_read_equivalent(tmp_path: Path) -> None:
    """Items 4 and 13: 10 -> 11, 5 -> 6 and 20 -> 19 right of 20 at a tolerance of 0.05 are all one
    item of 20, exactly the tolerance: within it, so `equivalent` (before: never equivalent — the
    rule wanted the whole interval inside +-0.05; and in floats the three deltas fall either side
    of 0.05). 12 -> 12 (nothing differs) is equivalent too; 10 -> 12 is beyond the tolerance and
    its interval does not settle it: inconclusive."""
    async with FakeProvider(planted_models(), seed=3) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            ds, items = await dataset_items(api, 20, "ds20")
            exact = await api.suite(ds, [{"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}}],
                                    name="exact")
            verdicts: dict[tuple[int, int], dict[str, Any]] = {}
            for before, after in ((10, 11), (5, 6), (20, 19), (12, 12), (10, 12)):
                r = await api.call("POST", PATH, json=given(exact, right_on(items, before), right_on(items, after)))
                assert r.status_code == 201, r.text
                verdicts[(before, after)] = await finished(api, r.json()["id"])
        finally:
            await api.aclose()
            await server.stop()
    summary = {k: (v["verdict"], v["metrics"][0]["delta"], v["metrics"][0]["interval"]) for k, v in verdicts.items()}
    print(f"\nA/B over 20 given answers, tolerance 0.05: {summary}")
    for move in ((10, 11), (5, 6), (20, 19)):
        row = verdicts[move]["metrics"][0]
        assert abs(row["delta"]) == 0.05 and row["code"] == "equivalent", (move, row)
        assert verdicts[move]["verdict"] == "equivalent", move
    assert verdicts[(12, 12)]["verdict"] == "equivalent"
    assert verdicts[(10, 12)]["verdict"] == "inconclusive"


async def test_ab_a_metric_scored_on_one_side_only_reads_inconclusive(tmp_path: Path) -> None:
    """Item 4: given answers on the baseline, the model called on the candidate: latency is scored
    on the candidate only. "inconclusive — a metric has no score on one side": before, latency was
    left out and the verdict read from the grader alone (here a regression: every given answer is
    right, no model answer is). Given answers on both sides: latency has no score on either side,
    so it is left out and the grader decides."""
    async with FakeProvider(planted_models(), seed=4) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            ds, items = await dataset_items(api, 24, "ds24")
            timed = await api.suite(ds, [{"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}},
                                         {"name": "latency", "kind": "latency"}], name="timed")
            one_side = await api.call("POST", PATH, json={
                "suite_id": timed, "baseline": {"type": "prompt", "ref": "support-v1"},
                "candidate": {"type": "model", "ref": CANDIDATE}, "tolerance": 0.05,
                "outputs": {"baseline": right_on(items, 24)}})
            assert one_side.status_code == 201, one_side.text
            both_given = await api.call("POST", PATH, json=given(timed, right_on(items, 24), right_on(items, 0)))
            assert both_given.status_code == 201, both_given.text
            mixed = await finished(api, one_side.json()["id"])
            given_only = await finished(api, both_given.json()["id"])
        finally:
            await api.aclose()
            await server.stop()
    rows = {m["metric"]: m for m in mixed["metrics"]}
    print(f"\none side scored: {mixed['verdict']} {[(m['metric'], m['code'], m['delta']) for m in mixed['metrics']]}; "
          f"both given: {given_only['verdict']}")
    assert rows["exact"]["code"] == "regression"
    assert rows["latency"]["baseline"] is None and rows["latency"]["candidate"] is not None
    assert rows["latency"]["applicable"] is True and rows["latency"]["code"] == "inconclusive"
    assert mixed["verdict"] == "inconclusive"
    latency = next(m for m in given_only["metrics"] if m["metric"] == "latency")
    assert latency["applicable"] is False and given_only["verdict"] == "regression"


async def test_ab_messages_codes_rights_and_list_verdicts(tmp_path: Path) -> None:
    """Item 5: every `comparison_invalid` message begins "The evaluation comparison is invalid: "
    and names its field right after the colon; a suite filter that is not a suite is `404
    comparison_not_found` (before: `200 []`); the list and the detail are `403 forbidden` for a
    caller whose roles may not read (before: `200 []`); each list row carries its `verdict`."""
    async with FakeProvider(planted_models(), seed=5) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            ds, items = await dataset_items(api, 20, "ds20")
            exact = await api.suite(ds, [{"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}}],
                                    name="exact")
            b: dict[str, Any] = {
                "suite_id": exact, "baseline": {"type": "model", "ref": INCUMBENT, "version": "2024-06"},
                "candidate": {"type": "model", "ref": CANDIDATE, "version": "2025-01"}, "tolerance": 0.05}
            invalid = {
                "$.baseline": {**b, "baseline": "gpt"},
                "$.baseline.ref": {**b, "baseline": {"type": "model"}},
                "$.candidate.ref": {**b, "candidate": {"type": "model", "ref": ""}},
                "$.baseline.type": {**b, "baseline": {"type": "robot", "ref": INCUMBENT}},
                "$.candidate": {**b, "candidate": dict(b["baseline"])},
                "$.tolerance": {**b, "tolerance": 1.5},
                "$.outputs": {**b, "outputs": "not an object"},
                "$.suite_id": {**b, "suite_id": ""},
                "$.colour": {**b, "colour": "blue"},
            }
            refusals = {}
            for field, bad in invalid.items():
                r = await api.call("POST", PATH, json=bad)
                refusals[field] = (r.status_code, r.json()["error"])
            whole = await api.call("POST", PATH, json=["not", "an", "object"])
            made = await api.call("POST", PATH, json=given(exact, right_on(items, 20), right_on(items, 0)))
            assert made.status_code == 201, made.text
            one = await finished(api, made.json()["id"])
            listed = await api.call("GET", PATH)
            by_suite = await api.call("GET", PATH, params={"suite_id": exact})
            not_a_suite = await api.call("GET", PATH, params={"suite_id": "su_nope"})
            foreign = await api.call("GET", PATH, params={"suite_id": exact}, roles=("tenant_admin",),
                                     teams=("team-b",))
            no_reader = await api.call("GET", PATH, roles=("gateway",))
            no_reader_one = await api.call("GET", f"{PATH}/{one['id']}", roles=("gateway",))
            viewer = await api.call("GET", PATH, roles=("viewer",))
            stranger = await api.call("GET", PATH, roles=("tenant_admin",), teams=("team-b",))
        finally:
            await api.aclose()
            await server.stop()
    print(f"\nrefusals: {[(f, e['message']) for f, (_, e) in refusals.items()]}")
    for field, (status, error) in refusals.items():
        assert (status, error["code"], error["field"]) == (422, "comparison_invalid", field), (field, error)
        assert error["message"].startswith(PREFIX), error
        assert error["message"][len(PREFIX):].startswith(field.removeprefix("$.")), error
    assert whole.status_code == 422 and whole.json()["error"]["message"].startswith(PREFIX + "body")
    assert not_a_suite.status_code == 404 and not_a_suite.json()["error"]["code"] == "comparison_not_found"
    assert foreign.status_code == 404 and foreign.json()["error"]["code"] == "comparison_not_found"
    for refused in (no_reader, no_reader_one):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert viewer.status_code == 200 and stranger.status_code == 200 and stranger.json()["comparisons"] == []
    assert one["verdict"] == "regression"
    for answer in (listed, by_suite):
        rows = answer.json()["comparisons"]
        assert [(r["id"], r["verdict"]) for r in rows] == [(one["id"], "regression")], rows


async def test_ab_admission_counts_five_attempts_per_judgment(tmp_path: Path) -> None:
    """Item 6: a paired judge over 200 items plans 200 judgments of the candidate, each with its
    five-attempt allowance: 200 + 1,000 = 1,200 > 1,000, refused (before: 200 + 5, admitted). With
    the grader only (assertions call nothing) the same comparison is admitted."""
    async with FakeProvider(planted_models(), seed=6) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            ds = await api.dataset(200, name="ds200")
            judged = await api.suite(ds, [{"name": "pref", "kind": "paired_judge"}], name="judged")
            body = {"suite_id": judged, "baseline": {"type": "model", "ref": INCUMBENT},
                    "candidate": {"type": "model", "ref": CANDIDATE}, "tolerance": 0.05}
            refused = await api.call("POST", PATH, json=body)
            calls = sum(fake.calls.values())
        finally:
            await api.aclose()
            await server.stop()
    error = refused.json()["error"]
    print(f"\nA/B, paired judge over 200 items: {refused.status_code} {error['code']}: {error['message']}")
    assert refused.status_code == 422 and error["code"] == "comparison_invocation_limit"
    assert "1,200" in error["message"] and calls == 0


async def test_a_start_retried_returns_the_group_under_current_rights(tmp_path: Path) -> None:
    """Item 7: the same key and body return the original group only to a caller who may start it
    now: a viewer re-sending a developer's start is refused (before: 200 and the group)."""
    async with CorpusKit(tmp_path) as kit:
        s = await suite(kit, 5)
        body = group(s)
        token = (await ready(kit, body))["readiness_token"]
        signed = {**body, "readiness_token": token}
        made = await start(kit, signed, "k-retry", roles=["developer"])
        assert made.status_code == 201, made.text
        again = await start(kit, signed, "k-retry", roles=["developer"])
        viewer = await start(kit, signed, "k-retry", roles=["viewer"])
        auditor = await start(kit, signed, "k-retry", roles=["auditor"])
        admin = await start(kit, signed, "k-retry", roles=["tenant_admin"])
    assert again.status_code == 200 and again.json()["id"] == made.json()["id"]
    for refused in (viewer, auditor):
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden", refused.text
        assert made.json()["id"] not in refused.text
    assert admin.status_code == 200 and admin.json()["id"] == made.json()["id"]


class HeldFake(FakeProvider):
    """The fake provider; a generation about ``question {held}`` waits for ``release``."""

    def __init__(self, *args: Any, held: int, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.marker = f"question {held}"
        self.reached = asyncio.Event()
        self.release = asyncio.Event()

    async def _serve(self, request: Any, shape: Any) -> Any:
        body = await request.read()  # aiohttp keeps it: the fake reads it again
        if self.marker.encode() in body:
            messages = json.loads(body).get("messages", [])
            if any(m.get("content") == self.marker for m in messages):  # a generation, not a judgment
                self.reached.set()
                await self.release.wait()
        return await super()._serve(request, shape)


async def test_a_revoked_starter_stops_new_dispatch(tmp_path: Path) -> None:
    """Item 8: the starter's subject is revoked while the group's third item is in flight: that
    item's calls settle, no new item or judgment is dispatched, the group ends
    `starter_unauthorized`, and what was recorded stays readable (before: every item of the group
    was dispatched and it completed)."""
    revoked = tmp_path / "revoked.txt"
    revoked.write_text("# nobody yet\n")
    fake = HeldFake(planted_models(), seed=8, held=2)
    async with fake:
        path, auth = collector_toml(tmp_path, fake.base_url, workers=2)  # one item in hand at a time
        text = path.read_text().replace("[auth]\n", f'[auth]\nrevoked_subjects_file = "{revoked}"\n', 1)
        path.write_text(text)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            s = await api.suite(await api.dataset(10), [
                {"name": "pref", "kind": "paired_judge"}, {"name": "latency", "kind": "latency"},
                {"name": "rating", "kind": "absolute_judge",
                 "judge": {"rubric_text": "Rate the answer. End with [[rating: N]].", "scale": [1, 10]}}])
            body = group_body(s)
            ready_answer = await api.call("POST", "/v1/comparisons/readiness", json=body)
            starter = auth.token(subject="starter-7", roles=("developer",), teams=(TEAM,))
            started = await api.call("POST", "/v1/comparisons",
                                     json={**body, "readiness_token": ready_answer.json()["readiness_token"]},
                                     headers={"Idempotency-Key": "k-revoke", "Authorization": f"Bearer {starter}"})
            assert started.status_code == 201, started.text
            gid = started.json()["id"]
            await asyncio.wait_for(fake.reached.wait(), 30)
            revoked.write_text("starter-7\n")  # the starter loses its rights with item 2 in flight
            judged_at_revocation = fake.calls[JUDGE]
            fake.release.set()
            seen: dict[str, Any] = {}

            async def stopped() -> bool:
                seen.update((await api.call("GET", f"/v1/comparisons/{gid}")).json())
                return bool(seen["status"] != "running" and seen["status"] != "admitted")

            await wait_for(stopped, what="the group to stop")
            runner = server.corpus_runner
            assert runner is not None
            passes = runner.passes
            await wait_for(lambda: _ge(runner.passes, passes + 2), what="two more passes of the runner")
            attempts = (await api.call("GET", f"/v1/comparisons/{gid}/attempts", roles=("viewer",))).json()
            view = (await api.call("GET", f"/v1/comparisons/{gid}", roles=("viewer",))).json()
            judged_after = fake.calls[JUDGE] - judged_at_revocation
            async with httpx.AsyncClient() as client:
                as_starter = await client.get(f"{server.url}/v1/comparisons/{gid}",
                                              headers={"Authorization": f"Bearer {starter}"})
        finally:
            fake.release.set()
            await api.aclose()
            await server.stop()
    items = sorted({a["item_id"] for a in attempts["attempts"]})
    statuses = sorted((a["item_id"], a["arm"], a["status"]) for a in attempts["attempts"])
    print(f"\nrevoked mid-run: status {view['status']}; attempts {statuses}")
    assert view["status"] == "starter_unauthorized"
    assert len(items) == 3 and all(a["status"] == "completed" for a in attempts["attempts"]), statuses
    assert len(attempts["attempts"]) == 6  # items 0-2, both arms: the third item's calls settled
    assert judged_after == 0, "no judgment dispatched once the starter lost its rights"
    third = [a for a in attempts["attempts"] if not any(s["status"] == "scored" and s["metric"] == "rating"
                                                        for s in a["scores"])]
    assert len(third) == 2 and all(any(s["metric"] == "rating" and s["status"] == "error" for s in a["scores"])
                                   for a in third), third
    assert as_starter.status_code == 401  # the revoked subject itself reads nothing
    assert view["run"]["ended_at"] is not None


async def _ge(a: int, b: int) -> bool:
    return a >= b
