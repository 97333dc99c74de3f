"""A retention-off team's content never leaves the request that carried it: not into a log
line (at DEBUG, error paths included), an error body, a metric, the store or the intake
journal (DESIGN.md rule 9; issue 8, item 9). Every place is searched for a canary string
planted in the messages, the served answer and the request parameters."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange

CANARY = "CANARY-7f3a9c"


def canary_exchange(i: int, **params: Any) -> dict[str, Any]:
    ex = exchange(i, content=f"answer {CANARY}-{i} ⟨q=0.500⟩")
    ex["request"]["messages"] = [
        {"role": "system", "content": f"system {CANARY}"},
        {"role": "user", "content": f"question {i} {CANARY}"},
    ]
    ex["request"]["params"].update(params)
    return ex


async def test_a_retention_off_teams_content_reaches_no_log_error_metric_or_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    models = {
        INCUMBENT: FakeModel(),
        # Provider faults and judge failures: the error paths must be as quiet as the happy one.
        CANDIDATE: FakeModel(quality=0.6, rate_500=0.15, rate_malformed=0.1),
        JUDGE: FakeModel(judge=True, rate_no_label=0.2, rate_conflicting_labels=0.1),
    }
    extra = "[teams.team-a]\nprompt_retention = false\n"
    seen: list[str] = []
    async with Harness(tmp_path, models=models, extra=extra) as h:
        assert h.admin is not None and h.tap is not None
        trial = await h.create_trial(sample_rate=1.0)
        good = [canary_exchange(i, user=CANARY, stop=[CANARY]) for i in range(30)]
        # Parameters the engine cannot use: refused at the tap or failed in the engine, quietly.
        bad = [canary_exchange(100, max_tokens=CANARY), canary_exchange(101, temperature=CANARY),
               canary_exchange(102, tools=CANARY)]
        for batch in (good, bad):
            r = await h.tap.post("/v1/exchanges", json=batch)
            seen.append(r.text)
        # Malformed bodies that carry the canary.
        for body in (f'[{{"exchange_id": "{CANARY}", "team": 5}}]', f'{{"exchange_id": "x", "team": "{CANARY}"',
                     json.dumps([canary_exchange(200)]).replace('"team-a"', f'"{CANARY}" ')):
            r = await h.tap.post("/v1/exchanges", content=body, headers={"content-type": "application/json"})
            seen.append(r.text)
        await h.runtime.idle()
        for path in (f"/v1/trials/{trial['id']}", "/v1/trials", "/v1/live", "/metrics", "/readyz"):
            seen.append((await h.admin.get(path)).text)
        view = await h.trial(trial["id"])
        files = [p for p in tmp_path.rglob("*") if p.is_file() and "trials.db" in str(p)]
        stored = b"".join(p.read_bytes() for p in files)
    outcomes = {k: v for k, v in view["funnel"]["outcomes"].items() if v}
    print(f"\ncanary run: {outcomes}, {len(caplog.records)} log records, {len(seen)} answers, {len(files)} files")
    assert view["funnel"]["outcomes"]["judged"] > 0, "the happy path must have run"
    assert len(outcomes) > 1, "the error paths must have run too"
    assert CANARY not in caplog.text
    assert not [r for r in caplog.records if CANARY in r.getMessage() or (r.exc_text and CANARY in r.exc_text)]
    assert not [s for s in seen if CANARY in s]
    assert CANARY.encode() not in stored
    assert h.fake.requests, "the candidate did receive the content: that is its job"


def _scan(root: Path) -> tuple[int, list[str]]:
    """Every file under ``root`` (the store, its WAL, the intake journal, the config): how many,
    and those holding the canary."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sorted(str(p.relative_to(root)) for p in files if CANARY.encode() in p.read_bytes())


