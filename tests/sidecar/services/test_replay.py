"""Replay trials over the retention window (issue 14): the same pipeline as a live trial,
candidate only, ending when the window is exhausted; unavailable with retention off."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for

KEY_ENV = "ST_TEST_RETENTION_KEY"
WINDOW = {"kind": "replay", "from": "2026-11-29T00:00:00Z", "to": "2026-12-01T00:00:00Z"}


def retention(extra: str = "") -> dict[str, Any]:
    """Harness keywords for a sidecar with a retention window."""
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    return {"environ": {KEY_ENV: key}, "extra": f'[retention]\nkey_env = "{KEY_ENV}"\n{extra}'}


async def fill(h: Harness, n: int, **over: Any) -> None:
    """Send ``n`` exchanges (no live trial matches them) and wait until the window keeps them."""
    for start in range(0, n, 500):
        await h.send([exchange(i, **over) for i in range(start, min(n, start + 500))])
    await h.runtime.retention.idle()


async def replay(h: Harness, **over: Any) -> dict[str, Any]:
    assert h.admin is not None
    body: dict[str, Any] = {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
                            "spend_cap_usd": 100.0, "source": WINDOW}
    body.update(over)
    r = await h.admin.post("/v1/trials", json=body)
    assert r.status_code == 201, r.text
    return r.json()


async def ended(h: Harness, trial_id: str, timeout: float = 240.0) -> dict[str, Any]:
    view: dict[str, Any] = {}

    async def done() -> bool:
        nonlocal view
        # The stored status first (a point read); the whole view, which folds every judgment,
        # once it has changed.
        record = await h.runtime.store.get_trial(trial_id)
        if record is not None and record.status == "running":
            return False
        view = await h.trial(trial_id)
        return bool(view["status"] != "running")

    await wait_for(done, timeout=timeout, what=f"replay {trial_id} to end", wake=h.runtime.progress)
    return view


async def test_a_replay_over_2000_retained_exchanges_finds_the_planted_regression(tmp_path: Path) -> None:
    models = {INCUMBENT: FakeModel(quality=0.5), CANDIDATE: FakeModel(quality=0.3), JUDGE: FakeModel(judge=True)}
    async with Harness(tmp_path, models=models, workers=16, **retention()) as h:
        await fill(h, 2000)
        assert h.fake.calls[CANDIDATE] == 0  # retained, not sampled: no live trial ran
        trial = await replay(h)
        assert trial["source"]["kind"] == "replay" and trial["source"]["sample_size"] == 2000
        view = await ended(h, trial["id"])
        assert h.admin is not None
        listed = (await h.admin.get("/v1/trials")).json()["trials"]
        incumbent_calls = h.fake.calls[INCUMBENT]
    outcomes = view["funnel"]["outcomes"]
    print(f"\nreplay of 2000 retained exchanges: status={view['status']} ({view['status_reason']}), "
          f"verdict={view['verdict']['code']} / {view['verdict']['wording']}, cases={view['verdict']['cases']}, "
          f"win_rate={view['verdict']['win_rate']:.3f}, judged={outcomes['judged']}, funnel total="
          f"{view['funnel']['total']}, candidate calls={h.fake.calls[CANDIDATE]}, incumbent calls={incumbent_calls}")
    assert incumbent_calls == 0
    assert view["status"] == "stopped" and view["status_reason"].startswith("replay window exhausted")
    assert view["source"] == {**trial["source"], "fed": 2000}
    assert view["funnel"]["total"] == 2000 and view["funnel"]["in_flight"] == 0
    assert outcomes["judged"] == 2000
    assert view["verdict"]["code"] == "regression" and view["verdict"]["wording"] == "Rejected"
    assert view["verdict"]["evidence"] == "traffic"
    assert [t["source"]["kind"] for t in listed if t["id"] == trial["id"]] == ["replay"]


async def test_a_replay_of_a_better_candidate_is_adoptable_and_respects_sample_size(tmp_path: Path) -> None:
    models = {INCUMBENT: FakeModel(), CANDIDATE: FakeModel(quality=0.8), JUDGE: FakeModel(judge=True)}
    async with Harness(tmp_path, models=models, **retention()) as h:
        await fill(h, 600)
        await fill(h, 50, model="other-model")  # another incumbent: not in the replay's selection
        trial = await replay(h, sample_size=200)
        view = await ended(h, trial["id"])
        # Traffic evidence: an Adoptable replay promotes like a live trial (DESIGN.md rule 6).
        assert h.admin is not None
        unapproved = await h.admin.post(f"/v1/trials/{trial['id']}/promote", json={})
        promoted = await h.admin.post(f"/v1/trials/{trial['id']}/promote", json={"daily_cap_usd": 1.0})
        after = await h.trial(trial["id"])
    fed = view["source"]["fed"]
    assert 0 < fed <= 200 and view["funnel"]["total"] == fed
    assert h.fake.calls[CANDIDATE] == fed
    # Adoptable: better by more than the tolerance, or shown not worse by more (issue 23).
    assert view["verdict"]["code"] in ("candidate_better", "not_worse") and view["verdict"]["wording"] == "Adoptable"
    # The watch's daily cap is approved at promotion: without it, a 400 naming the field.
    assert unapproved.status_code == 400 and unapproved.json()["error"]["field"] == "$.daily_cap_usd", unapproved.text
    assert promoted.status_code == 201, promoted.text
    watch = promoted.json()["watch"]
    assert (watch["trial_id"], watch["old_model"], watch["new_model"]) == (trial["id"], INCUMBENT, CANDIDATE), watch
    assert after["status"] == "adopted" and after["verdict"]["wording"] == "Adopted"


async def test_a_replay_is_never_fed_live_traffic(tmp_path: Path) -> None:
    async with Harness(tmp_path, **retention()) as h:
        await fill(h, 30)
        trial = await replay(h)
        await ended(h, trial["id"])
        assert h.runtime.routing.current.ids() == []
        await h.send([exchange(1000 + i) for i in range(20)])  # after the replay: routed to no trial
        view = await h.trial(trial["id"])
    assert view["funnel"]["total"] == 30


async def test_replay_is_refused_with_the_reason(tmp_path: Path) -> None:
    extra = "[teams.team-a]\nprompt_retention = false\n"
    async with Harness(tmp_path, **retention(extra)) as h:
        assert h.admin is not None
        await fill(h, 10)
        await fill(h, 10, team="team-b")
        body = {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
                "spend_cap_usd": 1.0, "source": WINDOW}
        off = await h.admin.post("/v1/trials", json=body)
        empty = await h.admin.post("/v1/trials", json={**body, "team": "team-b", "source": {
            **WINDOW, "from": "2020-01-01T00:00:00Z", "to": "2020-01-02T00:00:00Z"}})
        backwards = await h.admin.post("/v1/trials", json={**body, "team": "team-b", "source": {
            **WINDOW, "from": WINDOW["to"], "to": WINDOW["from"]}})
        live_size = await h.admin.post("/v1/trials", json={**body, "source": None, "sample_size": 5})
        live = await h.admin.post("/v1/trials", json={**body, "source": None})  # retention off: trials still work
        totals = await h.runtime.store.retention_totals()
    print(f"\nretention off: {off.status_code} {off.json()['error']['code']}")
    assert off.status_code == 409 and off.json()["error"]["code"] == "retention_off"
    assert "prompt retention off" in off.json()["error"]["message"]
    assert empty.status_code == 409 and empty.json()["error"]["code"] == "replay_window_empty"
    assert backwards.status_code == 400 and backwards.json()["error"]["field"] == "$.source.to"
    assert live_size.status_code == 400 and live_size.json()["error"]["field"] == "$.sample_size"
    assert live.status_code == 201
    assert totals["count"] == 10  # team-b's only: team-a's traffic was never kept


async def test_replay_without_a_retention_window_is_unavailable(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.admin is not None
        r = await h.admin.post("/v1/trials", json={"team": "team-a", "incumbent_model": INCUMBENT,
                                                   "candidate_model": CANDIDATE, "spend_cap_usd": 1.0,
                                                   "source": WINDOW})
    assert r.status_code == 409 and r.json()["error"]["code"] == "retention_unavailable"


async def test_a_replay_waits_for_room_and_resumes_after_a_restart(tmp_path: Path) -> None:
    models = {INCUMBENT: FakeModel(), CANDIDATE: FakeModel(quality=0.6, latency_ms=(5.0, 10.0)),
              JUDGE: FakeModel(judge=True)}
    kw = retention()
    async with Harness(tmp_path, models=models, workers=2, queue_size=8, **kw) as h:
        await fill(h, 300)
        trial = await replay(h)

        async def some_fed() -> bool:
            # The stored count the view's ``source.fed`` shows (a point read, not the whole view).
            record = await h.runtime.store.get_trial(trial["id"])
            return record is not None and record.replay_fed >= 40

        await wait_for(some_fed, what="a few pages fed")
    first_calls = h.fake.calls[CANDIDATE]  # after the stop: what the drain ran counts too
    async with Harness(tmp_path, models=models, workers=4, queue_size=8, **kw) as h2:
        view = await ended(h2, trial["id"])
        second_calls = h2.fake.calls[CANDIDATE]
    outcomes = view["funnel"]["outcomes"]
    print(f"\nreplay across a restart: fed={view['source']['fed']}, outcomes="
          f"{ {k: v for k, v in outcomes.items() if v} }, candidate calls {first_calls}+{second_calls}")
    assert view["source"]["fed"] == 300 and view["status"] == "stopped"
    assert outcomes["shed_queue_full"] == 0  # backpressure, never shedding
    assert outcomes["judged"] + outcomes["shed_stopped"] + outcomes["indeterminate"] == view["funnel"]["total"]
    assert view["funnel"]["total"] == 300
    # Every exchange is a case once: a page fed again after the restart is claimed as a duplicate.
    assert outcomes["judged"] <= first_calls + second_calls <= outcomes["judged"] + outcomes["indeterminate"]


async def test_the_cli_creates_a_replay_and_lists_it_as_one(tmp_path: Path, capsys: Any) -> None:
    from tests.sidecar.cli.test_cli import cli, create_args, env_for

    async with Harness(tmp_path, **retention()) as h:
        await fill(h, 20)
        code = await cli(create_args("--replay-from", WINDOW["from"], "--replay-to", WINDOW["to"],
                                     "--sample-size", "10", "--json"), env_for(h))
        created = capsys.readouterr().out
        trial_id = __import__("json").loads(created)["id"]
        await ended(h, trial_id)
        await cli(["trials", "list"], env_for(h))
        listed = capsys.readouterr().out
    assert code == 0 and '"kind": "replay"' in created
    assert "(replay)" in listed


async def test_turning_retention_off_forgets_the_window_and_pauses_the_replay(tmp_path: Path) -> None:
    models = {INCUMBENT: FakeModel(), CANDIDATE: FakeModel(quality=0.6, latency_ms=(20.0, 30.0)),
              JUDGE: FakeModel(judge=True)}
    async with Harness(tmp_path, models=models, workers=1, queue_size=4, **retention()) as h:
        assert h.admin is not None
        await fill(h, 200)
        trial = await replay(h)
        r = await h.admin.put("/v1/teams/team-a/posture", json={"prompt_retention": False, "cut_over": False})
        assert r.status_code == 200, r.text
        totals = await h.runtime.store.retention_totals()
        view = await h.trial(trial["id"])
        resumed = await h.admin.post(f"/v1/trials/{trial['id']}/resume")
        await h.send([exchange(500 + i) for i in range(10)])
        await h.runtime.retention.idle()
        after = await h.runtime.store.retention_totals()
    assert totals["count"] == 0 and after["count"] == 0
    assert view["status"] == "posture_changed"
    assert resumed.status_code == 409 and resumed.json()["error"]["code"] == "retention_off"


async def test_a_replay_runs_with_the_engine_in_its_own_process(tmp_path: Path) -> None:
    async with Harness(tmp_path, isolation="process", **retention()) as h:
        await fill(h, 40)
        trial = await replay(h)
        view = await ended(h, trial["id"], timeout=120.0)
    assert view["funnel"]["outcomes"]["judged"] == 40 and view["source"]["fed"] == 40
