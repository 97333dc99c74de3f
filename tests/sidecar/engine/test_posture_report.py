"""The pieces of posture around the API: the pure rules (:mod:`policies.posture`), a sidecar's
gateway report and the pauses it causes (:mod:`sidecar.engine.posture_report`, what the
engine's heartbeat runs), and the ``shadowtrial teams posture`` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policies.posture import (
    Report, live_uplink, may_set_posture, needs_pause, posture_site, retention_features,
)
from policies.roles import Principal
from sidecar.engine.posture_report import report_and_pause
from sidecar.store import make_store
from tests.harness import Harness
from tests.sidecar.cli.test_cli import cli, env_for
from tests.store.factories import trial

# -- policies ---------------------------------------------------------------------


def test_a_gateway_unheard_for_longer_than_the_limit_stops_counting() -> None:
    reports = [Report("gw-1", True, 100.0), Report("gw-2", False, 10.0)]
    assert live_uplink(reports, now=110.0, stale_after_s=50.0) == {"gw-1": True}
    assert live_uplink(reports, now=60.0, stale_after_s=50.0) == {"gw-1": True, "gw-2": False}
    # gw-2 (content off) holds the team local while it counts; once stale, it no longer does.
    kw: dict[str, Any] = dict(prompt_retention=True, cut_over=True, stale_after_s=50.0)
    assert posture_site(reports, now=60.0, **kw) == "local"
    assert posture_site(reports, now=110.0, **kw) == "control_plane"
    assert posture_site(reports, now=1000.0, **kw) == "local"  # no gateway counts


@pytest.mark.parametrize("retention,cut_over,site", [(True, True, "control_plane"), (False, True, "local"),
                                                       (True, False, "local"), (False, False, "local")])
def test_the_site_needs_uplink_retention_and_cut_over(retention: bool, cut_over: bool, site: str) -> None:
    assert posture_site([Report("gw", True, 0.0)], prompt_retention=retention, cut_over=cut_over, now=0.0,
                        stale_after_s=1.0) == site


def test_needs_pause_on_site_or_retention() -> None:
    assert not needs_pause(pinned_site="local", pinned_retention=True, site="local", prompt_retention=True)
    assert needs_pause(pinned_site="local", pinned_retention=True, site="control_plane", prompt_retention=True)
    assert needs_pause(pinned_site="local", pinned_retention=True, site="local", prompt_retention=False)


def test_retention_off_makes_replay_and_dataset_seeding_unavailable_with_the_reason() -> None:
    on = retention_features(True)
    assert all(f.available and f.reason is None for f in on.values()) and set(on) == {"replay", "dataset_seeding"}
    off = retention_features(False)
    assert all(not f.available and f.reason and "retention is off" in f.reason for f in off.values())


def test_setting_posture_needs_tenant_admin_of_the_team_or_platform_admin() -> None:
    assert may_set_posture(Principal.of("p", ["platform_admin"], []), "a")
    assert may_set_posture(Principal.of("t", ["tenant_admin"], ["a"]), "a")
    assert not may_set_posture(Principal.of("t", ["tenant_admin"], ["b"]), "a")
    for role in ("developer", "security_officer", "viewer", "auditor", "finops", "gateway"):
        assert not may_set_posture(Principal.of("x", [role], ["a"]), "a"), role


# -- the gateway report ----------------------------------------------------------


async def test_a_report_that_moves_the_site_pauses_the_trials_it_moves(tmp_path: Path) -> None:
    store = make_store(str(tmp_path / "s.db"))
    await store.open()
    try:
        await store.put_posture("a", prompt_retention=True, cut_over=True, expected_revision=None, site="local",
                                now=0.0, by="x", reason="r")
        await store.create_trial(trial("t-local", team="a", execution_site="local", prompt_retention=True))
        await store.create_trial(trial("t-b", team="b", execution_site="local", prompt_retention=True))
        kw: dict[str, Any] = dict(teams=["a", "b"], stale_after_s=30.0, default_retention=lambda team: True)
        # gw-2 reports content off: the team stays local, nothing is paused.
        assert await report_and_pause(store, gateway="gw-2", content_uplink=False, now=1.0, **kw) == []
        assert await report_and_pause(store, gateway="gw-1", content_uplink=True, now=2.0, **kw) == []
        # gw-2 goes silent; gw-1 reports on: once gw-2 is stale, team a's site is the control
        # plane, and its local trial is paused (team b is not cut over: it stays local).
        assert await report_and_pause(store, gateway="gw-1", content_uplink=True, now=20.0, **kw) == []
        paused = await report_and_pause(store, gateway="gw-1", content_uplink=True, now=40.0, **kw)
        assert paused == ["t-local"]
        record = await store.get_trial("t-local")
        assert record is not None and record.status == "posture_changed"
        other = await store.get_trial("t-b")
        assert other is not None and other.status == "running"
    finally:
        await store.close()


async def test_a_stored_posture_wins_over_the_config_seed_on_restart(tmp_path: Path) -> None:
    extra = '[sidecar]\ngateway = "gw-1"\n[teams.team-a]\nprompt_retention = true\n'
    async with Harness(tmp_path, extra=extra) as h:
        assert h.admin is not None
        r = await h.admin.put("/v1/teams/team-a/posture", json={"prompt_retention": False, "cut_over": False})
        assert r.status_code == 200 and r.json()["revision"] == 2
    async with Harness(tmp_path, extra=extra) as h:  # same store file, config still says retention on
        assert h.admin is not None
        view = (await h.admin.get("/v1/teams/team-a/posture")).json()
        assert (view["prompt_retention"], view["revision"]) == (False, 2)
        assert [g["gateway"] for g in view["gateways"]] == ["gw-1"] and view["gateways"][0]["content_uplink"] is False


# -- the CLI ------------------------------------------------------------------------


async def test_teams_posture_show_and_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path, extra='[sidecar]\ngateway = "gw-1"\n[teams.team-a]\n') as h:
        env = env_for(h)
        assert await cli(["teams", "posture", "show", "team-a"], env) == 0
        out = capsys.readouterr().out
        assert "prompt retention  on" in out and "execution site    local" in out and "gw-1: content uplink off" in out
        assert await cli(["teams", "posture", "set", "team-a", "--retention", "off"], env) == 0
        out = capsys.readouterr().out
        assert "prompt retention  off" in out and "replay unavailable" in out
        assert await cli(["teams", "posture", "set", "team-a", "--cut-over", "on", "--json"], env) == 0
        data = json.loads(capsys.readouterr().out)
        assert (data["prompt_retention"], data["cut_over"], data["revision"]) == (False, True, 3)
        with pytest.raises(SystemExit) as caught:
            await cli(["teams", "posture", "set", "team-a", "--retention", "on", "--if-match", "1"], env)
        assert "412 revision_mismatch" in str(caught.value)
        with pytest.raises(SystemExit):
            await cli(["teams", "posture", "set", "team-a"], env)
