"""``shadowtrial send`` against a real sidecar's tap (issue 28, item 1): the example file and
simulated traffic are counted by the trial; a bad line is named and nothing is sent; an
unreachable tap is one line and status 1; the tap's credential is never printed."""

from __future__ import annotations

import asyncio
import io
import json
import os
import sys
import time
from pathlib import Path

import pytest

from sidecar.cli.send import Progress, Tally, rate
from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange
from tests.ports import reserved_port
from tests.sidecar.cli.test_cli import cli

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "deploy" / "examples" / "exchanges.jsonl"


def tap_env(h: Harness, **more: str) -> dict[str, str]:
    assert h.sidecar
    return {"SHADOWTRIAL_TAP_URL": h.sidecar.tap_url, **more}


async def test_the_example_file_is_sent_counted_and_judged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The eight exchanges of deploy/examples/exchanges.jsonl reach a trial of their team and model
    and are judged; their ASCII markers (``<q=0.55>``) are read, so a candidate planted at 0.9
    wins every case (issue 28, item 4: they were ignored and every case was a tie)."""
    lines = [json.loads(line) for line in EXAMPLE.read_text(encoding="utf-8").splitlines()]
    team, model = lines[0]["team"], lines[0]["model"]
    assert all(ex["team"] == team and ex["model"] == model and "<q=0." in ex["response"]["content"] for ex in lines)
    models = {model: FakeModel(), CANDIDATE: FakeModel(quality=0.9, quality_noise=0.0), JUDGE: FakeModel(judge=True)}
    async with Harness(tmp_path, models=models, never_called=(model,)) as h:
        trial = await h.create_trial(team=team, incumbent_model=model, audit_share=0.0)
        assert await cli(["send", str(EXAMPLE), "--json"], tap_env(h)) == 0
        summary = json.loads(capsys.readouterr().out)
        view = await h.settle(trial["id"], len(lines))
    assert {k: summary[k] for k in ("sent", "accepted", "sampled", "shed", "source")} == {
        "sent": 8, "accepted": 8, "sampled": 8, "shed": 0, "source": str(EXAMPLE)}
    assert view["funnel"]["outcomes"]["judged"] == 8
    assert view["verdict"]["cases"] == 8 and view["verdict"]["win_rate"] == 1.0


async def test_simulated_traffic_for_a_team_is_paced_and_counted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(team="team-a")
        argv = ["send", "--simulate", "--team", "team-a", "--model", INCUMBENT, "--count", "40", "--batch", "25"]
        assert await cli(argv, tap_env(h)) == 0
        out = capsys.readouterr().out
        view = await h.settle(trial["id"], 40)
        assert "40 exchanges sent to" in out and "40 accepted, 40 sampled by running trials, 0 shed" in out
        assert view["funnel"]["total"] == 40

        # Paced: batches of a tenth of a second's worth (ceil(100 / 10) = 10), the third leaving
        # 0.2 s after the first. Another team: nothing matches, and the summary says why.
        started = time.monotonic()
        argv = ["send", "--simulate", "--team", "team-b", "--count", "30", "--rate", "100/s"]
        assert await cli(argv, tap_env(h)) == 0
        took = time.monotonic() - started
        out = capsys.readouterr().out
        assert "30 exchanges sent" in out and "none was sampled: no running trial matches" in out
        assert took >= 0.2
        assert await cli([*argv, "--json"], tap_env(h)) == 0
        summary = json.loads(capsys.readouterr().out)
    assert {k: summary[k] for k in ("source", "sent", "accepted", "sampled", "batches")} == {
        "source": "simulated", "sent": 30, "accepted": 30, "sampled": 0, "batches": 3}


async def test_a_bad_line_is_named_and_nothing_is_sent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = json.dumps(exchange(1))
    cases = {
        "wrong-type": ([good, good, json.dumps(exchange(3, team=5))],
                       "line 3: must be a string, got an integer (field $.team)"),
        "missing": ([good, "", json.dumps({k: v for k, v in exchange(3).items() if k != "response"})],
                    "line 3: response is required (field $.response)"),
        "not-json": ([good, "{\"exchange_id\": "], "line 2: JSON is malformed"),
        "an-array": (["[" + good + "]"], "line 1: not an exchange (a JSON object on one line)"),
    }
    async with Harness(tmp_path) as h:
        trial = await h.create_trial()
        for name, (lines, said) in cases.items():
            path = tmp_path / f"{name}.jsonl"
            path.write_text("\n".join(lines) + "\n")
            assert await cli(["send", str(path)], tap_env(h)) == 2, name
            captured = capsys.readouterr()
            assert captured.out == ""
            assert captured.err.startswith(f"shadowtrial: {path}: {said}"), captured.err
            assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
        assert await cli(["send", str(tmp_path / "missing-file.jsonl")], tap_env(h)) == 2
        assert "cannot read" in capsys.readouterr().err
        assert (await h.trial(trial["id"]))["funnel"]["total"] == 0


async def test_the_tap_credential_is_sent_and_never_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret, wrong = "tap-secret-5d1e", "wrong-secret-77aa"
    async with Harness(tmp_path, tap_token_env="TAP_TOKEN", environ={"TAP_TOKEN": secret}) as h:
        argv = ["send", str(EXAMPLE)]
        assert await cli([*argv, "--token", wrong], tap_env(h)) == 1
        refused = capsys.readouterr()
        assert "the tap refused lines 1-8: 401 unauthorized" in refused.err and "--token" in refused.err
        assert await cli(argv, tap_env(h, SHADOWTRIAL_TAP_TOKEN=secret)) == 0
        sent = capsys.readouterr()
    assert "8 exchanges sent" in sent.out
    for text in (refused.out, refused.err, sent.out, sent.err):
        assert secret not in text and wrong not in text


async def test_an_unreachable_tap_is_one_line_and_status_1(tmp_path: Path) -> None:
    """In a real process: no traceback, one line naming the URL, exit status 1."""
    with reserved_port() as nobody:  # held, with nothing listening: refused
        url = f"http://127.0.0.1:{nobody}"
        env = {"PATH": os.environ.get("PATH", ""), "SHADOWTRIAL_TAP_TOKEN": "never-shown-4c2a"}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "sidecar.cli", "send", str(EXAMPLE), "--tap", url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env, cwd=ROOT,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode == 1
        assert out == b""
        lines = err.decode().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"shadowtrial: cannot reach the tap at {url}/v1/exchanges: ")
        assert b"never-shown" not in err


@pytest.mark.parametrize(("text", "per_second"), [("200", 200.0), ("200/s", 200.0), ("600/min", 10.0),
                                                  ("3600/h", 1.0), ("0.5/s", 0.5)])
def test_rates(text: str, per_second: float) -> None:
    assert rate(text) == per_second


@pytest.mark.parametrize("text", ["0", "-5/s", "fast", "10/day", "nan"])
def test_a_bad_rate_is_a_usage_error(text: str, capsys: pytest.CaptureFixture[str]) -> None:
    from sidecar.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["send", "--simulate", "--team", "t", f"--rate={text}"], {})
    assert info.value.code == 2 and "is not a rate" in capsys.readouterr().err


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_a_bar_on_a_terminal_and_plain_lines_otherwise() -> None:
    tally = Tally(sent=50, sampled=3)
    terminal = _Terminal()
    Progress(200, terminal).update(tally)
    assert terminal.getvalue().startswith("\r\033[K[######..................]  25%  50/200 sent")
    plain = io.StringIO()
    Progress(200, plain, every=0.0).update(tally)
    line = plain.getvalue()
    assert line.startswith("send: 50/200 sent") and "sampled 3" in line and "\r" not in line and "\033" not in line
