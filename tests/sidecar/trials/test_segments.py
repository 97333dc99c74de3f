"""Per-segment verdicts (issue 27): segments on the wire and at creation, their storage, the view.

A real sidecar judges real cases through the fake provider. The candidate's planted quality
is 0.6 everywhere; the incumbent's answer (sent by the test) carries its own quality, so a
tier whose incumbent answers at 0.9 is a planted regression for the candidate and a tier at
0.1 a clear win.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from policies.segment_alpha import segment_alpha
from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for
from tests.sidecar.cli.test_cli import cli, env_for

FAST, REASONING = 90, 40


def models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(quality=0.5),
        CANDIDATE: FakeModel(quality=0.6, quality_noise=0.0),
        JUDGE: FakeModel(judge=True),
    }


def tiered(i: int) -> dict[str, Any]:
    """Every fourth exchange is a ``reasoning`` one, where the incumbent answers far better."""
    if i % 4 == 3:
        return exchange(i, content=f"incumbent answer {i} ⟨q=0.950⟩", tags={"tier": "reasoning"})
    return exchange(i, content=f"incumbent answer {i} ⟨q=0.050⟩", tags={"tier": "fast"})


async def create(h: Harness, **over: Any) -> Any:
    assert h.admin
    body: dict[str, Any] = {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
                            "spend_cap_usd": 10.0, "sample_rate": 1.0}
    body.update(over)
    return await h.admin.post("/v1/trials", json=body)


BAD_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"segments": ["route", "prompt"]}, "$.segments[1]"),
    ({"segments": ["route", "route"]}, "$.segments[1]"),
    ({"segments": ["tag:"]}, "$.segments[0]"),
    ({"segments": [f"tag:t{i}" for i in range(9)]}, "$.segments"),
    ({"segments": ["route"], "segment_cap": 0}, "$.segment_cap"),
    ({"segments": ["route"], "segment_cap": 65}, "$.segment_cap"),
    ({"segment_min_cases": 10}, "$.segment_min_cases"),
    ({"segments": ["route"], "segment_min_cases": 0}, "$.segment_min_cases"),
]

BAD_TAGS: list[dict[str, Any]] = [
    {f"k{i}": "v" for i in range(17)},
    {"tier": "v" * 129},
    {"k" * 65: "v"},
    {"": "v"},
    {"tier": 3},
]


async def test_bad_segment_settings_are_refused_422_and_bad_tags_400_naming_the_field(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.tap
        for over, field in BAD_SETTINGS:
            r = await create(h, **over)
            assert r.status_code == 422, (over, r.text)
            error = r.json()["error"]
            assert error["code"] == "invalid_segments" and error["field"] == field, (over, error)
        for tags in BAD_TAGS:
            r = await h.tap.post("/v1/exchanges", json=[exchange(1), exchange(2, tags=tags)])
            assert r.status_code == 400, (tags, r.text)
            assert r.json()["error"]["field"].startswith("$[1].tags"), (tags, r.json())
        ok = await create(h, segments=["route", "model", "gateway", "length", "tag:tier"], segment_cap=64,
                          segment_min_cases=30)
        assert ok.status_code == 201, ok.text
        r = await h.tap.post("/v1/exchanges", json=[exchange(3, tags={"tier": "x" * 128, "k" * 64: ""})])
        assert r.status_code == 202, r.text


async def test_a_trial_adoptable_overall_says_it_is_rejected_on_its_bad_segment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async with Harness(tmp_path, models=models(), workers=4, never_called=()) as h:
        trial = await h.create_trial(audit_share=0.0, segments=["tag:tier", "route"], segment_cap=4)
        tid = trial["id"]
        n = FAST + REASONING
        await h.send([tiered(i) for i in range(n)])
        view = await h.settle(tid, n)
        assert view["verdict"]["wording"] == "Adoptable", view["verdict"]
        seg = view["segments"]
        assert seg["by"] == ["tag:tier", "route"]
        assert seg["control"] == "family-wise"
        assert seg["per_segment_alpha"] == pytest.approx(segment_alpha(0.05, 5))
        by_key = {v["key"]: v for v in seg["values"]}
        assert set(by_key) == {"tag:tier=fast", "tag:tier=reasoning", "route=(unset)"}
        bad, good = by_key["tag:tier=reasoning"], by_key["tag:tier=fast"]
        assert bad["verdict"] == "Rejected" and bad["code"] == "regression", bad
        assert good["verdict"] == "Adoptable", good
        assert bad["judged"] + good["judged"] == by_key["route=(unset)"]["judged"] == view["verdict"]["cases"]
        assert bad["upper"] < 0.45 < 0.55 < good["lower"]
        assert bad["cost_ratio"] is not None and bad["latency_ratio"] is not None
        assert seg["rejected"] == ["tag:tier=reasoning"]
        assert seg["pooled_other"] == 0
        assert seg["summary"] == "Adoptable overall; Rejected on tag:tier=reasoning"

        # The CLI says the same, in words and as JSON.
        env = env_for(h)
        assert await cli(["trials", "show", tid], env) == 0
        out = capsys.readouterr().out
        assert "segments     Adoptable overall; Rejected on tag:tier=reasoning" in out
        row = next(line for line in out.splitlines() if line.strip().startswith("tag:tier=reasoning"))
        assert row.split()[:3] == ["tag:tier=reasoning", "Rejected", "<-"]
        assert await cli(["trials", "show", tid, "--json"], env) == 0
        assert json.loads(capsys.readouterr().out)["segments"]["rejected"] == ["tag:tier=reasoning"]

        # The lists say so too (issue 27): each row names the rejected segments.
        assert h.admin
        listed = (await h.admin.get("/v1/trials")).json()["trials"]
        live = (await h.admin.get("/v1/live")).json()["running_trials"]
        results = (await h.admin.get("/v1/results")).json()["traffic"]
        for where, items in (("trials", listed), ("live", live), ("results", results)):
            item = next(t for t in items if t["id"] == tid)
            assert item["segments_rejected"] == ["tag:tier=reasoning"], (where, item)
            assert item["segments_summary"] == "Adoptable overall; Rejected on tag:tier=reasoning", (where, item)

        # Promotion needs the rejected segment acknowledged, through the API and through Flagger's gate.
        assert h.fake.calls[INCUMBENT] == 0  # (after promotion the replaced model is the watch's sentinel)
        gate = (await h.admin.get(f"/v1/trials/{tid}/gate")).json()
        assert gate["adoptable"] is True and gate["segments_rejected"] == ["tag:tier=reasoning"]
        flagger = {"name": "app", "namespace": "ns", "phase": "Promoting",
                   "metadata": {"trial": tid, "daily_cap_usd": "1"}}
        r = await h.admin.post("/v1/gates/flagger/confirm-promotion", json=flagger)
        assert r.status_code == 409, r.text
        error = r.json()["error"]
        assert error["code"] == "gate_held" and "tag:tier=reasoning" in error["message"], error
        r = await h.admin.post(f"/v1/trials/{tid}/promote", json={"daily_cap_usd": 1.0})
        assert r.status_code == 409, r.text
        error = r.json()["error"]
        assert (error["reason"], error["field"]) == ("segments_unacknowledged", "$.acknowledge_segments"), error
        assert "Rejected on tag:tier=reasoning" in error["message"]
        r = await h.admin.post(f"/v1/trials/{tid}/promote",
                               json={"daily_cap_usd": 1.0, "acknowledge_segments": ["tag:tier=fast"]})
        assert r.status_code == 409 and r.json()["error"]["reason"] == "segments_unacknowledged", r.text
        assert (await h.trial(tid))["status"] == "running"
        flagger["metadata"]["acknowledge_segments"] = "tag:tier=reasoning"
        r = await h.admin.post("/v1/gates/flagger/confirm-promotion", json=flagger)
        assert r.status_code == 200 and r.json()["promoted"] is True, r.text
        watch = (await h.admin.get(f"/v1/watches/{r.json()['watch_id']}")).json()
        assert watch["promotion"]["acknowledged_segments"] == ["tag:tier=reasoning"]
        assert watch["promotion"]["evidence"]["segments"]["rejected"] == ["tag:tier=reasoning"]


async def test_a_trial_without_segments_shows_none(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models()) as h:
        trial = await h.create_trial()
        assert (await h.trial(trial["id"]))["segments"] is None
        assert h.admin
        for path, key in (("/v1/trials", "trials"), ("/v1/live", "running_trials"), ("/v1/results", "traffic")):
            item = (await h.admin.get(path)).json()[key][0]
            assert (item["segments_rejected"], item["segments_summary"]) == ([], None), (path, item)


async def test_a_retention_off_teams_segments_hold_no_content(tmp_path: Path) -> None:
    secret = "the secret prompt text 4711"
    extra = "[teams.team-a]\nprompt_retention = false\n"
    async with Harness(tmp_path, models=models(), extra=extra) as h:
        trial = await h.create_trial(audit_share=0.0, segments=["tag:tier", "length", "route", "model"])
        tid = trial["id"]
        batch = []
        for i in range(6):
            ex = tiered(i)
            ex["request"]["messages"] = [{"role": "user", "content": f"{secret} {i}" + "x" * 300}]
            batch.append(ex)
        await h.send(batch)
        view = await h.settle(tid, 6)
        keys = {v["key"] for v in view["segments"]["values"]}
        assert keys == {"tag:tier=fast", "tag:tier=reasoning", "length=<1k", "route=(unset)", f"model={INCUMBENT}"}
        assert secret not in json.dumps(view)
    db = sqlite3.connect(tmp_path / "trials.db")
    try:
        rows = db.execute("SELECT key, segment, value FROM trial_segments").fetchall()
        case_keys = db.execute("SELECT segment_keys FROM cases").fetchall()
    finally:
        db.close()
    assert rows and case_keys
    assert secret not in repr(rows) + repr(case_keys)
    assert "secret" not in repr(rows) + repr(case_keys)


async def test_sampling_favours_a_segment_below_its_minimum_until_it_has_it(tmp_path: Path) -> None:
    """``segment_min_cases``: at a sample rate of 0 nothing is sampled by the hash, yet an
    exchange of a segment value short of its minimum is (within the spend cap), until the value
    has its minimum of judged cases."""
    async with Harness(tmp_path, models=models(), refresh_seconds=0.2) as h:
        trial = await h.create_trial(audit_share=0.0, sample_rate=0.0, segments=["tag:tier"], segment_cap=4,
                                     segment_min_cases=3)
        plain = await h.create_trial(audit_share=0.0, sample_rate=0.0, segments=["tag:tier"], segment_cap=4)
        tid = trial["id"]

        def favour() -> Any:
            route = h.runtime.routing.current.get(tid)
            return None if route is None else route.favour

        async def favoured(short: bool) -> bool:
            f = favour()
            return f is not None and (("tag:tier=rare" in f.short) if short else ("tag:tier=rare" in f.tracked
                                                                                  and "tag:tier=rare" not in f.short))

        await wait_for(lambda: _true(favour() is not None), timeout=30, what="the favour of the rare segment")
        first = await h.send([exchange(i, tags={"tier": "rare"}) for i in range(5)])
        assert first["sampled"] == 5  # a value not tracked yet, the trial below its cap: favoured
        await h.settle(tid, 5)
        await wait_for(lambda: favoured(short=False), timeout=30, what="the rare segment to have its minimum")
        second = await h.send([exchange(100 + i, tags={"tier": "rare"}) for i in range(5)])
        assert second["sampled"] == 0
        view = await h.trial(tid)
        assert view["segments"]["min_cases"] == 3
        assert {v["key"]: v["judged"] for v in view["segments"]["values"]} == {"tag:tier=rare": 5}
        assert (await h.trial(plain["id"]))["funnel"]["outcomes"]["not_sampled"] == 10


async def _true(value: bool) -> bool:
    return value
