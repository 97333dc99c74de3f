"""What the CLI prints (issue 28, item 7): ``--version``; a reader closing the pipe early ends it
quietly; times in UTC, not epoch seconds; what gateway-metered covers; no text slips; and
compare's hint is a command to run, not a request body."""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from sidecar.cli.compare import trial_command
from sidecar.cli.main import EXIT_PIPE_CLOSED, _parser, create_body, main, render_posture
from sidecar.cli.render import render_trial
from sidecar.cli.watches import render_watch
from tests.harness import CANDIDATE, INCUMBENT, Harness
from tests.sidecar.cli.test_cli import cli, env_for

ROOT = Path(__file__).resolve().parents[3]


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"], {})
    assert info.value.code == 0
    assert capsys.readouterr().out == f"shadowtrial {version('shadowtrial')}\n"


async def test_json_into_a_pipe_closed_early_exits_quietly(tmp_path: Path) -> None:
    """``shadowtrial trials list --json | head -1``: the reader is gone before the command writes
    (here for certain: nobody holds the pipe's read end), so the write fails with EPIPE. The
    command ends with status 141 and nothing on stderr, never a BrokenPipeError traceback."""
    async with Harness(tmp_path) as h:
        for _ in range(3):
            await h.create_trial()
        env = {"PATH": os.environ.get("PATH", ""), **env_for(h)}  # no other SHADOWTRIAL_* variable
        read_end, write_end = os.pipe()
        os.close(read_end)
        try:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "sidecar.cli", "trials", "list", "--json",
                stdout=write_end, stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
            )
        finally:
            os.close(write_end)
        _, stderr = await asyncio.wait_for(proc.communicate(), timeout=60)
    assert stderr.decode() == ""
    assert proc.returncode == EXIT_PIPE_CLOSED


async def test_live_posture_and_compare_read_as_words(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path, never_called=()) as h:
        env = env_for(h)
        assert await cli(["live"], env) == 0
        live = capsys.readouterr().out
        # What gateway-metered covers is said beside its figure (the API's own words).
        scope = (await h.admin.get("/v1/live")).json()["evaluation_spend"]["today"]["gateway_metered"]["scope"]  # type: ignore[union-attr]
        assert f"gateway-metered $0.0000: {scope}" in live

        assert await cli(["teams", "posture", "set", "team-a", "--retention", "on"], env) == 0
        capsys.readouterr()
        assert await cli(["teams", "posture", "show", "team-a"], env) == 0
        shown = capsys.readouterr().out
        assert " UTC" in shown and "updated" in shown

        argv = ["compare", "--team", "team-a", "-m", INCUMBENT, "-m", CANDIDATE, "--prompt", "Which is faster?"]
        assert await cli(argv, env) == 0
        out = capsys.readouterr().out
    assert "POST /v1/trials" not in out and "{" not in out.split("nothing of this compare was kept")[1]
    command = next(line.strip() for line in out.splitlines() if line.strip().startswith("shadowtrial trials create"))
    args = _parser().parse_args(shlex.split(command)[1:])
    assert create_body(args) == {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
                                 "spend_cap_usd": 10.0, "sample_rate": 0.1}


def test_posture_times_are_utc_not_epoch_seconds() -> None:
    text = render_posture({
        "team": "search", "revision": 3, "stored": True, "prompt_retention": True, "cut_over": False,
        "execution_site": "local", "stale_after_seconds": 90.0, "updated_at": 1764656375.25, "updated_by": "ops",
        "gateways": [{"gateway": "litellm-eu", "content_uplink": True, "last_seen": 1764656375.5, "live": True}],
    })
    assert "litellm-eu: content uplink on, last seen 2025-12-02 06:19:35 UTC" in text
    assert "updated           2025-12-02 06:19:35 UTC by ops" in text
    assert "1764656375" not in text


def test_the_compare_hint_quotes_what_a_shell_would_split() -> None:
    command = trial_command({"team": "team a", "incumbent_model": "gpt-4o", "candidate_model": "x;y",
                             "spend_cap_usd": 10.0, "sample_rate": 0.1})
    assert command == ("shadowtrial trials create --team 'team a' --incumbent gpt-4o --candidate 'x;y' "
                       "--cap-usd 10.0 --sample-rate 0.1")


def _trial(**health: Any) -> dict[str, Any]:
    return {
        "id": "tr_1", "status": "running", "team": "t", "candidate_model": "c", "incumbent_model": "i",
        "sample_rate": 0.1,
        "verdict": {"wording": "Collecting", "code": "inconclusive", "cases": 1, "win_rate": 0.5, "interval": None,
                    "decision_bounds": None},
        "spend": {"coverage": "partial", "known_micros": 0, "cap_micros": 1, "reserved_micros": 0,
                  "unknown_calls": 1, "held_for_unknown_micros": 0},
        "paired": {"cost_ratio": None, "latency_ratio": None, "cost_cases": 1},
        "judge": {"name": "j", "version_id": "v" * 20},
        "judge_health": health,
        "funnel": {"total": 1, "outcomes": {"judged": 1}, "in_flight": 0},
    }


def test_no_text_slips_in_trial_and_watch_lines() -> None:
    text = render_trial(_trial(first_slot_win_rate=0.521, tie_rate=0.1, error_rate=0.0, position_consistency=0.9))
    assert "first-slot win rate 52.1%, tie rate 10.0%" in text and " ," not in text
    assert "1 judged case" in text and "1 call unpriced" in text and "over 1 paired case" in text
    assert "(s)" not in text
    watch = render_watch({
        "id": "w_1", "team": "t", "status": "active", "trial_id": "tr_1", "old_model": "o", "new_model": "n",
        "sample_rate": 0.01, "judged": 3, "old_wins": 1, "new_wins": 1, "ties": 1, "old_win_rate": 0.5,
        "detector": {"statistic": 0.0, "threshold": 1.0, "baseline": 0.5, "alternative": 0.6, "min_judged": 30,
                     "fired": False},
        "spend_today": {"day": "2026-12-02", "charged_micros": 0, "cap_micros": 1, "reserved_micros": 0},
    })
    assert "judged 3 (1 old win, 1 new win, 1 tie)" in watch
