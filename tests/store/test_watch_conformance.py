"""Conformance of the watch store (promotion, day rows, the detector step, alerts) on both stores."""

from __future__ import annotations

import dataclasses
import json

import pytest

from policies import cusum
from sidecar.store.base import Store
from sidecar.store.errors import IdempotencyConflict
from sidecar.store.records import OutboxRecord, TrialRecord
from sidecar.store.watch_records import PromotionRecord, WatchRecord, WatchStep
from sidecar.trials.watch_rows import next_day_row
from tests.store.factories import finish, start, trial

DESIGN = cusum.design(0.2, min_judged=5)
PROMOTABLE = ("running", "stopped", "cap_reached")


def watch_rows(watch_id: str = "wa1", trial_id: str = "t1", cap: int = 10_000) -> tuple[PromotionRecord, WatchRecord, TrialRecord]:
    day = trial(f"{watch_id}-20261130", incumbent_model="cand", candidate_model="inc", cap_micros=cap, kind="watch",
                watch_id=watch_id, created_at=2000.0)
    watch = WatchRecord(
        id=watch_id, team="team-a", trial_id=trial_id, old_model="inc", new_model="cand", route=None, gateway="gw-1",
        sample_rate=0.01, daily_cap_micros=cap, judge_version_id="jv-1", baseline=0.2,
        design_json=json.dumps(DESIGN.to_dict()), created_at=2000.0, created_by="alice",
        current_day="2026-11-30", current_trial_id=day.id,
    )
    promotion = PromotionRecord(id=f"pr-{watch_id}", trial_id=trial_id, watch_id=watch_id, team="team-a",
                                promoted_by="alice", promoted_at=2000.0, evidence_json="{}")
    return promotion, watch, day


async def promoted(store: Store, **kw: object) -> WatchRecord:
    await store.create_trial(trial("t1"))
    p, w, d = watch_rows(**kw)  # type: ignore[arg-type]
    result = await store.promote(p, w, d, promotable=PROMOTABLE)
    assert result.created and result.watch is not None
    return result.watch


async def test_promote_adopts_the_trial_and_inserts_the_watch_and_its_first_day(store: Store) -> None:
    w = await promoted(store)
    t1 = await store.get_trial("t1")
    assert t1 is not None and t1.status == "adopted" and t1.ended_at == 2000.0
    assert await store.get_watch("wa1") == w
    promotion = await store.get_promotion("wa1")
    assert promotion is not None and (promotion.trial_id, promotion.promoted_by) == ("t1", "alice")
    assert await store.get_promotion("nope") is None
    day = await store.get_trial(w.current_trial_id)
    assert day is not None and day.kind == "watch" and day.watch_id == "wa1" and day.status == "running"
    assert [t.id for t in await store.list_trials(kind="trial")] == ["t1"]
    assert [t.id for t in await store.list_trials(kind="watch", status="running")] == [day.id]
    assert [x.id for x in await store.list_watches(teams=["team-a"], status="active")] == ["wa1"]
    assert await store.list_watches(teams=["team-b"]) == []


async def test_promote_is_conditional_on_the_trial_status(store: Store) -> None:
    await promoted(store)
    p, w, d = watch_rows("wa2")
    again = await store.promote(p, w, d, promotable=PROMOTABLE)
    assert again.watch is None and not again.created and again.trial_status == "adopted"
    assert await store.get_watch("wa2") is None and await store.get_trial(d.id) is None
    missing = await store.promote(dataclasses.replace(p, trial_id="nope"), w, d, promotable=PROMOTABLE)
    assert missing.watch is None and missing.trial_status is None


async def test_promote_with_a_key_returns_the_first_watch_and_conflicts_on_another_body(store: Store) -> None:
    await store.create_trial(trial("t1"))
    p, w, d = watch_rows()
    first = await store.promote(p, w, d, promotable=PROMOTABLE, idempotency_key="k", body_hash="h1")
    p2, w2, d2 = watch_rows("wa2")
    repeat = await store.promote(p2, w2, d2, promotable=PROMOTABLE, idempotency_key="k", body_hash="h1")
    assert first.created and not repeat.created and repeat.watch == first.watch
    with pytest.raises(IdempotencyConflict):
        await store.promote(p2, w2, d2, promotable=PROMOTABLE, idempotency_key="k", body_hash="h2")
    assert await store.get_watch("wa2") is None


