"""The store contract between peers: two or more store instances on one
database, as two processes of a fleet would have. Leases and recovery, races
on one row, and the cap under concurrent reserve/finish cycles.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

from sidecar.store import Store
from sidecar.store.records import KeptState
from tests.store.conftest import OpenStore
from tests.store.factories import effect, finish, replay, start, trial

FOREVER = 1e12

# -- leases and recovery ----------------------------------------------------------


async def _in_flight(store: Store, owner: str, prefix: str) -> list[str]:
    """Three cases of ``owner``: one claimed, one reserved (300), one dispatched (500)."""
    ids = [f"{prefix}-claimed", f"{prefix}-reserved", f"{prefix}-dispatched"]
    for cid in ids:
        assert await store.claim_case(start(cid, owner=owner)) == "claimed"
    await store.reserve("t1", ids[1], 300, kind="reserve", at=1.0)
    await store.reserve("t1", ids[2], 500, kind="reserve", at=1.0)
    assert await store.mark_dispatched(ids[2], owner)
    return ids


async def test_recovery_touches_only_expired_owners(store: Store, peer: Store) -> None:
    await store.create_trial(trial("t1", cap_micros=10_000))
    await store.heartbeat("A", now=100.0, lease_s=10.0)
    await peer.heartbeat("B", now=100.0, lease_s=60.0)
    a_ids = await _in_flight(store, "A", "a")
    b_ids = await _in_flight(peer, "B", "b")

    assert await peer.recover_expired(110.0) == [], "a lease ending exactly now has not ended before now"
    recovered = await peer.recover_expired(111.0)
    assert sorted(recovered) == sorted(a_ids)
    cases = {c["id"]: c for c in await store.cases("t1")}
    for cid in b_ids:
        assert cases[cid]["state"] != "finished" and cases[cid]["outcome"] is None, "a live peer's case is untouched"
    assert [cases[c]["outcome"] for c in a_ids] == ["indeterminate"] * 3
    assert [cases[c]["charged_micros"] for c in a_ids] == [0, 0, 500], "only the dispatched case is held"
    got = await store.get_trial("t1")
    assert got is not None
    assert (got.spent_micros, got.reserved_micros, got.unknown_calls) == (500, 800, 1), "B still holds 300 + 500"
    a_ledger = [(e.case_id, e.kind, e.micros) for e in await store.ledger("t1") if e.case_id in a_ids and e.at == 111.0]
    assert sorted(a_ledger) == sorted([("a-reserved", "release", 300), ("a-dispatched", "release", 500),
                                       ("a-dispatched", "hold_unknown", 500)])
    snap = await store.snapshot("t1")
    assert snap is not None and snap.funnel == {"indeterminate": 3}
    assert await peer.recover_expired(112.0) == [], "recovered once"


async def test_a_late_owner_changes_nothing_after_recovery(store: Store, peer: Store) -> None:
    await store.create_trial(trial("t1", cap_micros=10_000))
    await store.heartbeat("A", now=100.0, lease_s=10.0)
    ids = await _in_flight(store, "A", "a")
    await peer.heartbeat("B", now=200.0, lease_s=60.0)
    assert sorted(await peer.recover_expired(200.0)) == sorted(ids)
    before = (await store.snapshot("t1"), await store.ledger("t1"), await store.cases("t1"))
    assert not await store.mark_dispatched("a-reserved", "A")
    assert not await store.finish_case(finish("a-dispatched", charged=400, effects=(effect("late"),)), "A")
    assert not (await store.reserve("t1", "a-reserved", 100, kind="top_up", at=201.0)).applied
    assert (await store.snapshot("t1"), await store.ledger("t1"), await store.cases("t1")) == before
    assert await store.outbox() == []


async def test_heartbeat_renews_the_lease(store: Store, peer: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.heartbeat("A", now=100.0, lease_s=10.0)
    await store.claim_case(start("c1", owner="A"))
    await store.heartbeat("A", now=108.0, lease_s=10.0)
    assert await peer.recover_expired(115.0) == []
    assert await peer.recover_expired(118.5) == ["c1"]


async def test_a_sweep_never_recovers_its_own_owner_however_late_its_heartbeat(store: Store, peer: Store) -> None:
    """A process whose loop stalled past its own lease (a loaded host, a long GC) sweeps before its
    heartbeat catches up: its own cases are late, not dead. A peer still recovers them."""
    await store.create_trial(trial("t1"))
    await store.heartbeat("A", now=100.0, lease_s=1.0)
    await store.heartbeat("B", now=100.0, lease_s=1.0)
    await store.claim_case(start("a1", owner="A"))
    await store.claim_case(start("b1", owner="B"))
    await store.claim_case(start("g1", owner="gone"))  # an owner with no lease row: still recovered
    assert sorted(await store.recover_expired(102.0, alive="A")) == ["b1", "g1"]
    assert {c["id"]: c["state"] for c in await store.cases("t1")}["a1"] == "claimed"
    assert await store.recover_expired(103.0, alive="A") == [], "nor on the next sweep"
    assert await peer.recover_expired(103.0, alive="B") == ["a1"], "a peer's sweep recovers it"


async def test_cases_of_an_owner_without_a_lease_count_as_expired(store: Store, peer: Store) -> None:
    await store.create_trial(trial("t1"))
    await peer.heartbeat("B", now=0.0, lease_s=FOREVER)
    await store.claim_case(start("c1", owner="never-heartbeat"))
    await peer.claim_case(start("c2", owner="B"))
    assert await peer.recover_expired(1.0) == ["c1"]
    assert [c["state"] for c in await store.cases("t1")] == ["finished", "claimed"]


async def test_retire_finishes_only_its_own_cases_at_once(store: Store, peer: Store) -> None:
    await store.create_trial(trial("t1", cap_micros=10_000))
    await store.heartbeat("A", now=100.0, lease_s=FOREVER)
    await peer.heartbeat("B", now=100.0, lease_s=FOREVER)
    a_ids = await _in_flight(store, "A", "a")
    b_ids = await _in_flight(peer, "B", "b")
    assert sorted(await store.retire("A", 150.0)) == sorted(a_ids)
    cases = {c["id"]: c for c in await store.cases("t1")}
    assert all(cases[c]["outcome"] == "indeterminate" for c in a_ids)
    assert all(cases[c]["state"] != "finished" for c in b_ids)
    got = await store.get_trial("t1")
    assert got is not None and (got.spent_micros, got.reserved_micros, got.unknown_calls) == (500, 800, 1)
    assert await store.retire("A", 151.0) == []
    # The lease ended with the retirement: A's next case, unleased, is recoverable at once.
    await store.claim_case(start("a-after", owner="A"))
    assert await peer.recover_expired(152.0) == ["a-after"]


async def test_concurrent_sweepers_never_recover_a_case_twice(stores: OpenStore) -> None:
    sweepers = [await stores() for _ in range(3)]
    first = sweepers[0]
    await first.create_trial(trial("t1", cap_micros=1_000_000))
    for owner in ("A", "B"):
        await first.heartbeat(owner, now=0.0, lease_s=1.0)
        for i in range(30):
            cid = f"{owner}{i:02d}"
            await first.claim_case(start(cid, owner=owner))
            await first.reserve("t1", cid, 100 + i, kind="reserve", at=0.5)
            if i % 2:
                await first.mark_dispatched(cid, owner)
    results = await asyncio.gather(*(s.recover_expired(10.0) for s in sweepers for _ in range(2)))
    ids = [cid for r in results for cid in r]
    assert len(ids) == len(set(ids)) == 60
    snap = await first.snapshot("t1")
    assert snap is not None and snap.funnel == {"indeterminate": 60} and snap.record.reserved_micros == 0
    kinds = Counter(e.kind for e in await first.ledger("t1"))
    assert kinds == {"reserve": 60, "release": 60, "hold_unknown": 30}
    spent, reserved = replay(await first.ledger("t1"), 1_000_000)
    assert (spent, reserved) == (snap.record.spent_micros, 0)


async def test_finishes_racing_a_sweep_count_each_case_once(store: Store, peer: Store) -> None:
    """An owner whose lease lapsed keeps finishing while a peer sweeps: each
    case ends exactly once, either way, and the figures add up."""
    await store.create_trial(trial("t1", cap_micros=1_000_000))
    await store.heartbeat("A", now=0.0, lease_s=1.0)
    n = 40
    for i in range(n):
        await store.claim_case(start(f"c{i:02d}", owner="A"))
        await store.reserve("t1", f"c{i:02d}", 1000, kind="reserve", at=0.5)
        await store.mark_dispatched(f"c{i:02d}", "A")

    async def finish_all() -> list[bool]:
        return [await store.finish_case(finish(f"c{i:02d}", charged=600, effects=(effect(f"r{i}"),)), "A")
                for i in range(n)]

    finished, recovered = await asyncio.gather(finish_all(), peer.recover_expired(5.0))
    judged = sum(finished)
    assert judged + len(recovered) == n
    assert {f"c{i:02d}" for i, ok in enumerate(finished) if not ok} == set(recovered)
    snap = await store.snapshot("t1")
    assert snap is not None
    assert snap.funnel == {k: v for k, v in {"judged": judged, "indeterminate": len(recovered)}.items() if v}
    assert snap.record.reserved_micros == 0
    assert snap.record.spent_micros == 600 * judged + 1000 * len(recovered)
    assert len(await store.outbox()) == judged
    assert replay(await store.ledger("t1"), 1_000_000) == (snap.record.spent_micros, 0)


# -- races on one row ---------------------------------------------------------------


async def test_concurrent_creates_with_one_key_make_one_trial(store: Store, peer: Store) -> None:
    made = await asyncio.gather(*(
        s.create_trial(trial(f"t{i}"), idempotency_key="k", body_hash="h")
        for i, s in enumerate([store, peer] * 5)
    ))
    assert len({t.id for t in made}) == 1
    assert [t.id for t in await store.list_trials()] == [made[0].id]


async def test_concurrent_stops_change_once(store: Store, peer: Store) -> None:
    await store.create_trial(trial("t1"))
    results = await asyncio.gather(*(
        s.set_trial_status("t1", "stopped", f"by {i}", ended=True, now=float(i))
        for i, s in enumerate([store, peer] * 4)
    ))
    assert sum(changed for _, changed in results) == 1
    final = await store.get_trial("t1")
    winner = [r for r, changed in results if changed][0]
    assert final == winner


async def test_concurrent_claims_of_one_exchange_claim_once(store: Store, peer: Store) -> None:
    await store.create_trial(trial("t1"))
    outcomes = await asyncio.gather(*(
        s.claim_case(start(f"c{i}", exchange_id="x", owner="A" if s is store else "B"))
        for i, s in enumerate([store, peer] * 5)
    ))
    assert Counter(outcomes) == {"claimed": 1, "duplicate": 9}
    assert len(await store.cases("t1")) == 1


# -- the cap under concurrency ------------------------------------------------------


async def test_cap_holds_under_concurrent_cycles_from_two_instances(store: Store, peer: Store) -> None:
    cap = 60_000
    await store.create_trial(trial("t1", cap_micros=cap))
    await store.heartbeat("A", now=0.0, lease_s=FOREVER)
    await peer.heartbeat("B", now=0.0, lease_s=FOREVER)
    rng = random.Random(20240611)
    plans = [(i, rng.randint(1, 4000), rng.random(), rng.random() < 0.3) for i in range(200)]

    async def cycle(i: int, amount: int, charge_share: float, top_up: bool) -> None:
        s, owner = (store, "A") if i % 2 == 0 else (peer, "B")
        cid = f"c{i:03d}"
        assert await s.claim_case(start(cid, owner=owner)) == "claimed"
        held = 0
        r = await s.reserve("t1", cid, amount, kind="reserve", at=float(i))
        assert r.spent_micros + r.reserved_micros <= r.cap_micros
        if r.applied:
            held = amount
            assert await s.mark_dispatched(cid, owner)
            if top_up and (await s.reserve("t1", cid, amount // 2, kind="top_up", at=float(i))).applied:
                held += amount // 2
        charged = int(held * charge_share)
        outcome = "judged" if held else "shed_cap_busy"
        assert await s.finish_case(finish(cid, charged=charged, outcome=outcome), owner)

    await asyncio.gather(*(cycle(*p) for p in plans))
    entries = await store.ledger("t1")
    spent, reserved = replay(entries, cap)
    final = await peer.get_trial("t1")
    assert final is not None and (final.spent_micros, final.reserved_micros) == (spent, reserved) == (spent, 0)
    snap = await store.snapshot("t1")
    assert snap is not None and sum(snap.funnel.values()) == 200 and snap.case_states == {"finished": 200}
    assert snap.funnel.get("shed_cap_busy", 0) > 0, "the cap must have been reached for the test to mean anything"
    # Each case's rows appear in the order its transactions committed.
    by_case: dict[str | None, list[str]] = {}
    for e in entries:
        by_case.setdefault(e.case_id, []).append(e.kind)
    for kinds in by_case.values():
        assert kinds in (["charge"], ["reserve", "release", "charge"], ["reserve", "top_up", "release", "charge"])


# -- opening ------------------------------------------------------------------------


async def test_instances_opening_a_fresh_database_at_once_all_succeed(stores: OpenStore) -> None:
    opened = await asyncio.gather(*(stores() for _ in range(3)))
    await opened[0].create_trial(trial("t1"))
    for s in opened:
        assert [t.id for t in await s.list_trials()] == ["t1"]


# -- kept states ------------------------------------------------------------------


async def test_of_state_writers_racing_from_one_read_exactly_one_is_kept(store: Store, peer: Store) -> None:
    """Eight writers that all read "nothing stored" save at once, with different
    counts: the first to commit is kept whole (both of its states), the rest
    are refused, whatever their counts."""
    await store.create_trial(trial("t1"))
    writers = [(store, peer)[i % 2] for i in range(8)]
    await asyncio.gather(*(
        s.save_states("t1", sequence=KeptState(f"w{i}", 10 + i, None), judge_health=KeptState(f"w{i}", i, None))
        for i, s in enumerate(writers)
    ))
    got = await store.get_trial("t1")
    assert got is not None
    assert got.sequence_state in {f"w{i}" for i in range(8)}
    assert got.judge_health_state == got.sequence_state


async def test_racing_folds_lose_no_look_and_never_lower_the_count(store: Store, peer: Store) -> None:
    """Writers on two instances each fold their looks into the stored state the
    way sidecar/trials/fold.py does (read, fold, compare-and-set, fold again when
    refused): every look ends up in the state, and the count each writer reads
    never falls."""
    await store.create_trial(trial("t1"))
    seen: dict[str, list[int]] = {}

    async def writer(s: Store, name: str, looks: range) -> None:
        for n in looks:
            while True:
                record = await s.get_trial("t1")
                assert record is not None
                old = record.sequence_state
                state = json.loads(old) if old else {"n": 0, "looks": []}
                seen.setdefault(name, []).append(state["n"])
                new = {"n": max(state["n"], n), "looks": sorted([*state["looks"], f"{name}{n}"])}
                text = json.dumps(new, sort_keys=True)
                after = await s.save_states("t1", sequence=KeptState(text, new["n"], old))
                assert after is not None
                if after.sequence_state == text:
                    break

    plans = [(store, "a", range(1, 40, 3)), (peer, "b", range(2, 40, 3)), (peer, "c", range(3, 40, 3))]
    await asyncio.gather(*(writer(*p) for p in plans))
    got = await store.get_trial("t1")
    assert got is not None and got.sequence_state is not None
    final = json.loads(got.sequence_state)
    assert final["n"] == 39
    assert final["looks"] == sorted(f"{name}{n}" for _, name, looks in plans for n in looks)
    for name, counts in seen.items():
        assert counts == sorted(counts), f"writer {name} read a count that fell: {counts}"
