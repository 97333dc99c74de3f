"""The posture part of the store contract (:class:`sidecar.store.base.PostureStore`), on
every backend: stored posture with revisions, gateway reports, and the pause of running
trials a posture change moves, in the same transaction.
"""

from __future__ import annotations

import asyncio

from sidecar.store import Store
from sidecar.store.records import GatewayReport, TeamPosture
from tests.store.conftest import OpenStore
from tests.store.factories import trial

REASON = "posture changed"


async def test_no_posture_until_seeded_and_a_seed_never_overwrites(store: Store) -> None:
    assert await store.get_posture("a") is None
    assert await store.seed_posture("a", prompt_retention=False, cut_over=False, now=10.0)
    assert await store.get_posture("a") == TeamPosture("a", False, False, 1, 10.0, None)
    assert not await store.seed_posture("a", prompt_retention=True, cut_over=True, now=11.0)
    assert await store.get_posture("a") == TeamPosture("a", False, False, 1, 10.0, None)
    assert await store.get_posture("b") is None


async def test_put_counts_revisions_and_the_same_values_keep_it(store: Store) -> None:
    first = await store.put_posture("a", prompt_retention=True, cut_over=False, expected_revision=None,
                                    site="local", now=1.0, by="alice", reason=REASON)
    assert first.applied and first.posture == TeamPosture("a", True, False, 1, 1.0, "alice") and first.paused == ()
    again = await store.put_posture("a", prompt_retention=True, cut_over=False, expected_revision=None,
                                    site="local", now=2.0, by="bob", reason=REASON)
    assert again.applied and again.posture == first.posture  # idempotent: no new revision
    changed = await store.put_posture("a", prompt_retention=True, cut_over=True, expected_revision=1,
                                      site="local", now=3.0, by="bob", reason=REASON)
    assert changed.applied and changed.posture == TeamPosture("a", True, True, 2, 3.0, "bob")
    assert await store.get_posture("a") == changed.posture


async def test_put_with_a_stale_revision_writes_nothing(store: Store) -> None:
    await store.create_trial(trial("t1", team="a", execution_site="local", prompt_retention=True))
    stale = await store.put_posture("a", prompt_retention=False, cut_over=False, expected_revision=3,
                                    site="local", now=1.0, by="x", reason=REASON)
    assert not stale.applied and stale.posture is None and stale.paused == ()
    created = await store.put_posture("a", prompt_retention=True, cut_over=False, expected_revision=0,
                                      site="local", now=1.0, by="x", reason=REASON)
    assert created.applied and created.posture is not None and created.posture.revision == 1
    again = await store.put_posture("a", prompt_retention=False, cut_over=False, expected_revision=0,
                                    site="local", now=2.0, by="y", reason=REASON)
    assert not again.applied and again.posture == created.posture and again.paused == ()
    t1 = await store.get_trial("t1")
    assert t1 is not None and t1.status == "running"


async def test_put_pauses_the_running_trials_it_moves_in_the_same_write(store: Store) -> None:
    await store.create_trial(trial("keep", team="a", execution_site="local", prompt_retention=True))
    await store.create_trial(trial("ret", team="a", execution_site="local", prompt_retention=False))
    await store.create_trial(trial("cp", team="a", execution_site="control_plane", prompt_retention=True))
    await store.create_trial(trial("other", team="b", execution_site="control_plane", prompt_retention=False))
    await store.create_trial(trial("done", team="a", execution_site="control_plane", prompt_retention=True))
    await store.set_trial_status("done", "stopped", "operator", ended=True, now=1.0)
    written = await store.put_posture("a", prompt_retention=True, cut_over=False, expected_revision=None,
                                      site="local", now=5.0, by="x", reason=REASON)
    assert written.paused == ("cp", "ret")
    for trial_id, status in (("keep", "running"), ("ret", "posture_changed"), ("cp", "posture_changed"),
                             ("other", "running"), ("done", "stopped")):
        record = await store.get_trial(trial_id)
        assert record is not None and record.status == status, trial_id
    paused = await store.get_trial("cp")
    assert paused is not None and paused.status_reason == REASON and paused.ended_at is None
    assert sorted(t.id for t in await store.list_trials(status="posture_changed")) == ["cp", "ret"]