async def test_a_refused_promotion_leaves_its_key_unused(store: Store) -> None:
    await store.create_trial(trial("t1", status="posture_changed"))
    p, w, d = watch_rows()
    refused = await store.promote(p, w, d, promotable=PROMOTABLE, idempotency_key="k", body_hash="h1")
    assert refused.watch is None and refused.trial_status == "posture_changed"
    await store.set_trial_status("t1", "stopped", None, ended=True, now=1.0)
    done = await store.promote(p, w, d, promotable=PROMOTABLE, idempotency_key="k", body_hash="h1")
    assert done.created


async def test_roll_watch_day_once_per_day_and_stops_yesterday(store: Store, peer: Store) -> None:
    w = await promoted(store)
    today = await store.get_trial(w.current_trial_id)
    assert today is not None
    row = next_day_row(today, day="2026-12-01", now=90_000.0)
    assert row.id == "wa1-20261201" and row.spent_micros == 0 and row.status == "running"
    assert await store.roll_watch_day("wa1", "2026-12-01", row)
    assert not await peer.roll_watch_day("wa1", "2026-12-01", row)  # a peer rolls nothing twice
    assert not await store.roll_watch_day("wa1", "2026-11-30", row)  # never backwards
    old = await store.get_trial(today.id)
    assert old is not None and old.status == "stopped"
    after = await store.get_watch("wa1")
    assert after is not None and (after.current_day, after.current_trial_id) == ("2026-12-01", row.id)


async def test_each_day_row_keeps_its_own_cap_across_the_boundary(store: Store) -> None:
    """The daily cap is the ledger's cap on the day row: a case reserved yesterday settles
    on yesterday's row; today's row starts with the whole cap."""
    w = await promoted(store, cap=1000)
    day1 = w.current_trial_id
    assert await store.claim_case(start("c1", day1)) == "claimed"
    assert (await store.reserve(day1, "c1", 800, kind="reserve", at=2001.0)).applied
    assert await store.claim_case(start("c2", day1)) == "claimed"
    assert not (await store.reserve(day1, "c2", 300, kind="reserve", at=2002.0)).applied  # 800 + 300 > 1000
    current = await store.get_trial(day1)
    assert current is not None
    row = next_day_row(current, day="2026-12-01", now=90_000.0)
    assert await store.roll_watch_day("wa1", "2026-12-01", row)
    assert await store.finish_case(finish("c1", day1, charged=700), "A")  # in flight across midnight
    assert await store.claim_case(start("c3", row.id)) == "claimed"
    assert (await store.reserve(row.id, "c3", 1000, kind="reserve", at=90_001.0)).applied  # a whole new day
    assert not (await store.reserve(row.id, "c3", 1, kind="top_up", at=90_002.0)).applied
    d1, d2 = await store.get_trial(day1), await store.get_trial(row.id)
    assert d1 is not None and d2 is not None
    assert (d1.spent_micros, d1.reserved_micros) == (700, 0)
    assert (d2.spent_micros, d2.reserved_micros) == (0, 1000)


