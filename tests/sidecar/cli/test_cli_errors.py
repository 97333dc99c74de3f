"""The ``shadowtrial`` client commands on awkward input and awkward servers (issue 8, item 10):
clear errors instead of tracebacks, honest reports of a failing server, a flag for every field
of the create body, list filters, and the funnel's cases in flight."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, AsyncIterator, Callable

import httpx
import msgspec
import pytest
from aiohttp import web

from sidecar.cli.main import CREATE_FIELDS, QUIET_LOGGERS, _parser, configure_logging, main
from sidecar.cli.render import render_trial
from sidecar.trials.create import JudgeIn, TrialCreate
from tests.harness import INCUMBENT, Harness, exchange
from tests.sidecar.cli.test_cli import UNPRICED_EXTRA, cli, create_args, env_for


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """An argparse refusal: exit status 2, one message on stderr, no request sent."""
    with pytest.raises(SystemExit) as info:
        main(argv, {"SHADOWTRIAL_ADMIN_URL": "http://127.0.0.1:9"})
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


# -- values that cannot even be sent ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
def test_a_cap_that_is_not_a_finite_number_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(["trials", "create", "--team", "t", "--incumbent", "a", "--candidate", "b", f"--cap-usd={value}"],
                      capsys)
    assert f"argument --cap-usd: {value!r} is not a finite number" in err


@pytest.mark.parametrize("flag", ["--sample-rate", "--tolerance", "--audit-share", "--judge-temperature"])
def test_every_float_flag_refuses_nan(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(create_args(flag, "nan"), capsys)
    assert f"argument {flag}: 'nan' is not a finite number" in err


@pytest.mark.parametrize("key", ["clé", "tab\there", "", "k" * 256], ids=["non-ascii", "control", "empty", "long"])
def test_a_bad_idempotency_key_is_a_usage_error(key: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = usage_error(create_args("--idempotency-key", key), capsys)
    assert "argument --idempotency-key: must be 1 to 255 printable ASCII characters" in err


def test_an_empty_trial_id_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert "argument trial_id: must not be empty" in usage_error(["trials", "show", ""], capsys)


def test_an_unknown_status_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert "argument --status: invalid choice: 'bogus'" in usage_error(["trials", "list", "--status", "bogus"], capsys)


def test_the_idempotency_key_help_says_what_running_again_does(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["trials", "create", "--help"], {})
    text = " ".join(capsys.readouterr().out.split())
    assert "fresh key" not in text and "cannot create two trials" not in text
    assert "running the command again with the same key and the same options prints the trial the first run created" in text
    assert "Without one, every run creates a new trial" in text


# -- ids are one path segment ---------------------------------------------------------------------


@pytest.mark.parametrize("trial_id", ["../../v1/live", "..", ".", "a/b", "a?b=c", "tr_x#y", "é"])
async def test_a_trial_id_is_url_encoded(tmp_path: Path, trial_id: str, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        t = await h.create_trial()
        for action in ("show", "stop"):
            with pytest.raises(SystemExit) as info:
                await cli(["trials", action, trial_id], env_for(h))
            assert info.value.code == f"shadowtrial: 404 not_found: no trial {trial_id!r}"
        assert capsys.readouterr().out == ""
        assert (await h.trial(t["id"]))["status"] == "running"  # nothing else was stopped


# -- servers that fail --------------------------------------------------------------------------------


@pytest.fixture
async def odd_server() -> AsyncIterator[Callable[[web.Response], str]]:
    """A real loopback server answering the next request with the response set on it."""
    answer: list[web.Response] = []

    async def handler(_request: web.Request) -> web.Response:
        return answer[0]

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]

    def serve(response: web.Response) -> str:
        answer[:] = [response]
        return f"http://{host}:{port}"

    yield serve
    await runner.cleanup()


@pytest.mark.parametrize("argv", [["trials", "list"], ["live"], ["trials", "show", "tr_1"], create_args()],
                         ids=["list", "live", "show", "create"])
async def test_a_server_error_is_reported_with_its_status_and_first_bytes(
    odd_server: Callable[[web.Response], str], argv: list[str]
) -> None:
    url = odd_server(web.Response(status=500, text="Traceback (most recent call last):\n  boom"))
    with pytest.raises(SystemExit) as info:
        await cli(argv, {"SHADOWTRIAL_ADMIN_URL": url})
    message = str(info.value.code)
    assert message.startswith("shadowtrial: 500 Internal Server Error from "), message
    assert "the server failed; it answered 'Traceback (most recent call last):\\n  boom'" in message
    assert "not the admin API" not in message


async def test_a_proxy_error_page_is_quoted_and_cut(odd_server: Callable[[web.Response], str]) -> None:
    page = "<html>" + "x" * 1000 + "</html>"
    url = odd_server(web.Response(status=502, text=page, content_type="text/html"))
    with pytest.raises(SystemExit) as info:
        await cli(["live"], {"SHADOWTRIAL_ADMIN_URL": url})
    message = str(info.value.code)
    assert message.startswith("shadowtrial: 502 Bad Gateway from ") and "'<html>xxx" in message
    assert message.endswith("...") and len(message) < 400


async def test_a_server_error_in_the_api_shape_is_reported_by_its_code(odd_server: Callable[[web.Response], str]) -> None:
    err = {"error": {"code": "internal_error", "message": "the sidecar failed", "field": None}}
    url = odd_server(web.json_response(err, status=500))
    with pytest.raises(SystemExit) as info:
        await cli(["trials", "list"], {"SHADOWTRIAL_ADMIN_URL": url})
    assert info.value.code == "shadowtrial: 500 internal_error: the sidecar failed"


async def test_a_success_that_is_not_json_is_not_taken_for_an_answer(odd_server: Callable[[web.Response], str]) -> None:
    url = odd_server(web.Response(status=200, text="hello"))
    with pytest.raises(SystemExit) as info:
        await cli(["trials", "list"], {"SHADOWTRIAL_ADMIN_URL": url})
    message = str(info.value.code)
    assert message.startswith("shadowtrial: 200 OK from ") and "not the admin API's JSON" in message
    assert message.endswith("it begins 'hello'")


async def test_an_unusable_admin_url_is_a_clear_error() -> None:
    with pytest.raises(SystemExit) as info:
        await cli(["live"], {"SHADOWTRIAL_ADMIN_URL": "http://127.0.0.1:99999"})
    assert str(info.value.code).startswith("shadowtrial: "), info.value.code


# -- a flag for every field of the create body ------------------------------------------------------


def test_every_field_of_the_create_body_has_a_flag() -> None:
    reachable = set(CREATE_FIELDS.values())
    wanted = {(f,) for f in TrialCreate.__struct_fields__ if f not in ("judge", "source")}
    wanted |= {("judge", f) for f in JudgeIn.__struct_fields__}
    wanted |= {("source", "from"), ("source", "to")}  # --replay-from/--replay-to; they imply kind "replay"
    assert wanted == reachable
    dests = {a.dest for a in _create_parser()._actions}
    assert set(CREATE_FIELDS) <= dests


def _create_parser() -> Any:
    sub = next(a for a in _parser()._actions if a.dest == "command")
    trials = sub.choices["trials"]
    tsub = next(a for a in trials._actions if a.dest == "action")
    return tsub.choices["create"]


async def test_every_flag_reaches_the_trial(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path, extra=UNPRICED_EXTRA) as h:
        argv = [
            "trials", "create", "--team", "team-a", "--incumbent", INCUMBENT, "--candidate", "unpriced-model",
            "--cap-usd", "3", "--sample-rate", "0.5", "--route", "chat", "--gateway", "gw-1",
            "--expected-cases", "400", "--tolerance", "0.02", "--min-cases", "30", "--audit-share", "0.2",
            "--on-decision", "continue", "--max-tokens", "300", "--judge-model", "unpriced-model", "--judge-rubric", "pairwise-v1",
            "--judge-max-tokens", "99", "--judge-temperature", "0.5",
            "--candidate-price", "0.5", "2", "--judge-price", "1", "4", "--incumbent-price", "2", "8",
            "--idempotency-key", "all flags", "--json",
        ]
        assert await cli(argv, env_for(h)) == 0
        view = json.loads(capsys.readouterr().out)
        r = await h.runtime.store.get_trial(view["id"])
        assert (r.team, r.incumbent_model, r.candidate_model, r.route, r.gateway) == (
            "team-a", INCUMBENT, "unpriced-model", "chat", "gw-1")
        assert (r.cap_micros, r.sample_rate, r.expected_cases, r.delta, r.min_cases, r.audit_share) == (
            3_000_000, 0.5, 400, 0.02, 30, 0.2)
        assert r.candidate_max_tokens == 300 and r.on_decision == "continue"
        assert (r.candidate_price_in, r.candidate_price_out) == (500_000, 2_000_000)
        assert (r.judge_price_in, r.judge_price_out) == (1_000_000, 4_000_000)
        assert (r.incumbent_price_in, r.incumbent_price_out) == (2_000_000, 8_000_000)
        spec = msgspec.json.decode(r.judge_spec_json)
        assert (spec["model"], spec["rubric_id"], spec["max_tokens"], spec["temperature"]) == (
            "unpriced-model", "pairwise-v1", 99, 0.5)
        # The same command again, with the same key: the same trial, not a second one.
        assert await cli(argv, env_for(h)) == 0
        assert json.loads(capsys.readouterr().out)["id"] == view["id"]
        assert len((await h.admin.get("/v1/trials")).json()["trials"]) == 1  # type: ignore[union-attr]


async def test_the_unpriced_refusal_names_a_flag_that_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path, extra=UNPRICED_EXTRA) as h:
        base = ["trials", "create", "--team", "team-a", "--incumbent", INCUMBENT, "--candidate", "unpriced-model",
                "--cap-usd", "1"]
        with pytest.raises(SystemExit) as info:
            await cli(base, env_for(h))
        message = str(info.value.code)
        assert message.startswith("shadowtrial: 422 spend_unbounded: ") and "--candidate-price INPUT OUTPUT" in message
        assert await cli([*base, "--candidate-price", "1", "3"], env_for(h)) == 0
        assert "unpriced-model (candidate)" in capsys.readouterr().out


# -- list filters and the funnel line ----------------------------------------------------------------


async def test_list_filters_by_status_and_team(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        env = env_for(h)
        a = await h.create_trial()
        b = await h.create_trial(team="team-b")
        assert await cli(["trials", "stop", b["id"]], env) == 0
        capsys.readouterr()

        async def listed(*flags: str) -> list[str]:
            assert await cli(["trials", "list", *flags, "--json"], env) == 0
            return [t["id"] for t in json.loads(capsys.readouterr().out)["trials"]]

        assert await listed("--status", "running") == [a["id"]]
        assert await listed("--status", "stopped") == [b["id"]]
        assert await listed("--team", "team-b") == [b["id"]]
        assert await listed("--team", "team-a", "--status", "stopped") == []
        assert sorted(await listed()) == sorted([a["id"], b["id"]])


def test_the_funnel_line_counts_cases_in_flight() -> None:
    view: dict[str, Any] = {
        "id": "tr_1", "status": "running", "team": "t", "candidate_model": "c", "incumbent_model": "i",
        "sample_rate": 1.0,
        "verdict": {"wording": "Collecting", "code": "inconclusive", "cases": 2, "win_rate": None, "interval": None,
                    "decision_bounds": None},
        "spend": {"coverage": "complete", "known_micros": 0, "cap_micros": 1, "unknown_calls": 0,
                  "held_for_unknown_micros": 0, "reserved_micros": 0},
        "judge": {"name": "j", "version_id": "v" * 16},
        "funnel": {"outcomes": {"judged": 2, "not_sampled": 1}, "total": 3, "in_flight": 4},
    }
    funnel = [line for line in render_trial(view).splitlines() if "funnel" in line]
    assert funnel == ["  funnel       3 matched: judged 2, not_sampled 1; 4 in flight"]


async def test_show_prints_the_funnel_with_cases_in_flight(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path) as h:
        t = await h.create_trial()
        await h.send([exchange(i) for i in range(2)])
        await h.settle(t["id"], 2)
        assert await cli(["trials", "show", t["id"]], env_for(h)) == 0
        assert "judged 2; 0 in flight" in capsys.readouterr().out


# -- the log ----------------------------------------------------------------------------------------


async def test_the_cli_log_setup_writes_no_line_per_http_call(
    odd_server: Callable[[web.Response], str], caplog: pytest.LogCaptureFixture
) -> None:
    url = odd_server(web.json_response({"status": "ok"}))
    saved = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
    try:
        configure_logging("INFO")
        with caplog.at_level(logging.INFO):
            async with httpx.AsyncClient() as client:  # the client that logs "HTTP Request: ..." at INFO
                assert (await client.get(url + "/healthz")).status_code == 200
            logging.getLogger("shadowtrial").info("still heard")
        assert [r.getMessage() for r in caplog.records] == ["still heard"]
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)
