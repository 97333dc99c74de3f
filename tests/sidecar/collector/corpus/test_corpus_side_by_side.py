"""Work that runs side by side (issue 25, item 3): the collector's runner takes items from every
runnable group through one bounded worker pool, round-robin by team, each group within its own
caps. Two teams' experiments and an A/B comparison run at the same time and end in about the
time of one, where one after another they take the sum (the fake provider's scripted latency
makes the calls the long part). A group whose model cannot resolve ends ``failed`` with a named
error the first time the runner looks at it, and is never retried."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, cast

import pytest

from sidecar.collector.corpus.runner import CorpusRunner, RunnerSettings
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.demo.fake_provider import FakeModel, FakeProvider
from sidecar.engine.parts import open_providers, price_book, resolver
from sidecar.trials.create import Resolved
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, wait_for
from tests.sidecar.collector.corpus.runs_kit import Api, collector_toml, config_of, group_body, open_collector

ITEMS = 12
METRICS = [{"name": "pref", "kind": "paired_judge"}, {"name": "latency", "kind": "latency"}]


async def team_suite(api: Api, team: str) -> str:
    lines = "\n".join(json.dumps({"input": f"{team} question {i}", "expected": f"answer {i}"}) for i in range(ITEMS))
    r = await api.call("POST", "/v1/datasets", params={"team": team, "name": "ds", "format": "jsonl"},
                       content=lines.encode(), teams=(team,))
    assert r.status_code == 201, r.text
    s = await api.call("POST", "/v1/suites", json={"name": "suite", "dataset_id": r.json()["id"], "dataset_version": 1,
                                                   "metrics": METRICS}, teams=(team,))
    assert s.status_code == 201, s.text
    suite_id: str = s.json()["id"]
    return suite_id


async def start_experiment(api: Api, team: str, suite: str, key: str) -> str:
    body = group_body(suite)
    ready = await api.call("POST", "/v1/comparisons/readiness", json=body, teams=(team,))
    assert ready.status_code == 200, ready.text
    r = await api.call("POST", "/v1/comparisons", json={**body, "readiness_token": ready.json()["readiness_token"]},
                       headers={"Idempotency-Key": key}, teams=(team,))
    assert r.status_code == 201, r.text
    gid: str = r.json()["id"]
    return gid


async def start_ab(api: Api, team: str, suite: str) -> str:
    r = await api.call("POST", "/v1/evaluations/comparisons", teams=(team,), json={
        "suite_id": suite, "baseline": {"type": "model", "ref": INCUMBENT}, "candidate": {"type": "model", "ref": CANDIDATE}})
    assert r.status_code == 201, r.text
    gid: str = r.json()["id"]
    return gid


async def ended(api: Api, groups: dict[str, str]) -> None:
    async def done() -> bool:
        for gid, team in groups.items():
            status = (await api.call("GET", f"/v1/comparisons/{gid}", teams=(team,))).json()["status"]
            if status != "completed":
                assert status in ("admitted", "running"), status
                return False
        return True

    await wait_for(done, timeout=120, what=f"groups {sorted(groups)} to complete")


async def test_two_teams_experiments_and_an_ab_comparison_run_at_the_same_time(tmp_path: Path) -> None:
    slow = (250.0, 250.0)  # each generation: the calls are the long part of an item
    models = {INCUMBENT: FakeModel(quality=0.5, quality_noise=0.02, filler_words=(2, 6), latency_ms=slow),
              CANDIDATE: FakeModel(quality=0.8, quality_noise=0.02, filler_words=(2, 6), latency_ms=slow),
              JUDGE: FakeModel(judge=True, latency_ms=(20.0, 20.0))}
    async with FakeProvider(models, seed=3) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url, workers=8)  # 4 items per group, a pool of 16
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            runner = server.corpus_runner
            assert runner is not None
            suites = {team: await team_suite(api, team) for team in ("team-a", "team-b")}

            began = time.monotonic()
            for n, (start, team) in enumerate([(start_experiment, "team-a"), (start_experiment, "team-b"),
                                                (start_ab, "team-a")]):
                gid = await (start_experiment(api, team, suites[team], f"seq-{n}") if start is start_experiment
                             else start_ab(api, team, suites[team]))
                await ended(api, {gid: team})
            one_after_another = time.monotonic() - began
            assert runner.peak_groups == 1

            began = time.monotonic()
            together = {await start_experiment(api, "team-a", suites["team-a"], "par-a"): "team-a",
                        await start_experiment(api, "team-b", suites["team-b"], "par-b"): "team-b",
                        await start_ab(api, "team-a", suites["team-a"]): "team-a"}
            await ended(api, together)
            side_by_side = time.monotonic() - began
            peak, calls = runner.peak_groups, fake.calls[INCUMBENT] + fake.calls[CANDIDATE]
        finally:
            await api.aclose()
            await server.stop()
    print(f"\nside by side: 3 groups of {ITEMS} items x 2 arms (calls of 250 ms, 4 items per group at once): "
          f"one after another {one_after_another:.2f} s, at the same time {side_by_side:.2f} s "
          f"({side_by_side / one_after_another:.2f}x); groups in hand at once: {peak}; generation calls {calls}")
    assert peak == 3, "the three groups had items in hand at the same time"
    assert calls == 2 * 3 * 2 * ITEMS, "every invocation called once"
    assert side_by_side < 0.75 * one_after_another


async def test_a_group_whose_model_cannot_resolve_ends_failed_with_its_error_and_is_never_retried(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeProvider({INCUMBENT: FakeModel(), CANDIDATE: FakeModel(), JUDGE: FakeModel(judge=True)}) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        config = config_of(path)
        server = await open_collector(path)
        api = Api(auth, server.url)
        runner: CorpusRunner | None = None
        try:
            assert server.corpus_runner is not None and server.store is not None
            await server.corpus_runner.stop()  # this test runs the group with a runner missing one model
            server.corpus_runner = None
            suite = await team_suite(api, "team-a")
            gid = await start_experiment(api, "team-a", suite, "k-missing")
            known = resolver(config, price_book(config))

            def resolve(name: str) -> Resolved:
                if name == CANDIDATE:
                    raise LookupError(f"model {name!r} is not a configured alias")
                return known(name)

            runner = CorpusRunner(store=cast(ControlPlaneStore, server.store), open_providers=lambda: open_providers(config),
                                  resolve=resolve, settings=RunnerSettings())
            caplog.set_level(logging.ERROR, logger="shadowtrial.corpus.runner")
            await runner.start()
            view: dict[str, Any] = {}

            async def failed() -> bool:
                view.update((await api.call("GET", f"/v1/comparisons/{gid}")).json())
                return bool(view["status"] == "failed")

            await wait_for(failed, what="the group to end failed")
            passes = runner.passes
            await wait_for(lambda: _ge(runner, passes + 3), what="three more passes of the runner")
        finally:
            if runner is not None:
                await runner.stop()
            await api.aclose()
            await server.stop()
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    print(f"\nunresolvable model: status {view['status']}, error {view['run']['error']!r}; errors logged {errors}")
    assert view["run"]["error"] == f"model_unavailable: arm 'next': model {CANDIDATE!r} is not a configured alias"
    assert fake.calls[INCUMBENT] == fake.calls[CANDIDATE] == 0, "nothing of a group that cannot run is called"
    assert len(errors) == 1, "said once, never retried on a timer"


async def _ge(runner: CorpusRunner, n: int) -> bool:
    return runner.passes >= n