async def test_a_watch_step_follows_the_policy_and_fires_once_with_its_alert(store: Store) -> None:
    w = await promoted(store)
    day = w.current_trial_id
    observations = ["new_wins", "tie"] + ["old_wins"] * 20
    expected = cusum.run(DESIGN, cusum.CusumState(), observations)
    for i, obs in enumerate(observations):
        cid = f"c{i}"
        assert await store.claim_case(start(cid, day)) == "claimed"
        step = WatchStep("wa1", cid, obs, at=3000.0 + i, announce=True)  # type: ignore[arg-type]
        assert await store.finish_case(finish(cid, day, effects=(step,)), "A")
    after = await store.get_watch("wa1")
    assert after is not None
    assert (after.statistic, after.judged, after.decisive, after.fired_at) == (
        expected.statistic, expected.judged, expected.decisive, expected.fired_at)
    assert (after.old_wins, after.new_wins, after.ties) == (20, 1, 1) and after.fired_at is not None
    alerts = await store.list_alerts(teams=["team-a"])
    assert len(alerts) == 1 and alerts[0].status == "firing" and alerts[0].id == "wa1.alert"
    evidence = json.loads(alerts[0].evidence_json)
    assert evidence["judged"] == expected.fired_at and evidence["threshold_units"] == DESIGN.threshold
    (record,) = await store.outbox()
    assert (record.record_id, record.topic) == ("alert:wa1.alert:firing", "alert")
    assert json.loads(record.body)["alert_id"] == "wa1.alert" and json.loads(record.body)["state"] == "firing"
    pending = await store.pending_transitions(limit=10)
    assert [(t.id, t.state) for t in pending] == [("wa1.alert:firing", "firing")]


async def test_alert_transitions_are_conditional_and_queued_for_the_webhook(store: Store) -> None:
    w = await promoted(store, watch_id="wa1")
    day = w.current_trial_id
    for i in range(16):
        assert await store.claim_case(start(f"c{i}", day)) == "claimed"
        await store.finish_case(finish(f"c{i}", day, effects=(WatchStep("wa1", f"c{i}", "old_wins", 3000.0 + i),)), "A")
    alert, changed = await store.transition_alert("wa1.alert", "acknowledged", allowed_from=("firing",),
                                                  actor="bob", now=4000.0)
    assert changed and alert is not None and alert.status == "acknowledged" and alert.acknowledged_by == "bob"
    again, changed = await store.transition_alert("wa1.alert", "acknowledged", allowed_from=("firing",),
                                                  actor="bob", now=4001.0)
    assert not changed and again is not None and again.acknowledged_at == 4000.0
    resolved, changed = await store.transition_alert(
        "wa1.alert", "resolved", allowed_from=("firing", "acknowledged"), actor="carol", now=4002.0,
        outbox=OutboxRecord("alert:wa1.alert:resolved", "alert", "{}"),
    )
    assert changed and resolved is not None and resolved.status == "resolved" and resolved.resolved_by == "carol"
    assert (await store.transition_alert("nope", "resolved", allowed_from=("firing",), actor=None, now=1.0)) == (None, False)
    pending = await store.pending_transitions(limit=10)
    assert [t.state for t in pending] == ["firing", "acknowledged", "resolved"]
    await store.mark_transition(pending[0].id, done=False, now=5000.0)
    await store.mark_transition(pending[1].id, done=True, now=5000.0)
    left = await store.pending_transitions(limit=10)
    assert [(t.state, t.attempts) for t in left] == [("firing", 1), ("resolved", 0)]
    assert [r.record_id for r in await store.outbox()] == ["alert:wa1.alert:resolved"]


async def test_alerts_list_firing_first(store: Store) -> None:
    for n, wid in enumerate(("wa1", "wa2")):
        await store.create_trial(trial(f"t{n}"))
        p, w, d = watch_rows(wid, trial_id=f"t{n}")
        assert (await store.promote(p, w, d, promotable=PROMOTABLE)).created
        for i in range(16):
            cid = f"{wid}-c{i}"
            assert await store.claim_case(start(cid, d.id)) == "claimed"
            await store.finish_case(finish(cid, d.id, effects=(WatchStep(wid, cid, "old_wins", 3000.0 + n * 100 + i),)), "A")
    await store.transition_alert("wa2.alert", "acknowledged", allowed_from=("firing",), actor=None, now=9000.0)
    assert [a.id for a in await store.list_alerts()] == ["wa1.alert", "wa2.alert"]
    assert [a.id for a in await store.list_alerts(status="acknowledged")] == ["wa2.alert"]


