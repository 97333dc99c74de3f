"""Compare (issue 14): one prompt, several models, streamed as they arrive, scored by the
absolute judge; nothing of it stored, logged or exported, and no route reads it back."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for

CANARY = "CANARY-c0mpare-91b2"
FAST, MID, SLOW, UNPRICED = "m-fast", "m-mid", "m-slow", "m-unpriced"
LATENCY = {FAST: 10.0, MID: 250.0, SLOW: 600.0}


def models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(), CANDIDATE: FakeModel(), JUDGE: FakeModel(judge=True),
        FAST: FakeModel(quality=0.9, quality_noise=0.0, latency_ms=(LATENCY[FAST], LATENCY[FAST])),
        MID: FakeModel(quality=0.5, quality_noise=0.0, latency_ms=(LATENCY[MID], LATENCY[MID])),
        SLOW: FakeModel(quality=0.2, quality_noise=0.0, latency_ms=(LATENCY[SLOW], LATENCY[SLOW])),
        UNPRICED: FakeModel(),
    }


EXTRA = "".join(f'[models."{m}"]\nprovider = "local"\ninput_price_per_mtok = 1.0\noutput_price_per_mtok = 3.0\n'
                for m in (FAST, MID, SLOW)) + f'[models."{UNPRICED}"]\nprovider = "local"\n'


def body(**over: Any) -> dict[str, Any]:
    b: dict[str, Any] = {"team": "team-a", "models": [SLOW, MID, FAST],
                         "messages": [{"role": "user", "content": f"Which is faster? {CANARY}"}]}
    b.update(over)
    return b


async def stream(client: httpx.AsyncClient, payload: dict[str, Any]) -> tuple[int, list[tuple[str, dict[str, Any], float]]]:
    """POST a compare; (status, [(event, data, seconds since the request)])."""
    events: list[tuple[str, dict[str, Any], float]] = []
    t0 = time.monotonic()
    async with client.stream("POST", "/v1/compare", json=payload) as r:
        if r.status_code != 200:
            await r.aread()
            return r.status_code, [("error", r.json(), 0.0)]
        assert r.headers["content-type"].startswith("text/event-stream")
        event = ""
        async for line in r.aiter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:]), time.monotonic() - t0))
    return 200, events


async def test_answers_stream_in_arrival_order_with_cost_and_an_absolute_score(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), extra=EXTRA) as h:
        assert h.admin is not None
        status, events = await stream(h.admin, body())
    answers = [(d["model"], round(t * 1000)) for e, d, t in events if e == "answer"]
    scores = {d["model"]: d for e, d, _ in events if e == "score"}
    print(f"\ncompare arrival order (model, ms after the request): {answers}; scripted latencies {LATENCY}; "
          f"scores {[(m, s['score']) for m, s in scores.items()]}")
    assert status == 200
    assert [m for m, _ in answers] == [FAST, MID, SLOW]  # not the request's order [SLOW, MID, FAST]
    first = next(d for e, d, _ in events if e == "answer")
    assert first["ok"] and "⟨q=0.900⟩" in first["content"] and first["cost"]["coverage"] == "complete"
    assert first["cost"]["known_micros"] > 0 and first["latency_ms"] >= LATENCY[FAST]
    assert scores[FAST]["score"] > scores[MID]["score"] > scores[SLOW]["score"]
    assert all(s["family"] == "absolute" and s["rubric"] == "absolute-v1" for s in scores.values())
    assert len({s["judge_version"]["id"] for s in scores.values()}) == 1
    done = events[-1]
    assert done[0] == "done" and done[1]["stored"] is False
    hint = done[1]["trial_hint"]
    assert hint["path"] == "/v1/trials" and hint["body"]["candidate_model"] in (MID, FAST, SLOW)
    assert done[1]["spend"]["known_micros"] <= done[1]["spend"]["cap_micros"]


async def test_nothing_of_a_compare_is_stored_logged_or_exported_and_no_route_reads_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with Harness(tmp_path, models=models(), extra=EXTRA) as h:
        assert h.admin is not None
        status, events = await stream(h.admin, body(models=[FAST, MID]))
        assert status == 200 and len([e for e, _, _ in events if e == "answer"]) == 2
        seen = [(await h.admin.get(p)).text for p in ("/metrics", "/v1/live", "/v1/trials")]
        reads = {p: (await h.admin.get(p)).status_code
                 for p in ("/v1/compare", "/v1/compare/1", "/v1/compares", "/v1/compare/history")}
        metrics = seen[0]
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "trials.db" in p.name)
    print(f"\ncompare canary scan: {len(stored)} store bytes, {len(caplog.records)} log records, reads {reads}")
    assert CANARY.encode() not in stored
    assert CANARY not in caplog.text
    assert not [s for s in seen if CANARY in s]
    assert reads == {"/v1/compare": 405, "/v1/compare/1": 404, "/v1/compares": 404, "/v1/compare/history": 404}
    assert 'shadowtrial_compare_requests_total{result="streamed"} 1' in metrics


async def test_a_compare_adds_exactly_its_cost_to_evaluation_spend_and_nothing_to_metered_spend(
    tmp_path: Path
) -> None:
    """Issue 28, item 5: every evaluation's spend is in evaluation spend, Compare's too, beside
    (never summed with) the served exchanges' metered cost, which a compare does not change."""
    async with Harness(tmp_path, models=models(), extra=EXTRA) as h:
        assert h.admin is not None
        admin = h.admin
        trial = await h.create_trial(sample_rate=1.0)
        await h.send([exchange(i) for i in range(3)])
        await h.settle(trial["id"], 3)

        async def live() -> dict[str, Any]:
            r = await admin.get("/v1/live")
            assert r.status_code == 200, r.text
            spend: dict[str, Any] = r.json()["evaluation_spend"]
            return spend

        async def idle() -> bool:
            r = await admin.get("/v1/live")
            return bool(r.json()["intake"]["in_flight"] == 0)

        await wait_for(idle, timeout=10, what="the engine to be idle")
        before = await live()
        status, events = await stream(admin, body(models=[FAST, MID]))
        assert status == 200 and events[-1][0] == "done", events
        cost = events[-1][1]["spend"]
        after = await live()
    print(f"\ncompare spend: {cost}; evaluation today {before['today']['evaluation']} -> {after['today']['evaluation']}")
    assert cost["coverage"] == "complete" and cost["known_micros"] > 0
    for window in ("today", "last_7_days"):
        b, a = before[window], after[window]
        assert b["evaluation"]["charged_micros"] > 0  # the trial's cases were counted already
        assert a["evaluation"]["charged_micros"] - b["evaluation"]["charged_micros"] == cost["known_micros"]
        assert a["evaluation"]["by_source"] == {
            "trials_and_watches_micros": b["evaluation"]["by_source"]["trials_and_watches_micros"],
            "compare_micros": b["evaluation"]["by_source"]["compare_micros"] + cost["known_micros"]}
        assert (b["evaluation"]["compares"], a["evaluation"]["compares"]) == (0, 1)
        assert a["evaluation"]["cases"] == b["evaluation"]["cases"]
        assert a["gateway_metered"] == b["gateway_metered"]  # metered spend: unchanged, never summed
    assert after["known_micros"] == before["known_micros"]  # the trials' own totals are the trials'
    assert after["experiments"]["held_here"] is False and "control plane" in after["experiments"]["message"]