async def test_a_retention_on_teams_content_is_sealed_in_every_file_at_rest(tmp_path: Path) -> None:
    """Issue 21, item 13: with the retention key set, a retention-on team's prompts and answers
    are in no file in plain text — during a live trial, after it, after it is stopped, during
    and after a replay, and after an orderly shutdown (store, WAL, window, case bodies, journal)."""
    import base64
    import os

    from tests.harness import wait_for
    from tests.sidecar.services.test_replay import KEY_ENV, WINDOW

    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    models = {INCUMBENT: FakeModel(), CANDIDATE: FakeModel(quality=0.6, latency_ms=(20.0, 40.0), rate_500=0.05),
              JUDGE: FakeModel(judge=True, rate_no_label=0.05)}
    scans: dict[str, tuple[int, list[str]]] = {}
    async with Harness(tmp_path, models=models, workers=2, environ={KEY_ENV: key},
                       extra=f'[retention]\nkey_env = "{KEY_ENV}"\n') as h:
        assert h.admin is not None
        trial = await h.create_trial(sample_rate=1.0)
        await h.send([canary_exchange(i) for i in range(60)])

        async def some_judged() -> bool:
            return int((await h.trial(trial["id"]))["funnel"]["outcomes"]["judged"]) >= 5

        await wait_for(some_judged, what="a few cases judged", wake=h.runtime.progress)
        scans["trial running"] = _scan(tmp_path)
        busy = h.runtime.handoff.depth + (await h.trial(trial["id"]))["funnel"]["in_flight"]
        await h.settle(trial["id"], 60)
        await h.runtime.retention.idle()
        scans["every case judged"] = _scan(tmp_path)
        assert (await h.admin.post(f"/v1/trials/{trial['id']}/stop")).status_code == 200
        scans["trial stopped"] = _scan(tmp_path)
        r = await h.admin.post("/v1/trials", json={
            "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE, "spend_cap_usd": 10.0,
            "source": WINDOW})
        assert r.status_code == 201, r.text
        replay = r.json()

        async def some_fed() -> bool:
            return int((await h.trial(replay["id"]))["source"]["fed"]) >= 5

        await wait_for(some_fed, what="a few exchanges replayed", wake=h.runtime.progress)
        scans["replay running"] = _scan(tmp_path)

        async def ended() -> bool:
            return (await h.trial(replay["id"]))["status"] != "running"

        await wait_for(ended, timeout=120, what="the replay to end", wake=h.runtime.progress)
        scans["replay ended"] = _scan(tmp_path)
        view = await h.trial(replay["id"])
    scans["after shutdown"] = _scan(tmp_path)
    for when, (n, hits) in scans.items():
        print(f"\ncanary scan, {when}: {n} files, plain-text hits {len(hits)} {hits}")
    assert busy > 0, "the first scan was meant to see cases still queued or in flight"
    assert view["source"]["fed"] == 60 and view["funnel"]["outcomes"]["judged"] > 0
    assert {when: hits for when, (_, hits) in scans.items() if hits} == {}


async def test_the_forwarders_journal_is_sealed_too(tmp_path: Path) -> None:
    """Issue 21, item 13: a control-plane trial's claims wait in the forwarder's journal
    (``journal_dir/forward``) until they are in the outbox: sealed there with the key set."""
    import base64
    import os
    import sqlite3

    from tests.sidecar.services.test_replay import KEY_ENV
    from tests.uplink.kit import UplinkKit
    from tests.uplink.test_control_plane_e2e import TEAM_POSTURE, sidecar_toml

    kit = UplinkKit(tmp_path / "kit", content_teams=("team-a",))
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    (tmp_path / "sidecar").mkdir()
    extra = sidecar_toml(kit, "http://127.0.0.1:9") + f'[retention]\nkey_env = "{KEY_ENV}"\n'
    async with Harness(tmp_path / "sidecar", environ={KEY_ENV: key}, extra=extra,
                       store_extra="lock_timeout_seconds = 0.3") as h:
        assert h.admin is not None
        r = await h.admin.put(TEAM_POSTURE, json={"prompt_retention": True, "cut_over": True})
        assert r.status_code == 200 and r.json()["execution_site"] == "control_plane", r.text
        await h.create_trial(sample_rate=1.0)
        holder = sqlite3.connect(tmp_path / "sidecar" / "trials.db", isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")  # the claims wait in the forwarder (and its journal)
        try:
            reply = await h.send([canary_exchange(i) for i in range(20)])
            forward = tmp_path / "sidecar" / "trials.db.intake" / "forward"
            journal = b"".join(p.read_bytes() for p in forward.glob("segment-*.bin"))
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    print(f"\nforwarder's journal with 20 claims waiting: {len(journal)} bytes, canary hits "
          f"{journal.count(CANARY.encode())}")
    assert reply["sampled"] == 20
    assert b"ex-19" in journal, "the claims were journaled before the tap answered"
    assert CANARY.encode() not in journal