async def test_stop_watch_stops_its_day_row_once(store: Store) -> None:
    w = await promoted(store)
    stopped, changed = await store.stop_watch("wa1", now=5000.0)
    assert changed and stopped is not None and stopped.status == "stopped" and stopped.stopped_at == 5000.0
    day = await store.get_trial(w.current_trial_id)
    assert day is not None and day.status == "stopped"
    assert (await store.stop_watch("wa1", now=5001.0))[1] is False
    assert await store.stop_watch("nope", now=1.0) == (None, False)
    assert not await store.roll_watch_day("wa1", "2026-12-02", dataclasses.replace(day, id="x"))


async def test_spend_window_sums_cases_finished_in_it_by_team(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.create_trial(trial("t2", team="team-b"))
    for cid, tid, at in (("a", "t1", 100.0), ("b", "t1", 200.0), ("c", "t2", 150.0)):
        assert await store.claim_case(start(cid, tid)) == "claimed"
        assert (await store.reserve(tid, cid, 50, kind="reserve", at=at)).applied
        await store.finish_case(finish(cid, tid, charged=40, finished_at=at), "A")
    assert await store.spend_window(since=0.0, until=1000.0) == {
        "charged": 120, "cases": 3, "incumbent_known": 900, "incumbent_unknown": 0}
    assert await store.spend_window(since=150.0, until=1000.0, teams=["team-a"]) == {
        "charged": 40, "cases": 1, "incumbent_known": 300, "incumbent_unknown": 0}


async def test_compare_spend_is_kept_and_summed_by_window_and_team(store: Store) -> None:
    assert await store.compare_spend_window(since=0.0, until=1000.0) == {"charged": 0, "compares": 0, "unknown_calls": 0}
    for team, at, charged, unknown in (("team-a", 100.0, 700, 0), ("team-a", 200.0, 300, 1), ("team-b", 150.0, 50, 0)):
        await store.record_compare_spend(team=team, at=at, charged_micros=charged, known_micros=charged - 10 * unknown,
                                         calls=4, unknown_calls=unknown)
    assert await store.compare_spend_window(since=0.0, until=1000.0) == {
        "charged": 1050, "compares": 3, "unknown_calls": 1}
    assert await store.compare_spend_window(since=150.0, until=1000.0, teams=["team-a"]) == {
        "charged": 300, "compares": 1, "unknown_calls": 1}
    assert await store.compare_spend_window(since=0.0, until=1000.0, teams=[]) == {
        "charged": 0, "compares": 0, "unknown_calls": 0}
    # Compare's spend is its own: the trials' window does not see it.
    assert (await store.spend_window(since=0.0, until=1000.0))["charged"] == 0


async def test_adoption_is_final(store: Store) -> None:
    await promoted(store)
    record, changed = await store.set_trial_status("t1", "stopped", "stopped by operator", ended=True, now=9.0)
    assert not changed and record is not None and record.status == "adopted"


async def _observe(store: Store, watch_id: str, day: str, observations: list[str], *, first: int, at: float,
                   announce: bool = False) -> None:
    """Judged cases ``first``, ``first + 1``, ... of the watch, finished at ``at``, ``at + 1``, ..."""
    for i, obs in enumerate(observations):
        cid = f"{watch_id}-c{first + i}"
        assert await store.claim_case(start(cid, day)) == "claimed"
        step = WatchStep(watch_id, cid, obs, at=at + i, announce=announce)  # type: ignore[arg-type]
        assert await store.finish_case(finish(cid, day, effects=(step,)), "A")


async def test_resolving_an_alert_rearms_its_watch_and_the_next_alarm_is_a_new_alert(store: Store) -> None:
    """Issue 23, item 5: a watch that fired once was blind from then on (its state stayed fired,
    and its one alert id made a second alarm a no-op). Resolving starts a new period."""
    w = await promoted(store)
    day = w.current_trial_id
    period1 = ["new_wins", "tie"] + ["old_wins"] * 20
    await _observe(store, "wa1", day, period1, first=0, at=3000.0, announce=True)
    fired = await store.get_watch("wa1")
    assert fired is not None and fired.fired_at is not None and fired.period == 1 and fired.period_start == 2000.0

    # Acknowledging is not resolving: the watch stays in its period, fired.
    await store.transition_alert("wa1.alert", "acknowledged", allowed_from=("firing",), actor="bob", now=4000.0)
    acked = await store.get_watch("wa1")
    assert acked is not None and (acked.period, acked.fired_at) == (1, fired.fired_at)

    honest = cusum.design(0.3, min_judged=5)
    _, changed = await store.transition_alert("wa1.alert", "resolved", allowed_from=("firing", "acknowledged"),
                                              actor="carol", now=4002.0, next_design_json=json.dumps(honest.to_dict()))
    assert changed
    armed = await store.get_watch("wa1")
    assert armed is not None
    assert (armed.period, armed.period_started_at, armed.period_start, armed.judged_before) == (2, 4002.0, 4002.0, 22)
    assert (armed.statistic, armed.judged, armed.decisive, armed.fired_at) == (0, 0, 0, None)
    assert (armed.old_wins, armed.new_wins, armed.ties) == (0, 0, 0)
    assert cusum.CusumDesign.from_dict(json.loads(armed.design_json)) == honest and armed.baseline == 0.3

    # Steady, then a second drop: the re-armed detector follows the policy from a zero state
    # with the new design, and its alarm is a second alert with its own id and transitions.
    period2 = ["new_wins"] * 10 + ["old_wins", "new_wins"] * 5 + ["old_wins"] * 30
    await _observe(store, "wa1", day, period2, first=100, at=4100.0, announce=True)
    expected = cusum.run(honest, cusum.CusumState(), period2)
    after = await store.get_watch("wa1")
    assert after is not None and expected.fired_at is not None and expected.fired_at > 20
    assert (after.statistic, after.judged, after.decisive, after.fired_at) == (
        expected.statistic, expected.judged, expected.decisive, expected.fired_at)
    assert (after.old_wins, after.new_wins, after.ties, after.period) == (35, 15, 0, 2)
    alerts = await store.list_alerts(teams=["team-a"])
    assert [(a.id, a.status, a.period) for a in alerts] == [("wa1.alert.2", "firing", 2), ("wa1.alert", "resolved", 1)]
    second = await store.get_alert("wa1.alert.2")
    assert second is not None and second.raised_at == 4100.0 + expected.fired_at - 1
    evidence = json.loads(second.evidence_json)
    assert (evidence["period"], evidence["judged"], evidence["baseline"]) == (2, expected.fired_at, 0.3)
    pending = [t.id for t in await store.pending_transitions(limit=10)]
    assert pending == ["wa1.alert:firing", "wa1.alert:acknowledged", "wa1.alert:resolved", "wa1.alert.2:firing"]
    assert [r.record_id for r in await store.outbox()] == ["alert:wa1.alert:firing", "alert:wa1.alert.2:firing"]

    # Resolving the second starts a third period, keeping the design when none is given.
    await store.transition_alert("wa1.alert.2", "resolved", allowed_from=("firing",), actor=None, now=5000.0)
    third = await store.get_watch("wa1")
    assert third is not None and (third.period, third.judged_before, third.fired_at) == (3, 22 + 50, None)
    assert third.design_json == armed.design_json


async def test_resolving_re_arms_only_an_active_watch_in_the_alerts_own_period(store: Store) -> None:
    """A stopped watch keeps its last state; resolving a past period's alert twice starts nothing."""
    w = await promoted(store)
    await _observe(store, "wa1", w.current_trial_id, ["old_wins"] * 16, first=0, at=3000.0)
    await store.stop_watch("wa1", now=3500.0)
    _, changed = await store.transition_alert("wa1.alert", "resolved", allowed_from=("firing",), actor=None, now=4000.0)
    assert changed
    stopped = await store.get_watch("wa1")
    assert stopped is not None and stopped.period == 1 and stopped.fired_at is not None and stopped.judged == 16
    again = await store.transition_alert("wa1.alert", "resolved", allowed_from=("firing",), actor=None, now=4001.0)
    assert again[1] is False and (await store.get_watch("wa1")) == stopped
