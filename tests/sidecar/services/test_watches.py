"""Promotion, watches and alerts end to end, with the fake provider on loopback.

Prints the figures the closing note quotes (run with ``-s``): how many judged cases the
alert took after the new incumbent's quality dropped, and that none fired while it held.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import tempfile
import time
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for


def models() -> dict[str, FakeModel]:
    # The candidate (0.6 ± 0.05) beats the served 0.5 answers about 84% of the time, ties
    # the rest: an Adoptable trial within ~100 cases. As a sentinel, the replaced model
    # (0.5 ± 0.05) beats the new incumbent's served 0.6 answers almost never, and its 0.4
    # answers after the drop about 84% of the time.
    return {INCUMBENT: FakeModel(quality=0.5), CANDIDATE: FakeModel(quality=0.6), JUDGE: FakeModel(judge=True)}


def served(i: int, q: float, prefix: str) -> dict[str, Any]:
    """An exchange the *new* incumbent (the promoted candidate) served, with quality ``q``."""
    return exchange(i, model=CANDIDATE, exchange_id=f"{prefix}-{i}", content=f"new incumbent answer {i} ⟨q={q:.3f}⟩")


async def adoptable_trial(h: Harness, n: int = 120) -> str:
    trial = await h.create_trial()
    await h.send([exchange(i) for i in range(n)])
    view = await h.settle(trial["id"], n)
    assert view["verdict"]["code"] == "candidate_better", view["verdict"]
    assert view["verdict"]["wording"] == "Adoptable"
    return str(trial["id"])


#: The xdist group of the tests that start from :func:`adopted`'s store: one worker builds it once.
ADOPTED = pytest.mark.xdist_group("watches-adopted")


@dataclass(frozen=True)
class _Adopted:
    """What :func:`adoptable_trial` left: the store's image and the fake provider's state."""

    trial_id: str
    db: bytes
    draws: tuple[dict[str | None, int], dict[str, Any]]


_adopted: list[_Adopted] = []  # built by the first test of this process that asks, then reused


async def adopted(tmp_path: Path, **harness_kw: Any) -> tuple[Harness, str]:
    """A :class:`Harness` on ``tmp_path`` whose store already holds an adopted-to-be trial.

    The same as ``async with Harness(tmp_path, models=models(), ...)`` then
    :func:`adoptable_trial`, without judging its 120 cases in every test (about a second of CPU
    each): the first test of the process runs them (and asserts the trial Adoptable), and each
    test starts on a copy of that store, its fake provider at the same calls and random state
    (the draws that follow are those of a test that judged the trial itself). Enter the harness
    with ``async with``."""
    if not _adopted:
        with tempfile.TemporaryDirectory() as d:
            async with Harness(Path(d), models=models(), never_called=()) as h:
                trial_id = await adoptable_trial(h)
                draws = h.fake.draw_state()
            with contextlib.closing(sqlite3.connect(Path(d) / "trials.db")) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every page in the file itself
            db = (Path(d) / "trials.db").read_bytes()
        _adopted.append(_Adopted(trial_id, db, draws))
    snap = _adopted[0]
    (tmp_path / "trials.db").write_bytes(snap.db)
    h = Harness(tmp_path, models=models(), **harness_kw)
    h.fake.restore_draws(snap.draws)
    return h, snap.trial_id


async def watch_view(h: Harness, watch_id: str) -> dict[str, Any]:
    assert h.admin
    r = await h.admin.get(f"/v1/watches/{watch_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


async def judged(h: Harness, watch_id: str, n: int) -> dict[str, Any]:
    view: dict[str, Any] = {}

    async def done() -> bool:
        nonlocal view
        # A queued case is not judged yet: while the engine's queue holds any (these tests send
        # the watch's traffic only) the view is not read again. A 2,000-case run read it ~95
        # times, each an admin request and four store reads; most of them found the queue full.
        if view and h.runtime.handoff.depth:
            return False
        view = await watch_view(h, watch_id)
        return int(view["judged"]) >= n

    await wait_for(done, timeout=120, what=f"{n} judged cases of watch {watch_id}", wake=h.runtime.progress)
    return view


@ADOPTED
async def test_promotion_refusals_idempotent_retry_and_conflict_over_http(tmp_path: Path) -> None:
    h, trial_id = await adopted(tmp_path)
    async with h:
        assert h.admin
        # Not adoptable: a trial with too few cases is Collecting.
        young = await h.create_trial(candidate_model=CANDIDATE, sample_rate=1.0)
        r = await h.admin.post(f"/v1/trials/{young['id']}/promote", json={"daily_cap_usd": 1.0})
        assert r.status_code == 409, r.text
        err = r.json()["error"]
        assert (err["code"], err["reason"]) == ("promotion_refused", "not_adoptable")
        print(f"\nnot adoptable: {r.status_code} {err}")
        await h.admin.post(f"/v1/trials/{young['id']}/stop")

        # Corpus evidence is refused by the API itself, whatever the verdict.
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 1.0, "evidence": "corpus"})
        assert r.status_code == 409 and r.json()["error"]["reason"] == "corpus_evidence", r.text
        print(f"corpus evidence: {r.status_code} {r.json()['error']}")
        # Bad input is a 400 naming the field, never a 5xx.
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": -1})
        assert r.status_code == 400 and r.json()["error"]["field"] == "$.daily_cap_usd", r.text
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 1, "typo": 1})
        assert r.status_code == 400, r.text
        r = await h.admin.post("/v1/trials/nope/promote", json={"daily_cap_usd": 1})
        assert r.status_code == 404, r.text
        # Watches come only from promotion.
        r = await h.admin.post("/v1/watches", json={})
        assert r.status_code == 405 and "only by promoting" in r.json()["error"]["message"], r.text

        body = {"daily_cap_usd": 2.0, "sample_rate": 0.05}
        first = await h.admin.post(f"/v1/trials/{trial_id}/promote", json=body, headers={"Idempotency-Key": "deploy-42"})
        assert first.status_code == 201, first.text
        watch = first.json()["watch"]
        again = await h.admin.post(f"/v1/trials/{trial_id}/promote", json=body, headers={"Idempotency-Key": "deploy-42"})
        assert again.status_code == 200 and again.json()["watch"]["id"] == watch["id"], again.text
        other = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 3.0},
                                   headers={"Idempotency-Key": "deploy-42"})
        assert other.status_code == 409 and other.json()["error"]["code"] == "request_key_conflict", other.text
        twice = await h.admin.post(f"/v1/trials/{trial_id}/promote", json=body)
        assert twice.status_code == 409 and twice.json()["error"]["reason"] == "already_promoted", twice.text
        print(f"promote: 201 watch {watch['id']}; same key+body: {again.status_code} same watch; "
              f"other body: {other.status_code} {other.json()['error']['code']}; no key: {twice.status_code} "
              f"{twice.json()['error']['reason']}")

        view = await h.trial(trial_id)
        assert view["status"] == "adopted" and view["verdict"]["wording"] == "Adopted"
        assert (watch["old_model"], watch["new_model"], watch["sample_rate"]) == (INCUMBENT, CANDIDATE, 0.05)
        assert watch["spend_today"]["cap_micros"] == 2_000_000 and watch["status"] == "active"
        evidence = watch["promotion"]["evidence"]
        assert evidence["verdict"]["code"] == "candidate_better" and evidence["judge"]["version_id"]
        assert evidence["funnel"]["outcomes"]["judged"] >= 100 and evidence["spend"]["charged_micros"] > 0
        listed = (await h.admin.get("/v1/trials")).json()["trials"]
        assert [t["id"] for t in listed if t["id"].startswith("wa_")] == []  # day rows are not trials
        assert [w["id"] for w in (await h.admin.get("/v1/watches")).json()["watches"]] == [watch["id"]]

        r = await h.admin.post(f"/v1/watches/{watch['id']}/stop")
        assert r.status_code == 200 and r.json()["status"] == "stopped", r.text
        r = await h.admin.post(f"/v1/watches/{watch['id']}/stop")
        assert r.status_code == 409 and r.json()["error"]["code"] == "watch_not_active", r.text


@ADOPTED
@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_a_watch_alerts_when_the_old_model_starts_winning_and_live_shows_it_first(
    tmp_path: Path, isolation: str
) -> None:
    """With the engine in its own process, the watch hook is pickled into it and the day rows
    are rolled there: the same alert."""
    h, trial_id = await adopted(tmp_path, never_called=(), isolation=isolation)
    async with h:
        assert h.admin
        promoted_calls = h.fake.calls[CANDIDATE]
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 5.0, "sample_rate": 1.0})
        assert r.status_code == 201, r.text
        watch = r.json()["watch"]
        detector = watch["detector"]
        steady = 200
        await h.send([served(i, 0.6, "steady") for i in range(steady)])
        view = await judged(h, watch["id"], steady)
        assert not view["detector"]["fired"] and view["alert"] is None
        await h.send([served(i, 0.4, "drop") for i in range(200)])

        async def fired() -> bool:
            return bool((await watch_view(h, watch["id"]))["detector"]["fired"])

        await wait_for(fired, timeout=120, what="the watch's alert", wake=h.runtime.progress)
        # Every drop case judged before the resolve below re-arms the watch (issue 23, item 5),
        # so no case of this drop counts in the next period.
        view = await judged(h, watch["id"], steady + 200)
        took = view["detector"]["fired_at_judged"] - steady
        print(f"\nwatch {watch['id']}: baseline p0={detector['baseline']}, p1={detector['alternative']:.2f}, "
              f"threshold h={detector['threshold']:.3f} (units {detector['threshold_units']}), "
              f"min_judged={detector['min_judged']}, ARL0={detector['arl0_decisive']:.0f} decisive judgments; "
              f"no alarm over {steady} steady judged cases; alarm {took} judged cases after the drop")
        assert 1 <= took <= 40

        alerts = (await h.admin.get("/v1/alerts")).json()["alerts"]
        assert [(a["watch_id"], a["status"]) for a in alerts] == [(watch["id"], "firing")]
        live = (await h.admin.get("/v1/live")).json()
        assert list(live)[:2] == ["alerts", "tiles"] and live["alerts"][0]["id"] == alerts[0]["id"]
        assert [t["tile"] for t in live["tiles"]] == ["running_trials", "active_watches", "firing_alerts",
                                                      "evaluation_spend"]
        assert live["tiles"][2]["count"] == 1 and live["tiles"][1]["count"] == 1
        spend = live["evaluation_spend"]
        assert spend["today"]["evaluation"]["charged_micros"] > 0 and "gateway_metered" in spend["today"]
        print(f"live: keys {list(live)[:3]}, first alert {live['alerts'][0]['id']}, tiles "
              f"{[(t['tile'], t.get('count')) for t in live['tiles']]}")

        r = await h.admin.post(f"/v1/alerts/{alerts[0]['id']}/ack")
        assert r.status_code == 200 and r.json()["status"] == "acknowledged", r.text
        r = await h.admin.post(f"/v1/alerts/{alerts[0]['id']}/ack")
        assert r.status_code == 409, r.text
        r = await h.admin.post(f"/v1/alerts/{alerts[0]['id']}/resolve")
        assert r.status_code == 200 and r.json()["status"] == "resolved", r.text
        assert (await h.admin.get("/v1/live")).json()["alerts"] == []

        results = (await h.admin.get("/v1/results")).json()
        assert list(results)[:2] == ["traffic", "corpus"]
        # A sidecar holds no corpus evidence and says so, rather than listing none (issue 25).
        assert results["corpus"] is None and results["corpus_source"]["held_here"] is False
        assert results["corpus_source"]["control_plane_console"] is None
        assert [(t["id"], t["status"], t["verdict"]["wording"]) for t in results["traffic"]] == [
            (trial_id, "adopted", "Adopted")]
        assert (await h.admin.get("/v1/results", params={"model": "other"})).json()["traffic"] == []
        assert (await h.admin.get("/v1/results", params={"since": "yesterday"})).status_code == 400
        # Product rule 2 for the watch: the new incumbent (the promoted candidate) is never called.
        assert h.fake.calls[CANDIDATE] == promoted_calls


@ADOPTED
async def test_quality_held_steady_over_2000_judged_cases_raises_no_alert(tmp_path: Path) -> None:
    h, trial_id = await adopted(tmp_path, never_called=())
    async with h:
        assert h.admin
        promoted_calls = h.fake.calls[CANDIDATE]
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 50.0, "sample_rate": 1.0})
        assert r.status_code == 201, r.text
        watch = r.json()["watch"]
        steady = 2000
        for start_at in range(0, steady, 500):
            await h.send([served(i, 0.6, "steady") for i in range(start_at, start_at + 500)])
        view = await judged(h, watch["id"], steady)
        d = view["detector"]
        print(f"\nsteady watch: {view['judged']} judged cases, {view['old_wins']} old wins / {view['decisive']} "
              f"decisive, statistic {d['statistic']:.3f} of threshold {d['threshold']:.3f}: fired={d['fired']}")
        assert not d["fired"] and view["alert"] is None
        assert (await h.admin.get("/v1/alerts")).json()["alerts"] == []
        assert h.fake.calls[CANDIDATE] == promoted_calls  # the new incumbent is never called


async def test_a_watch_never_spends_past_its_daily_cap_across_a_utc_day_boundary(tmp_path: Path) -> None:
    from tests.store.factories import replay

    offset = [0.0]
    t0 = 1_796_082_600.0  # 2026-11-30 23:50:00 UTC

    def clock() -> float:
        return t0 + offset[0] + (time.monotonic() - m0)

    m0 = time.monotonic()
    cap_usd = 0.02
    async with Harness(tmp_path, models=models(), never_called=(), clock=clock, refresh_seconds=0.1) as h:
        assert h.admin
        trial_id = await adoptable_trial(h)
        promoted_calls = h.fake.calls[CANDIDATE]
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": cap_usd, "sample_rate": 1.0})
        assert r.status_code == 201, r.text
        watch = r.json()["watch"]
        day1 = (await watch_view(h, watch["id"]))["spend_today"]["day"]
        assert day1 == "2026-11-30"
        await h.send([served(i, 0.6, "d1") for i in range(40)])
        store = h.runtime.store

        async def settled(row_id: str, n: int) -> bool:
            snap = await store.snapshot(row_id)
            return snap is not None and sum(snap.funnel.values()) >= n and not snap.case_states.get("reserved") \
                and not snap.case_states.get("dispatched") and not snap.case_states.get("claimed")

        row1 = f"{watch['id']}-20261130"
        await wait_for(lambda: settled(row1, 40), what="day 1's cases", wake=h.runtime.progress)
        offset[0] = 20 * 60.0  # past midnight: 2026-12-01 00:10

        async def rolled() -> bool:
            return (await watch_view(h, watch["id"]))["current_day"] == "2026-12-01"

        await wait_for(rolled, what="the watch's new UTC day")
        row2 = f"{watch['id']}-20261201"
        await h.send([served(i, 0.6, "d2") for i in range(40)])
        await wait_for(lambda: settled(row2, 40), what="day 2's cases", wake=h.runtime.progress)
        cap = round(cap_usd * 1_000_000)
        figures = []
        for row in (row1, row2):
            rec = await store.get_trial(row)
            spent, reserved = replay(await store.ledger(row), cap)  # asserts the cap at every ledger prefix
            snap = await store.snapshot(row)
            figures.append((row, rec.status, spent, reserved, snap.funnel.get("judged", 0), snap.funnel.get("cap_reached", 0)))
            assert spent <= cap and reserved == 0 and spent > 0
        print(f"\ndaily cap {cap} µ$: " + "; ".join(
            f"{r}: status {s}, spent {sp} µ$, judged {j}, cap_reached {c}" for r, s, sp, _, j, c in figures))
        assert figures[0][5] > 0 and figures[1][5] > 0  # each day ran into its cap, and only its own
        assert h.fake.calls[CANDIDATE] == promoted_calls


@ADOPTED
async def test_cli_promote_watches_alerts_results_and_live(tmp_path: Path, capsys: Any) -> None:
    from tests.sidecar.cli.test_cli import cli, env_for

    h, trial_id = await adopted(tmp_path, never_called=())
    async with h:
        env = env_for(h)
        assert await cli(["trials", "promote", trial_id, "--daily-cap-usd", "5", "--sample-rate", "1",
                          "--idempotency-key", "k1"], env) == 0
        out = capsys.readouterr().out
        assert "sentinel: inc-model (replaced) vs cand-model (incumbent)" in out
        assert await cli(["trials", "promote", trial_id, "--daily-cap-usd", "5", "--json", "--sample-rate", "1",
                          "--idempotency-key", "k1"], env) == 0
        watch_id = json.loads(capsys.readouterr().out)["watch"]["id"]
        try:
            await cli(["trials", "promote", trial_id, "--daily-cap-usd", "5"], env)
            raise AssertionError("a second promotion must fail")
        except SystemExit as exc:
            assert "409 promotion_refused" in str(exc)
        await h.send([served(i, 0.4, "drop") for i in range(80)])

        async def fired() -> bool:
            return bool((await watch_view(h, watch_id))["detector"]["fired"])

        await wait_for(fired, timeout=60, what="the alert", wake=h.runtime.progress)
        assert await cli(["live"], env) == 0
        live = capsys.readouterr().out.splitlines()
        assert live[1].startswith(f"ALERT {watch_id}.alert"), live[:3]
        assert await cli(["watches", "list"], env) == 0 and "FIRED" in capsys.readouterr().out
        assert await cli(["watches", "show", watch_id], env) == 0 and "FIRED at judged case" in capsys.readouterr().out
        assert await cli(["alerts", "list"], env) == 0 and "firing" in capsys.readouterr().out
        assert await cli(["alerts", "ack", f"{watch_id}.alert"], env) == 0
        assert "acknowledged" in capsys.readouterr().out
        assert await cli(["results"], env) == 0
        out = capsys.readouterr().out
        assert out.index("traffic evidence") < out.index(trial_id) < out.index("corpus evidence") and "Adopted" in out
        assert await cli(["watches", "stop", watch_id], env) == 0 and "stopped" in capsys.readouterr().out


@ADOPTED
async def test_a_watch_is_seen_and_promoted_only_within_its_team(tmp_path: Path) -> None:
    h, trial_id = await adopted(tmp_path, never_called=(), auth=True)
    async with h:
        assert h.admin

        def as_(roles: tuple[str, ...], teams: tuple[str, ...]) -> dict[str, str]:
            return {"Authorization": f"Bearer {h.token(roles=roles, teams=teams)}"}

        body = {"daily_cap_usd": 1.0}
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json=body, headers=as_(("viewer",), ("team-a",)))
        assert r.status_code == 403, r.text
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json=body, headers=as_(("developer",), ("team-b",)))
        assert r.status_code == 404, r.text
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json=body, headers=as_(("developer",), ("team-a",)))
        assert r.status_code == 201, r.text
        watch_id = r.json()["watch"]["id"]
        assert r.json()["watch"]["created_by"] == "tester"
        other = as_(("developer",), ("team-b",))
        assert (await h.admin.get(f"/v1/watches/{watch_id}", headers=other)).status_code == 404
        assert (await h.admin.get("/v1/watches", headers=other)).json()["watches"] == []
        assert (await h.admin.get("/v1/live", headers=other)).json()["watches"] == []
        assert (await h.admin.get("/v1/results", headers=other)).json()["traffic"] == []
        assert (await h.admin.post(f"/v1/watches/{watch_id}/stop", headers=other)).status_code == 404
        viewer = as_(("viewer",), ("team-a",))
        assert (await h.admin.post(f"/v1/watches/{watch_id}/stop", headers=viewer)).status_code == 403


@ADOPTED
async def test_an_adopted_trial_cannot_be_stopped_and_day_rows_are_not_trials(tmp_path: Path) -> None:
    h, trial_id = await adopted(tmp_path, never_called=())
    async with h:
        assert h.admin
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 1.0})
        watch = r.json()["watch"]
        r = await h.admin.post(f"/v1/trials/{trial_id}/stop")
        assert r.status_code == 409 and "adopted" in r.json()["error"]["message"], r.text
        assert (await h.trial(trial_id))["status"] == "adopted"
        assert (await h.admin.get(f"/v1/trials/{watch['current_row']}")).status_code == 404
        assert (await h.admin.post(f"/v1/trials/{watch['current_row']}/stop")).status_code == 404


async def test_with_the_uplink_each_alert_transition_is_one_content_free_record(tmp_path: Path) -> None:
    from tests.uplink.kit import UplinkKit

    kit = UplinkKit(tmp_path)
    async with kit.collector() as c:
        async with Harness(tmp_path, models=models(), never_called=(), extra=kit.uplink_toml(c.url)) as h:
            assert h.admin
            trial_id = await adoptable_trial(h)
            r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 5.0, "sample_rate": 1.0})
            watch_id = r.json()["watch"]["id"]
            await h.send([served(i, 0.4, "drop") for i in range(60)])

            async def fired() -> bool:
                return bool((await watch_view(h, watch_id))["detector"]["fired"])

            await wait_for(fired, timeout=60, what="the alert", wake=h.runtime.progress)
            await judged(h, watch_id, 60)  # all judged in this period: the resolve re-arms the watch
            assert (await h.admin.post(f"/v1/alerts/{watch_id}.alert/ack")).status_code == 200
            assert (await h.admin.post(f"/v1/alerts/{watch_id}.alert/resolve")).status_code == 200

            async def delivered() -> bool:
                return len(kit.held("alert")) == 3

            await wait_for(delivered, timeout=60, what="three alert records at the collector")
            records = sorted((json.loads(body) for _, body in kit.held("alert")), key=lambda x: x["at"])
            assert [x["state"] for x in records] == ["firing", "acknowledged", "resolved"]
            assert all(x["watch_id"] == watch_id and x["team"] == "team-a" for x in records)
            assert all("answer" not in body.decode() for _, body in kit.held("alert"))
            # A sentinel's cases are not trial results: only the trial's cases reach the collector.
            assert {json.loads(b)["trial_id"] for _, b in kit.held()} == {trial_id}


@ADOPTED
async def test_a_resolved_watch_is_re_armed_and_fires_again_on_a_second_drop(tmp_path: Path) -> None:
    """Issue 23, item 5: after a resolve the detector stayed fired and the old model could win
    37-42 of the next 60 cases with no new alert. Resolving starts a new period: the view shows
    it, its counts, statistic and chart start at the resolve, a steady stretch raises nothing,
    and a second drop raises a second alert with its own id."""
    from policies.roles import Principal
    from sidecar.services.watches import WatchService

    h, trial_id = await adopted(tmp_path, never_called=())
    async with h:
        assert h.admin
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 50.0, "sample_rate": 1.0})
        assert r.status_code == 201, r.text
        watch = r.json()["watch"]
        wid = watch["id"]
        assert watch["period"] == {"number": 1, "started_at": watch["created_at"], "judged_before": 0}

        await h.send([served(i, 0.4, "drop1") for i in range(80)])
        first = await judged(h, wid, 80)
        assert first["detector"]["fired"] and first["alert"] == {"id": f"{wid}.alert", "status": "firing"}
        r = await h.admin.post(f"/v1/alerts/{wid}.alert/resolve")
        assert r.status_code == 200 and r.json()["status"] == "resolved", r.text
        resolved_at = r.json()["resolved_at"]

        view = await watch_view(h, wid)
        assert view["period"] == {"number": 2, "started_at": resolved_at, "judged_before": 80}
        d = view["detector"]
        assert (view["judged"], view["decisive"], view["old_wins"], d["statistic"], d["fired"], view["alert"]) == (
            0, 0, 0, 0.0, False, None)
        assert d["baseline"] == watch["detector"]["baseline"]  # anchored to the promotion, not to the drop
        assert view["status"] == "active"

        steady = 200
        await h.send([served(i, 0.6, "steady") for i in range(steady)])
        view = await judged(h, wid, steady)
        assert not view["detector"]["fired"] and view["alert"] is None
        alerts = (await h.admin.get("/v1/alerts")).json()["alerts"]
        assert [(a["id"], a["status"], a["period"]) for a in alerts] == [(f"{wid}.alert", "resolved", 1)]
        service, admin = WatchService(h.runtime), Principal.of("tester", ["platform_admin"], [])
        path = await service.detector_path(admin, wid)
        assert path[0][0] <= 2 and path[-1] == (steady, view["detector"]["statistic"])  # the chart restarts

        await h.send([served(i, 0.4, "drop2") for i in range(200)])

        async def fired_again() -> bool:
            return bool((await watch_view(h, wid))["detector"]["fired"])

        await wait_for(fired_again, timeout=120, what="the second alert", wake=h.runtime.progress)
        view = await watch_view(h, wid)
        took = view["detector"]["fired_at_judged"] - steady
        second = f"{wid}.alert.2"
        assert view["alert"] == {"id": second, "status": "firing"} and view["period"]["number"] == 2
        alerts = (await h.admin.get("/v1/alerts")).json()["alerts"]
        assert [(a["id"], a["status"], a["period"]) for a in alerts] == [
            (second, "firing", 2), (f"{wid}.alert", "resolved", 1)]
        assert alerts[0]["evidence"]["period"] == 2
        assert (await h.admin.get("/v1/live")).json()["alerts"][0]["id"] == second
        # Issue 26, item 3: the watch page lists its periods, newest first.
        page = (await h.admin.get(f"/console/watches/{wid}")).text
        rows = re.findall(r'<tr data-period="(\d)">(.*?)</tr>', page, re.S)
        assert [n for n, _ in rows] == ["2", "1"]
        assert f'data-period-alert="{second}">{second}: firing' in rows[0][1] and "(current)" in rows[0][1]
        assert f'data-period-alert="{wid}.alert">{wid}.alert: resolved' in rows[1][1]
        assert "<td data-judged>80</td>" in rows[1][1]
        print(f"\nwatch {wid}: fired, resolved (period 2 from {resolved_at:.3f}); no alarm over {steady} steady "
              f"judged cases; second alert {second} {took} judged cases after the second drop")
        assert 1 <= took <= 40


async def test_the_next_period_is_designed_for_the_promotions_upper_bound_by_todays_rule(tmp_path: Path) -> None:
    """A watch promoted under the old rule (a baseline of 0.01 for a trial that saw no incumbent
    win, issue 23 item 4) gets the honest 95% upper bound of its promotion's evidence when its
    alert is resolved: the period that fired never sets the baseline."""
    import dataclasses
    from types import SimpleNamespace

    from policies import cusum
    from policies.roles import Principal
    from sidecar.services.watches import WatchService
    from sidecar.store import make_store
    from sidecar.store.watch_records import WatchStep
    from tests.store.factories import finish, start, trial
    from tests.store.test_watch_conformance import PROMOTABLE, watch_rows

    store = make_store(str(tmp_path / "store.db"))
    await store.open()
    try:
        await store.create_trial(trial("t1"))
        p, w, day = watch_rows()
        old = cusum.design(0.01, min_judged=5)
        evidence = {"decisive_primary_judgments": {"incumbent_wins": 0, "candidate_wins": 36}}
        assert (await store.promote(dataclasses.replace(p, evidence_json=json.dumps(evidence)),
                                    dataclasses.replace(w, baseline=0.01, design_json=json.dumps(old.to_dict())),
                                    day, promotable=PROMOTABLE)).created
        for i in range(8):
            assert await store.claim_case(start(f"c{i}", day.id)) == "claimed"
            await store.finish_case(finish(f"c{i}", day.id, effects=(WatchStep("wa1", f"c{i}", "old_wins", 3000.0 + i),)),
                                    "A")
        ctx = SimpleNamespace(store=store, clock=lambda: 4000.0, uplink_enabled=False)  # a WatchesContext's parts
        service = WatchService(ctx)  # type: ignore[arg-type]
        resolved = await service.move_alert(Principal.of("carol", ["platform_admin"], []), "wa1.alert", "resolved")
        assert resolved["status"] == "resolved" and resolved["period"] == 1
        armed = await store.get_watch("wa1")
        honest = cusum.baseline_from_promotion(0, 36)
        assert armed is not None and armed.period == 2 and armed.baseline == honest > 0.01
        assert cusum.CusumDesign.from_dict(json.loads(armed.design_json)) == cusum.design(honest, min_judged=5)
    finally:
        await store.close()
