"""The ``shadowtrial`` client commands against a real running sidecar.

``sidecar.cli.main.main`` uses sync httpx, so each call runs in a worker thread while
the sidecar keeps serving on the test's event loop.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Mapping

import pytest

from sidecar.cli.main import main
from tests.harness import CANDIDATE, INCUMBENT, Harness, exchange
from tests.ports import reserved_port

UNPRICED_EXTRA = """
[models.unpriced-model]
provider = "local"
"""


def _run(argv: list[str], environ: Mapping[str, str]) -> int | SystemExit:
    try:
        return main(argv, environ)
    except SystemExit as exc:  # returned, not raised: a SystemExit must not cross the event loop
        return exc


async def cli(argv: list[str], environ: Mapping[str, str]) -> int:
    result = await asyncio.to_thread(_run, argv, environ)
    if isinstance(result, SystemExit):
        raise result
    return result


def env_for(h: Harness) -> dict[str, str]:
    assert h.sidecar
    return {"SHADOWTRIAL_ADMIN_URL": h.sidecar.admin_url}


def create_args(*extra: str) -> list[str]:
    return ["trials", "create", "--team", "team-a", "--incumbent", INCUMBENT, "--candidate", CANDIDATE,
            "--cap-usd", "2.5", *extra]


async def test_create_show_list_stop_and_live(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        env = env_for(h)

        assert await cli(create_args("--sample-rate", "1.0"), env) == 0
        out = capsys.readouterr().out
        trials = (await h.admin.get("/v1/trials")).json()["trials"]  # type: ignore[union-attr]
        assert len(trials) == 1
        trial_id = trials[0]["id"]
        assert f"trial {trial_id}  [running]  team team-a" in out
        assert f"{CANDIDATE} (candidate) vs {INCUMBENT} (incumbent)" in out
        assert "Collecting" in out and "small sample" in out
        assert "$2.5000 cap" in out

        await h.send([exchange(i) for i in range(3)])
        await h.settle(trial_id, 3)

        assert await cli(["trials", "show", trial_id], env) == 0
        out = capsys.readouterr().out
        assert f"trial {trial_id}" in out
        assert "judged 3" in out

        assert await cli(["trials", "list"], env) == 0
        out = capsys.readouterr().out
        header, _sep, row = out.strip().splitlines()
        assert header.split() == ["id", "team", "status", "candidate", "incumbent", "verdict", "cases", "spend"]
        assert row.split()[:7] == [trial_id, "team-a", "running", CANDIDATE, INCUMBENT, "Collecting", "3"]

        assert await cli(["live"], env) == 0
        out = capsys.readouterr().out
        assert "alerts: none firing" in out
        assert trial_id in out
        assert "evaluation spend:" in out and "never summed into gateway spend" in out

        assert await cli(["trials", "stop", trial_id], env) == 0
        out = capsys.readouterr().out
        assert f"trial {trial_id}  [stopped]" in out
        assert "Inconclusive" in out
        assert (await h.trial(trial_id))["status"] == "stopped"

        assert await cli(["live"], env) == 0
        assert "no running trials" in capsys.readouterr().out


async def test_json_output_parses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        env = env_for(h)
        assert await cli([*create_args("--route", "chat", "--gateway", "gw-1", "--expected-cases", "500",
                                       "--tolerance", "0.1"), "--json"], env) == 0
        created = json.loads(capsys.readouterr().out)
        assert created["status"] == "running"
        assert (created["route"], created["gateway"], created["spend_cap_usd"]) == ("chat", "gw-1", 2.5)
        assert created["verdict"]["tolerance"] == 0.1
        trial_id = created["id"]

        assert await cli(["trials", "show", trial_id, "--json"], env) == 0
        assert json.loads(capsys.readouterr().out)["id"] == trial_id

        assert await cli(["trials", "list", "--json"], env) == 0
        assert [t["id"] for t in json.loads(capsys.readouterr().out)["trials"]] == [trial_id]

        assert await cli(["live", "--json"], env) == 0
        live = json.loads(capsys.readouterr().out)
        assert [t["id"] for t in live["running_trials"]] == [trial_id]
        assert "evaluation_spend" in live

        assert await cli(["trials", "stop", trial_id, "--json"], env) == 0
        assert json.loads(capsys.readouterr().out)["status"] == "stopped"


async def test_admin_flag_wins_over_the_environment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar
        with reserved_port() as nobody:
            env = {"SHADOWTRIAL_ADMIN_URL": f"http://127.0.0.1:{nobody}"}
            assert await cli(["trials", "list", "--admin", h.sidecar.admin_url + "/"], env) == 0
        assert capsys.readouterr().out.strip() == "no trials"


async def test_idempotency_key_makes_a_retried_create_harmless(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        env = env_for(h)
        ids = []
        for _ in range(2):
            assert await cli([*create_args("--idempotency-key", "retry-1"), "--json"], env) == 0
            ids.append(json.loads(capsys.readouterr().out)["id"])
        assert ids[0] == ids[1]
        # Without a key, each command makes its own trial (a fresh key per invocation).
        assert await cli([*create_args(), "--json"], env) == 0
        assert json.loads(capsys.readouterr().out)["id"] != ids[0]


@pytest.mark.parametrize(
    ("argv", "status", "code"),
    [
        (create_args("--sample-rate", "1.5"), "400", "invalid_request"),
        (["trials", "create", "--team", "team-a", "--incumbent", INCUMBENT, "--candidate", "unpriced-model",
          "--cap-usd", "1"], "422", "spend_unbounded"),
        (["trials", "show", "tr_missing"], "404", "not_found"),
    ],
    ids=["bad-sample-rate", "unpriced-candidate", "unknown-trial"],
)
async def test_an_api_error_exits_nonzero_with_its_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], status: str, code: str
) -> None:
    async with Harness(tmp_path, extra=UNPRICED_EXTRA) as h:
        with pytest.raises(SystemExit) as info:
            await cli(argv, env_for(h))
        message = info.value.code
        assert isinstance(message, str)  # printed to stderr by the interpreter, exit status 1
        assert message.startswith(f"shadowtrial: {status} {code}: ")
        assert capsys.readouterr().out == ""
        assert (await h.admin.get("/v1/trials")).json()["trials"] == []  # type: ignore[union-attr]


async def test_a_bad_request_names_the_field(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        with pytest.raises(SystemExit) as info:
            await cli(create_args("--sample-rate", "1.5"), env_for(h))
        assert "(field $.sample_rate)" in str(info.value.code)


async def test_stopping_twice_exits_nonzero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        t = await h.create_trial()
        env = env_for(h)
        assert await cli(["trials", "stop", t["id"]], env) == 0
        capsys.readouterr()
        with pytest.raises(SystemExit) as info:
            await cli(["trials", "stop", t["id"]], env)
        assert str(info.value.code).startswith("shadowtrial: 409 trial_not_running: ")


async def test_an_unreachable_admin_url_fails_with_a_clear_message(capsys: pytest.CaptureFixture[str]) -> None:
    with reserved_port() as nobody:  # held, with nothing listening: refused every time
        url = f"http://127.0.0.1:{nobody}"
        for argv in (["trials", "list"], ["live"], create_args()):
            with pytest.raises(SystemExit) as info:
                await cli(argv, {"SHADOWTRIAL_ADMIN_URL": url})
            message = str(info.value.code)
            assert message.startswith(f"shadowtrial: cannot reach the admin API at {url}/v1/"), message
            assert "Traceback" not in message
    assert capsys.readouterr().out == ""


async def test_a_url_that_is_not_the_admin_api_fails_with_a_clear_message(tmp_path: Path) -> None:
    """Pointed at some other HTTP server (here the fake provider), the CLI says so instead of crashing."""
    async with Harness(tmp_path) as h:
        env: dict[str, Any] = {"SHADOWTRIAL_ADMIN_URL": h.fake.root_url}
        with pytest.raises(SystemExit) as info:
            await cli(["trials", "list"], env)
        message = str(info.value.code)
        assert message.startswith("shadowtrial: 404"), message
        assert "not the admin API" in message
