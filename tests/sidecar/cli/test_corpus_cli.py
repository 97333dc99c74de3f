"""``shadowtrial datasets import|list|show`` against a corpus API on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sidecar.cli.main import main
from tests.sidecar.collector.corpus.corpus_kit import CorpusKit


async def test_datasets_import_list_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with CorpusKit(tmp_path) as kit:
        env = {"SHADOWTRIAL_CORPUS_URL": kit.url, "SHADOWTRIAL_TOKEN": kit.auth.token(roles=["developer"],
                                                                                     teams=["team-a"])}
        csv_file = tmp_path / "cases.csv"
        csv_file.write_text("input,expected\nhello,hi\nbye,ciao\n")
        code = await asyncio.to_thread(main, ["datasets", "import", str(csv_file), "--team", "team-a", "--name", "c"], env)
        out = capsys.readouterr().out
        assert code == 0 and "version 1: 2 items, import" in out, out
        dataset_id = out.split()[1]
        jsonl = tmp_path / "more.jsonl"
        jsonl.write_text('{"input": "hello", "expected": "hi"}\n')
        code = await asyncio.to_thread(main, ["datasets", "import", str(jsonl), "--dataset", dataset_id], env)
        assert code == 0 and "version 2: 1 items, import from version 1" in capsys.readouterr().out
        assert await asyncio.to_thread(main, ["datasets", "list"], env) == 0
        assert f"{dataset_id}  team-a/c  latest version 2" in capsys.readouterr().out
        assert await asyncio.to_thread(main, ["datasets", "show", dataset_id], env) == 0
        assert "version 2" in capsys.readouterr().out
        bad = tmp_path / "bad.csv"
        bad.write_text("input,metadata\nok,{}\nno,{x\n")
        with pytest.raises(SystemExit) as refused:
            await asyncio.to_thread(main, ["datasets", "import", str(bad), "--team", "team-a", "--name", "b"], env)
        assert str(refused.value.code).startswith("shadowtrial: 400 invalid_dataset: line 3: metadata is not JSON")
        assert str(refused.value.code).endswith("(field line 3: metadata)")