async def test_a_compare_cut_short_still_counts_what_it_spent(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), extra=EXTRA) as h:
        assert h.admin is not None
        admin = h.admin
        first: dict[str, Any] = {}
        async with admin.stream("POST", "/v1/compare", json=body(models=[FAST, SLOW])) as r:
            assert r.status_code == 200
            event = ""
            async for line in r.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "answer":
                    first = json.loads(line[6:])
                    break  # the client goes away before the slow model answers
        assert first["model"] == FAST and first["cost"]["known_micros"] > 0
        today: dict[str, Any] = {}

        async def kept() -> bool:
            nonlocal today
            today = (await admin.get("/v1/live")).json()["evaluation_spend"]["today"]["evaluation"]
            return bool(today["compares"] == 1)

        await wait_for(kept, timeout=10, what="the cut-short compare's spend to be kept")
    print(f"\ncut-short compare: first answer {first['cost']}; kept {today}")
    assert today["by_source"]["compare_micros"] >= first["cost"]["known_micros"]
    assert today["charged_micros"] == today["by_source"]["compare_micros"]


async def test_compare_is_refused_before_streaming(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), extra=EXTRA) as h:
        assert h.admin is not None
        cases = {
            "one model": body(models=[FAST]),
            "seven models": body(models=[f"m{i}" for i in range(7)]),
            "unknown model": body(models=[FAST, "nope"]),
            "unpriced": body(models=[FAST, UNPRICED]),
            "twice": body(models=[FAST, FAST]),
            "tiny cap": body(spend_cap_usd=0.000001),
            "bad rubric": body(rubric="pairwise-v1"),
            "no messages": body(messages=[]),
            "typo": body(modles=[FAST, MID]),
        }
        answers = {name: await stream(h.admin, b) for name, b in cases.items()}
    got = {name: (status, ev[0][1]["error"]["code"], ev[0][1]["error"]["field"]) for name, (status, ev) in answers.items()}
    assert got["one model"][0] == 400 and got["one model"][2] == "$.models"
    assert got["seven models"][0] == 400
    # A name the config does not alias goes to the single provider as is, unpriced: refused like a trial's.
    assert got["unknown model"] == (422, "spend_unbounded", "$.models[1]")
    assert got["unpriced"] == (422, "spend_unbounded", "$.models[1]")
    assert got["twice"][0] == 400
    assert got["tiny cap"] == (409, "compare_cap_too_small", "$.spend_cap_usd")
    assert got["bad rubric"][2] == "$.rubric"
    assert got["no messages"][2] == "$.messages"
    assert got["typo"][0] == 400
    assert all(status < 500 for status, _, _ in got.values())


