"""The store's part in control-plane execution (issue 11 item 5), on SQLite and PostgreSQL:
``enqueue_outbox`` (forwarded exchanges), outbox effects written in the same transaction as a
trial's creation and status changes, and the collector's records (``CollectedStore``, on the
collector's store)."""

from __future__ import annotations

import asyncio

import pytest

from sidecar.collector.store import ControlPlaneStore
from sidecar.store import Store
from uplink.collector_store import Held
from tests.store.conftest import OpenStore
from tests.store.factories import effect, start, trial


async def test_enqueue_outbox_keeps_the_first_copy_of_an_id_in_one_transaction(store: Store) -> None:
    assert await store.enqueue_outbox([effect("exchange:t1:x1", "a"), effect("exchange:t1:x2", "b")], now=1.0) == 2
    assert await store.enqueue_outbox([effect("exchange:t1:x2", "changed"), effect("exchange:t1:x3", "c")],
                                      now=2.0) == 1
    assert await store.enqueue_outbox([], now=3.0) == 0
    assert [(o.record_id, o.body) for o in await store.outbox()] == [
        ("exchange:t1:x1", "a"), ("exchange:t1:x2", "b"), ("exchange:t1:x3", "c")]
    assert await store.outbox_depth() == 3
    got = await store.claim_outbox("A", limit=10, lease_s=30, now=4.0)
    assert [r for r, _ in got] == ["exchange:t1:x1", "exchange:t1:x2", "exchange:t1:x3"]


async def test_trial_changes_write_their_effects_only_when_they_change(store: Store) -> None:
    await store.create_trial(trial("t1"), idempotency_key="k", body_hash="h", effects=(effect("spec:1"),))
    await store.create_trial(trial("t2"), idempotency_key="k", body_hash="h", effects=(effect("spec:dup"),))
    _, changed = await store.set_trial_status("t1", "posture_changed", "moved", ended=False, now=2.0,
                                              effects=(effect("spec:2"),))
    assert changed
    _, changed = await store.set_trial_status("t1", "posture_changed", "moved", ended=False, now=3.0,
                                              effects=(effect("spec:nope"),))
    assert not changed
    _, changed = await store.resume_trial("t1", paused=("posture_changed",), started_by="bob",
                                          execution_site="control_plane", effects=(effect("spec:3"),), now=4.0)
    assert changed
    _, changed = await store.resume_trial("t1", paused=("posture_changed",), started_by="bob",
                                          effects=(effect("spec:nope2"),), now=5.0)
    assert not changed
    assert [o.record_id for o in await store.outbox()] == ["spec:1", "spec:2", "spec:3"]


async def test_a_posture_pause_writes_the_effects_of_the_trials_it_paused(store: Store) -> None:
    await store.create_trial(trial("cp", team="a", execution_site="control_plane"))
    await store.create_trial(trial("loc", team="a", execution_site="local"))
    written = await store.put_posture(
        "a", prompt_retention=True, cut_over=False, expected_revision=None, site="local", now=1.0, by="x",
        reason="r", effects={"cp": (effect("spec:cp"),), "loc": (effect("spec:loc"),)},
    )
    assert written.paused == ("cp",)
    assert [o.record_id for o in await store.outbox()] == ["spec:cp"]
    await store.create_trial(trial("cp2", team="a", execution_site="control_plane"))
    assert await store.pause_mismatched("a", site="local", prompt_retention=True, reason="r", now=2.0,
                                        effects={"cp2": (effect("spec:cp2"),)}) == ["cp2"]
    assert [o.record_id for o in await store.outbox()] == ["spec:cp", "spec:cp2"]


def _held(rid: str, kind: str, trial_id: str = "t1", **kw: object) -> Held:
    return Held(id=rid, kind=kind, sidecar_id="s1", body=rid.encode(), received_at=1.0, team="a",
                     trial_id=trial_id, **kw)  # type: ignore[arg-type]


