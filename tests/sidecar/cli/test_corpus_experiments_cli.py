"""``shadowtrial experiments check|start|show|compare`` against a collector on loopback."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from sidecar.cli.main import main
from sidecar.demo.fake_provider import FakeProvider
from tests.harness import CANDIDATE, INCUMBENT
from tests.sidecar.collector.corpus.runs_kit import TEAM, Api, collector_toml, group_body, open_collector, planted_models


async def test_experiments_check_start_follow_show_compare(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with FakeProvider(planted_models(), seed=2) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        server = await open_collector(path)
        api = Api(auth, server.url)
        try:
            suite = await api.suite(await api.dataset(5), [{"name": "pref", "kind": "paired_judge"}])
            env = {"SHADOWTRIAL_CORPUS_URL": server.url,
                   "SHADOWTRIAL_TOKEN": auth.token(roles=["developer"], teams=[TEAM])}
            group = tmp_path / "group.json"
            group.write_text(json.dumps(group_body(suite)))
            assert await asyncio.to_thread(main, ["experiments", "check", str(group)], env) == 0
            checked = capsys.readouterr().out
            # 5 generations per arm, and the judged arm five attempts for each of its 5 judgments (issue 24)
            assert "planned invocations: 35" in checked and "admission: admitted" in checked, checked
            assert fake.calls[INCUMBENT] == fake.calls[CANDIDATE] == 0, "check calls no model"
            assert await asyncio.to_thread(main, ["experiments", "start", str(group), "--follow"], env) == 0
            started = capsys.readouterr().out
            gid = started.split()[1]
            assert "completed" in started and "pref: Inconclusive (Δ +1.000, 95% small sample" in started, started
            assert await asyncio.to_thread(main, ["experiments", "start", str(group)], env) == 0
            assert capsys.readouterr().out.split()[1] == gid, "the same file starts the same group again"
            assert await asyncio.to_thread(main, ["experiments", "show", gid], env) == 0
            shown = capsys.readouterr().out
            assert "arm next: generated 5/5" in shown and "Adoptable" not in shown, shown
            ab = tmp_path / "ab.json"
            ab.write_text(json.dumps({"suite_id": suite, "baseline": {"type": "model", "ref": INCUMBENT},
                                      "candidate": {"type": "model", "ref": CANDIDATE}}))
            assert await asyncio.to_thread(main, ["experiments", "compare", str(ab), "--follow"], env) == 0
            compared = capsys.readouterr().out
            # Five items: no interval, so no direction (issue 23, item 1; this read candidate_better before).
            assert "verdict inconclusive" in compared, compared
        finally:
            await api.aclose()
            await server.stop()