async def test_compare_needs_the_content_permission(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), extra=EXTRA, auth=True) as h:
        assert h.sidecar is not None
        url = h.sidecar.admin_url

        def client(**claims: Any) -> httpx.AsyncClient:
            return httpx.AsyncClient(base_url=url, timeout=30.0,
                                     headers={"Authorization": f"Bearer {h.token(**claims)}"})

        async with client(roles=["developer"], teams=["team-a"]) as no_content, \
                client(roles=["developer"], teams=["team-a"], content=True) as with_content, \
                client(roles=["viewer"], teams=["team-a"], content=True) as reader, \
                client(roles=["developer"], teams=["team-b"], content=True) as other_team:
            refused = await stream(no_content, body(models=[FAST, MID]))
            allowed = await stream(with_content, body(models=[FAST, MID]))
            read_only = await stream(reader, body(models=[FAST, MID]))
            elsewhere = await stream(other_team, body(models=[FAST, MID]))
    assert refused[0] == 403 and "content permission" in refused[1][0][1]["error"]["message"]
    assert allowed[0] == 200
    assert read_only[0] == 403
    assert elsewhere[0] == 404


async def test_the_cli_shows_the_answers_side_by_side_as_they_arrive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.sidecar.cli.test_cli import cli, env_for

    async with Harness(tmp_path, models=models(), extra=EXTRA) as h:
        code = await cli(["compare", "--team", "team-a", "-m", SLOW, "-m", FAST, "--prompt", "hello"], env_for(h))
    out = capsys.readouterr().out
    assert code == 0
    assert out.index(f"── {FAST}") < out.index(f"── {SLOW}")
    assert "absolute score" in out and "shadowtrial trials create --team team-a" in out and "nothing of this compare was kept" in out