@pytest.mark.collector_store
async def test_collected_records_are_kept_once_and_read_per_trial(store: ControlPlaneStore) -> None:
    assert await store.put_collected([_held("case:c1", "case_result"), _held("case:c2", "case_result")]) == [
        "case:c1", "case:c2"]
    assert await store.put_collected([_held("case:c2", "case_result"), _held("trial:t1:2", "trial_state", revision=2),
                                      _held("trial:t1:1", "trial_state", revision=1)]) == ["trial:t1:2", "trial:t1:1"]
    assert await store.collected_trials() == [{"trial_id": "t1", "state": b"trial:t1:2", "case_results": {"a": 2}}]
    assert await store.latest_spec("t1") is None
    await store.put_collected([_held("trial_spec:t1:9", "trial_spec", revision=9),
                               _held("trial_spec:t1:3", "trial_spec", revision=3)])
    assert await store.latest_spec("t1") == b"trial_spec:t1:9"


@pytest.mark.collector_store
async def test_pending_exchanges_are_those_of_running_control_plane_trials_without_a_case(store: ControlPlaneStore) -> None:
    await store.create_trial(trial("t1", execution_site="control_plane"))
    await store.create_trial(trial("t2", execution_site="local"))
    await store.put_collected([
        _held("exchange:t1:x1", "exchange", exchange_id="x1"),
        _held("exchange:t1:x2", "exchange", exchange_id="x2"),
        _held("exchange:t2:x1", "exchange", trial_id="t2", exchange_id="x1"),
        _held("exchange:t9:x1", "exchange", trial_id="t9", exchange_id="x1"),  # a trial it does not know
    ])
    assert await store.pending_exchanges(limit=10) == [b"exchange:t1:x1", b"exchange:t1:x2"]
    assert await store.pending_exchanges(limit=1) == [b"exchange:t1:x1"]
    assert await store.claim_case(start("c1", exchange_id="x1")) == "claimed"
    assert await store.pending_exchanges(limit=10) == [b"exchange:t1:x2"]
    await store.set_trial_status("t1", "posture_changed", "moved", ended=False, now=2.0)
    assert await store.pending_exchanges(limit=10) == [], "a paused trial's exchanges wait"
    await store.set_trial_status("t1", "stopped", "stopped", ended=True, now=3.0)
    assert await store.pending_exchanges(limit=10) == [b"exchange:t1:x2"], "an ended trial's are counted once"
    assert await store.claim_case(start("c2", exchange_id="x2")) == "not_running"
    assert await store.pending_exchanges(limit=10) == []


@pytest.mark.collector_store
async def test_exchanges_are_leased_to_one_collector_in_turn_by_team(stores: OpenStore) -> None:
    first = await stores()
    await first.create_trial(trial("ta", team="a", execution_site="control_plane"))
    await first.create_trial(trial("tb", team="b", execution_site="control_plane"))
    await first.put_collected([_held(f"exchange:ta:x{i}", "exchange", trial_id="ta", exchange_id=f"x{i}")
                               for i in range(6)])
    await first.put_collected([Held(id=f"exchange:tb:x{i}", kind="exchange", sidecar_id="s1",
                                    body=f"exchange:tb:x{i}".encode(), received_at=1.0, team="b", trial_id="tb",
                                    exchange_id=f"x{i}") for i in range(2)])
    assert await first.lease_exchanges(owner="A", now=1.0, lease_until=10.0, limit=4) == [
        b"exchange:ta:x0", b"exchange:tb:x0", b"exchange:ta:x1", b"exchange:tb:x1"], "team b waits for no backlog"
    second = await stores()
    got = await asyncio.gather(first.lease_exchanges(owner="A", now=2.0, lease_until=10.0, limit=3),
                               second.lease_exchanges(owner="B", now=2.0, lease_until=10.0, limit=3))
    assert not set(got[0]) & set(got[1]), "an exchange is leased to one collector"
    assert b"exchange:tb:x0" in got[0] and b"exchange:ta:x0" not in got[1], "A renews its own"
    assert await second.lease_exchanges(owner="B", now=11.0, lease_until=20.0, limit=10) == [
        b"exchange:ta:x0", b"exchange:tb:x0", b"exchange:ta:x1", b"exchange:tb:x1", b"exchange:ta:x2",
        b"exchange:ta:x3", b"exchange:ta:x4", b"exchange:ta:x5"], "A's leases ended: B takes them"
    assert await first.claim_case(start("c1", trial_id="ta", exchange_id="x0")) == "claimed"
    assert b"exchange:ta:x0" not in await second.lease_exchanges(owner="B", now=12.0, lease_until=20.0, limit=10)


