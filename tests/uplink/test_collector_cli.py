"""``shadowtrial collector``: a config it cannot use is refused in one line, exit 2; what its config mounts."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from sidecar.cli.main import main
from tests.uplink.test_collector import post
from uplink.schema import TrialState, encode_batch


def test_an_unreadable_key_is_refused_at_start(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{tmp_path / "c.db"}"\naudience = "a"\n'
                   f'issuers = ["i"]\n[[collector.keys]]\nkid = "k"\npath = "{tmp_path / "missing.pub"}"\n')
    assert main(["collector", "--config", str(cfg)], {}) == 2
    assert "collector.keys" in capsys.readouterr().err


def test_an_unknown_collector_setting_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[collector]\nlisen = "127.0.0.1:0"\n')
    assert main(["collector", "--config", str(cfg)], {}) == 2
    assert "lisen" in capsys.readouterr().err


async def test_the_collector_serves_the_corpus_api_behind_admin_tokens(tmp_path: Path) -> None:
    """Corpus evidence lives in the control plane: ``shadowtrial collector``'s config mounts the
    corpus routes beside the uplink's, behind the admin API's JWTs (not the uplink's keys)."""
    from sidecar.collector.server import CollectorServer
    from sidecar.config import load_config
    from tests.harness import AuthKit
    from tests.uplink.kit import UplinkKit

    kit, auth = UplinkKit(tmp_path), AuthKit(tmp_path)
    cfg = tmp_path / "collector.toml"
    cfg.write_text(
        f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{kit.db}"\naudience = "{kit.cfg.audience}"\n'
        f'issuers = ["{kit.cfg.issuers[0]}"]\n[[collector.keys]]\nkid = "{kit.cfg.keys[0].kid}"\n'
        f'path = "{kit.cfg.keys[0].path}"\n' + auth.toml()
    )
    config = load_config(str(cfg), {})
    async with CollectorServer(config.collector, config=config) as c:
        async with httpx.AsyncClient(base_url=c.url) as client:
            params = {"team": "team-a", "name": "hard-cases", "format": "jsonl"}
            jsonl = b'{"input": "hello"}\n{"input": "world", "tags": ["x"]}\n'
            assert (await client.post("/v1/datasets", params=params, content=jsonl)).status_code == 401
            writer = {"Authorization": f"Bearer {auth.token(roles=('tenant_admin',), teams=('team-a',))}"}
            made = await client.post("/v1/datasets", params=params, content=jsonl, headers=writer)
            assert made.status_code == 201, made.text
            listed = (await client.get("/v1/datasets", headers=writer)).json()["datasets"]
            assert [d["name"] for d in listed] == ["hard-cases"]
            # Batches stay behind the uplink's keys: an admin token is not an uplink token.
            refused = await client.post("/v1/uplink/batches", headers=writer, content=b"{}")
            assert refused.status_code == 401
            # What it holds is read per team, with the admin API's tokens.
            states = [_state("t-a", "team-a"), _state("t-b", "team-b")]
            sent = await post(kit, c.url, encode_batch("gw-1/s", 1.0, states))
            assert sent.status_code == 200, sent.text
            assert (await client.get("/v1/trials")).status_code == 401
            seen = (await client.get("/v1/trials", headers=writer)).json()["trials"]
            assert [(t["trial_id"], t["team"]) for t in seen] == [("t-a", "team-a")]
            admin = {"Authorization": f"Bearer {auth.token()}"}  # platform_admin: every team
            assert len((await client.get("/v1/trials", headers=admin)).json()["trials"]) == 2
            only_b = (await client.get("/v1/trials", params={"team": "team-b"}, headers=admin)).json()["trials"]
            assert [t["trial_id"] for t in only_b] == ["t-b"]
            viewer_b = {"Authorization": f"Bearer {auth.token(roles=('viewer',), teams=('team-b',))}"}
            assert [t["trial_id"] for t in (await client.get("/v1/trials", headers=viewer_b)).json()["trials"]] == ["t-b"]


def _state(trial_id: str, team: str) -> TrialState:
    return TrialState(id=f"trial:{trial_id}:1", trial_id=trial_id, team=team, revision=1, status="running", at=1.0,
                      incumbent_model="inc", candidate_model="cand", execution_site="local",
                      judge_version_id="jv", verdict="Collecting")