async def test_gateway_reports_upsert_and_never_move_last_seen_back(store: Store) -> None:
    assert await store.gateway_reports("a") == []
    await store.report_uplink("a", "gw-2", content_uplink=True, now=10.0)
    await store.report_uplink("a", "gw-1", content_uplink=False, now=11.0)
    await store.report_uplink("b", "gw-1", content_uplink=True, now=12.0)
    assert await store.gateway_reports("a") == [GatewayReport("gw-1", False, 11.0), GatewayReport("gw-2", True, 10.0)]
    await store.report_uplink("a", "gw-2", content_uplink=False, now=20.0)
    await store.report_uplink("a", "gw-1", content_uplink=True, now=5.0)  # a late report: setting taken, time kept
    assert await store.gateway_reports("a") == [GatewayReport("gw-1", True, 11.0), GatewayReport("gw-2", False, 20.0)]
    assert await store.gateway_reports("b") == [GatewayReport("gw-1", True, 12.0)]


async def test_pause_mismatched_touches_only_running_trials_of_the_team(store: Store) -> None:
    await store.create_trial(trial("l", team="a", execution_site="local"))
    await store.create_trial(trial("c", team="a", execution_site="control_plane"))
    await store.create_trial(trial("b", team="b", execution_site="local"))
    assert await store.pause_mismatched("a", site="control_plane", prompt_retention=True, reason=REASON, now=1.0) == ["l"]
    assert await store.pause_mismatched("a", site="control_plane", prompt_retention=True, reason=REASON, now=2.0) == []
    b = await store.get_trial("b")
    assert b is not None and b.status == "running"


async def test_resume_pins_the_site_and_retention_given(store: Store) -> None:
    await store.create_trial(trial("t1", execution_site="control_plane", prompt_retention=True))
    await store.set_trial_status("t1", "posture_changed", REASON, ended=False, now=1.0)
    after, changed = await store.resume_trial("t1", paused=("posture_changed",), started_by="b",
                                              execution_site="local", prompt_retention=False)
    assert changed and after is not None
    assert (after.status, after.execution_site, after.prompt_retention, after.started_by) == (
        "running", "local", False, "b")
    assert await store.get_trial("t1") == after
    await store.set_trial_status("t1", "posture_changed", REASON, ended=False, now=2.0)
    kept, changed = await store.resume_trial("t1", paused=("posture_changed",), started_by="c")
    assert changed and kept is not None and (kept.execution_site, kept.prompt_retention) == ("local", False)


async def test_concurrent_conditional_puts_from_peers_apply_once(stores: OpenStore) -> None:
    one, two = await stores(), await stores()
    await one.put_posture("a", prompt_retention=True, cut_over=False, expected_revision=None,
                          site="local", now=1.0, by="x", reason=REASON)
    results = await asyncio.gather(*(
        s.put_posture("a", prompt_retention=retention, cut_over=True, expected_revision=1,
                      site="local", now=2.0, by=f"w{i}", reason=REASON)
        for i, (s, retention) in enumerate(((one, True), (two, False), (one, False), (two, True)))
    ))
    assert sum(r.applied for r in results) == 1
    stored = await two.get_posture("a")
    assert stored is not None and stored.revision == 2


async def test_posture_survives_a_reopen(stores: OpenStore) -> None:
    store = await stores()
    await store.put_posture("a", prompt_retention=False, cut_over=True, expected_revision=None,
                            site="local", now=1.0, by="x", reason=REASON)
    await store.report_uplink("a", "gw", content_uplink=True, now=2.0)
    other = await stores()
    assert await other.get_posture("a") == TeamPosture("a", False, True, 1, 1.0, "x")
    assert await other.gateway_reports("a") == [GatewayReport("gw", True, 2.0)]