@pytest.mark.collector_store
async def test_collected_exchanges_are_a_teams_traffic_of_trials_still_pinned_here(store: ControlPlaneStore) -> None:
    """The control plane's retained traffic, for seeding datasets: a team's exchange records of
    control-plane trials that no posture change paused, oldest first, paged by ``seq``."""
    await store.create_trial(trial("cp", execution_site="control_plane"))
    await store.create_trial(trial("cp-paused", execution_site="control_plane"))
    await store.create_trial(trial("other", team="team-b", execution_site="control_plane"))

    def ex(trial_id: str, team: str, i: int) -> Held:
        return Held(id=f"exchange:{trial_id}:x{i}", kind="exchange", sidecar_id="s", team=team,
                         trial_id=trial_id, exchange_id=f"x{i}", revision=None, body=f'{{"i": {i}}}'.encode(),
                         received_at=1.0)

    await store.put_collected([ex("cp", "team-a", i) for i in range(3)] + [ex("cp-paused", "team-a", 9)]
                              + [ex("other", "team-b", 5)])
    await store.set_trial_status("cp-paused", "posture_changed", "retention may be off", ended=False, now=2.0)
    first = await store.collected_exchanges("team-a", after_seq=0, limit=2)
    rest = await store.collected_exchanges("team-a", after_seq=first[-1][0], limit=10)
    assert [body for _, body in first + rest] == [b'{"i": 0}', b'{"i": 1}', b'{"i": 2}']
    assert [body for _, body in await store.collected_exchanges("team-b", after_seq=0, limit=10)] == [b'{"i": 5}']


@pytest.mark.collector_store
async def test_only_the_latest_posture_record_per_sidecar_and_team_is_kept(store: ControlPlaneStore) -> None:
    """Posture records come every few heartbeats: older ones of the same (sidecar, team) are
    pruned as a later one is stored. A pruned id is stored again when it comes again (and
    pruned at once), while a kept one is not — which is how this test sees what is held."""
    def posture(rid: str, rev: int, team: str = "a", sidecar: str = "s1") -> Held:
        return Held(id=rid, kind="posture", sidecar_id=sidecar, body=rid.encode(), received_at=1.0, team=team,
                    revision=rev)

    p1, p2, p3 = posture("posture:a:gw:1", 1), posture("posture:a:gw:2", 2), posture("posture:a:gw:3", 3)
    other_sidecar, other_team = posture("posture:a:gw2:1", 1, sidecar="s2"), posture("posture:b:gw:1", 1, team="b")
    assert await store.put_collected([p1, p2, other_sidecar, other_team]) == [p1.id, p2.id, other_sidecar.id,
                                                                              other_team.id]
    assert await store.latest_posture("a") == b"posture:a:gw:2"
    assert await store.put_collected([p1]) == [p1.id], "the older record of (s1, a) was pruned"
    assert await store.put_collected([p2, other_sidecar, other_team]) == [], "the latest of each (sidecar, team) kept"
    assert await store.latest_posture("a") == b"posture:a:gw:2", "a late older copy does not count"
    assert await store.put_collected([p3]) == [p3.id]
    assert await store.put_collected([p1, p2]) == [p1.id, p2.id], "both pruned by the later record"
    assert await store.latest_posture("a") == b"posture:a:gw:3" and await store.latest_posture("b") == b"posture:b:gw:1"
