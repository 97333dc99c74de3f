"""The store contract (:mod:`sidecar.store.base`), method by method, on every backend.

Each test runs once per backend (``-k sqlite`` / ``-k postgres``). Peers —
recovery, leases and races between processes — are in ``test_peers.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from sidecar.store import Store
from sidecar.store.errors import IdempotencyConflict
from sidecar.store.records import KeptState
from tests.store.factories import effect, finish, judgment, replay, start, trial

# -- trials --------------------------------------------------------------------


async def test_create_and_get_round_trip_every_field_and_type(store: Store) -> None:
    record = trial("t1", route="/chat", incumbent_price_in=2_000_000, incumbent_price_out=8_000_000,
                   prompt_retention=False)
    assert await store.create_trial(record) == record
    got = await store.get_trial("t1")
    assert got == record
    assert got is not None and got.prompt_retention is False and isinstance(got.sample_rate, float)
    plain = trial("t2")
    await store.create_trial(plain)
    got2 = await store.get_trial("t2")
    assert got2 == plain and got2 is not None and got2.incumbent_price_in is None and got2.prompt_retention is True
    assert await store.get_trial("nope") is None


async def test_idempotent_create_returns_the_first_trial(store: Store) -> None:
    first = await store.create_trial(trial("t1"), idempotency_key="k1", body_hash="h1")
    again = await store.create_trial(trial("t2", created_at=2000.0), idempotency_key="k1", body_hash="h1")
    assert again == first and again.id == "t1"
    assert [t.id for t in await store.list_trials()] == ["t1"]


async def test_idempotency_key_with_another_body_conflicts_and_writes_nothing(store: Store) -> None:
    await store.create_trial(trial("t1"), idempotency_key="k1", body_hash="h1")
    with pytest.raises(IdempotencyConflict) as caught:
        await store.create_trial(trial("t2"), idempotency_key="k1", body_hash="h2")
    assert caught.value.key == "k1"
    assert await store.get_trial("t2") is None
    other = await store.create_trial(trial("t3"), idempotency_key="k2", body_hash="h2")
    assert other.id == "t3"


async def test_list_trials_newest_first_with_filters(store: Store) -> None:
    await store.create_trial(trial("a1", team="a", created_at=1.0))
    await store.create_trial(trial("a2", team="a", created_at=3.0))
    await store.create_trial(trial("b1", team="b", created_at=2.0))
    await store.create_trial(trial("c1", team="c", created_at=3.0))
    await store.set_trial_status("a2", "stopped", "operator", ended=True, now=10.0)
    assert [t.id for t in await store.list_trials()] == ["a2", "c1", "b1", "a1"]
    assert [t.id for t in await store.list_trials(teams=["a", "b"])] == ["a2", "b1", "a1"]
    assert [t.id for t in await store.list_trials(status="running")] == ["c1", "b1", "a1"]
    assert [t.id for t in await store.list_trials(teams=("a",), status="stopped")] == ["a2"]
    assert await store.list_trials(teams=[]) == []
    assert await store.list_trials(teams=["zzz"]) == []


async def test_list_trials_team_filter_keeps_other_teams_out(store: Store) -> None:
    """The filter a principal's listing relies on: exact team names, in the query itself."""
    await store.create_trial(trial("a1", team="team-a", created_at=1.0))
    await store.create_trial(trial("b1", team="team-b", created_at=2.0))
    await store.create_trial(trial("x1", team="team-a ", created_at=3.0))  # not team-a
    await store.create_trial(trial("p1", team="team-%", created_at=4.0))  # no pattern matching
    await store.create_trial(trial("u1", team="TEAM-A", created_at=5.0))  # case matters
    assert [t.id for t in await store.list_trials(teams=["team-a"])] == ["a1"]
    assert [t.id for t in await store.list_trials(teams=["team-b"], status="running")] == ["b1"]
    assert [t.id for t in await store.list_trials(teams=frozenset({"team-a", "team-b"}))] == ["b1", "a1"]
    assert [t.id for t in await store.list_trials(teams=["team-%"])] == ["p1"]
    await store.set_trial_status("b1", "stopped", "operator", ended=True, now=10.0)
    assert await store.list_trials(teams=["team-a"], status="stopped") == []


async def test_started_by_is_kept_and_read_back_everywhere(store: Store) -> None:
    await store.create_trial(trial("t1", started_by="alice@team-a"), idempotency_key="k", body_hash="h")
    await store.create_trial(trial("t2", created_at=2000.0))  # newer; no starter recorded
    got = await store.get_trial("t1")
    assert got is not None and got.started_by == "alice@team-a"
    assert [t.started_by for t in await store.list_trials()] == [None, "alice@team-a"]
    snap = await store.snapshot("t1")
    assert snap is not None and snap.record.started_by == "alice@team-a"
    # A repeat under the key returns the first trial, with its starter, not the repeater.
    again = await store.create_trial(trial("t3", started_by="bob@team-a"), idempotency_key="k", body_hash="h")
    assert (again.id, again.started_by) == ("t1", "alice@team-a")
    updated, changed = await store.set_trial_status("t1", "stopped", "operator", ended=True, now=5.0)
    assert changed and updated is not None and updated.started_by == "alice@team-a"


async def test_set_trial_status_is_conditional(store: Store) -> None:
    await store.create_trial(trial("t1"))
    record, changed = await store.set_trial_status("t1", "posture_changed", "posture", ended=False, now=5.0)
    assert changed and record is not None
    assert (record.status, record.status_reason, record.ended_at) == ("posture_changed", "posture", None)
    record, changed = await store.set_trial_status("t1", "posture_changed", "again", ended=False, now=6.0)
    assert not changed and record is not None and record.status_reason == "posture"
    record, changed = await store.set_trial_status("t1", "stopped", "operator", ended=True, now=7.0)
    assert changed and record is not None and record.ended_at == 7.0
    record, changed = await store.set_trial_status("t1", "cap_reached", "later", ended=True, now=9.0)
    assert changed and record is not None and record.ended_at == 7.0, "ended_at keeps the first end"
    assert await store.set_trial_status("nope", "stopped", None, ended=True, now=1.0) == (None, False)


# -- kept states (the statistics a read folds, sidecar/trials/fold.py) ---------------------


async def test_kept_states_start_empty_and_round_trip_on_every_read(store: Store) -> None:
    await store.create_trial(trial("t1"))
    got = await store.get_trial("t1")
    assert got is not None and (got.sequence_state, got.judge_health_state) == (None, None)
    after = await store.save_states(
        "t1", sequence=KeptState('{"n":3}', 3, None), judge_health=KeptState('{"decisive":2}', 2, None)
    )
    assert after is not None and (after.sequence_state, after.judge_health_state) == ('{"n":3}', '{"decisive":2}')
    assert await store.get_trial("t1") == after
    assert (await store.list_trials())[0] == after
    snap = await store.snapshot("t1")
    assert snap is not None and snap.record == after
    # None leaves a state alone; the other is still conditional on its own.
    after = await store.save_states("t1", judge_health=KeptState('{"decisive":5}', 5, '{"decisive":2}'))
    assert after is not None and (after.sequence_state, after.judge_health_state) == ('{"n":3}', '{"decisive":5}')
    assert await store.save_states("t1") == after
    assert await store.save_states("nope", sequence=KeptState("{}", 1, None)) is None


async def test_a_kept_state_is_replaced_only_from_the_text_it_was_folded_from(store: Store) -> None:
    """Two readers fold from one stored state: the second save is refused even
    with more cases, so it cannot drop a decision the first one's look reached."""
    await store.create_trial(trial("t1"))
    first = await store.save_states("t1", sequence=KeptState("A10", 10, None))
    assert first is not None and first.sequence_state == "A10"
    second = await store.save_states("t1", sequence=KeptState("B12", 12, None))
    assert second is not None and second.sequence_state == "A10", "folded from a state replaced since: refused"
    third = await store.save_states("t1", sequence=KeptState("B12", 12, "A10"))
    assert third is not None and third.sequence_state == "B12"
    # In one call each state is its own conditional update.
    mixed = await store.save_states("t1", sequence=KeptState("C13", 13, "stale"), judge_health=KeptState("H1", 1, None))
    assert mixed is not None and (mixed.sequence_state, mixed.judge_health_state) == ("B12", "H1")


async def test_a_kept_state_is_never_replaced_by_one_folded_over_fewer_cases(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.save_states("t1", sequence=KeptState("n10", 10, None), judge_health=KeptState("d7", 7, None))
    fewer = await store.save_states("t1", sequence=KeptState("n9", 9, "n10"), judge_health=KeptState("d6", 6, "d7"))
    assert fewer is not None and (fewer.sequence_state, fewer.judge_health_state) == ("n10", "d7")
    # The same count may replace it: a stale look folded in tightens the state without adding cases.
    same = await store.save_states("t1", sequence=KeptState("n10b", 10, "n10"))
    assert same is not None and same.sequence_state == "n10b"
    more = await store.save_states("t1", sequence=KeptState("n11", 11, "n10b"), judge_health=KeptState("d8", 8, "d7"))
    assert more is not None and (more.sequence_state, more.judge_health_state) == ("n11", "d8")


async def test_kept_states_survive_the_case_ledger_and_status_changes(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.save_states("t1", sequence=KeptState("s", 1, None), judge_health=KeptState("h", 1, None))
    await store.claim_case(start("c1"))
    await store.reserve("t1", "c1", 10, kind="reserve", at=1.0)
    await store.finish_case(finish("c1", charged=5), "A")
    record, changed = await store.set_trial_status("t1", "stopped", "operator", ended=True, now=2.0)
    assert changed and record is not None
    assert (record.sequence_state, record.judge_health_state, record.spent_micros) == ("s", "h", 5)


# -- claims and reservations -----------------------------------------------------


async def test_claim_then_duplicate_then_not_running(store: Store) -> None:
    await store.create_trial(trial("t1"))
    assert await store.claim_case(start("c1", exchange_id="x1")) == "claimed"
    assert await store.claim_case(start("c2", exchange_id="x1", owner="B")) == "duplicate"
    assert await store.claim_case(start("c1", exchange_id="x1")) == "duplicate"
    assert [(c["id"], c["owner"], c["state"], c["reserved_micros"]) for c in await store.cases("t1")] == [
        ("c1", "A", "claimed", 0)
    ]
    assert await store.claim_case(start("c3", trial_id="nope")) == "not_running"
    await store.set_trial_status("t1", "stopped", None, ended=True, now=2.0)
    assert await store.claim_case(start("c4", exchange_id="x4")) == "not_running"
    assert await store.claim_case(start("c5", exchange_id="x1")) == "duplicate", "a re-delivery stays a duplicate"
    # A case claimed after the trial ended is recorded as finished at once, and counted once,
    # so its own re-delivery is a duplicate as well.
    assert await store.claim_case(start("c6", exchange_id="x4", owner="B")) == "duplicate"
    cases = {c["id"]: c for c in await store.cases("t1")}
    assert sorted(cases) == ["c1", "c4"]
    assert (cases["c4"]["state"], cases["c4"]["outcome"], cases["c4"]["charged_micros"]) == ("finished", "shed_stopped", 0)
    snap = await store.snapshot("t1")
    assert snap is not None and snap.funnel == {"shed_stopped": 1}
    # The light read (a replay's wait for its cases) agrees with the snapshot on what it reads.
    progress = await store.progress("t1")
    assert progress is not None and (progress.record, progress.funnel, progress.case_states) == (
        snap.record, snap.funnel, snap.case_states)
    assert await store.progress("nope") is None
    await store.create_trial(trial("t2"))
    await store.set_trial_status("t2", "cap_reached", "cap", ended=True, now=3.0)
    assert await store.claim_case(start("c7", trial_id="t2", exchange_id="x7")) == "not_running"
    assert [(c["outcome"]) for c in await store.cases("t2")] == ["cap_reached"]


async def test_reserve_fits_up_to_the_cap_and_returns_the_figures(store: Store) -> None:
    await store.create_trial(trial("t1", cap_micros=1000))
    await store.claim_case(start("c1"))
    r = await store.reserve("t1", "c1", 600, kind="reserve", at=1.0)
    assert (r.applied, r.cap_micros, r.spent_micros, r.reserved_micros, r.status) == (True, 1000, 0, 600, "running")
    r = await store.reserve("t1", "c1", 400, kind="top_up", at=2.0)
    assert (r.applied, r.reserved_micros) == (True, 1000), "exactly the cap fits"
    cases = await store.cases("t1")
    assert (cases[0]["state"], cases[0]["reserved_micros"]) == ("reserved", 1000)
    assert [(e.kind, e.micros, e.case_id) for e in await store.ledger("t1")] == [
        ("reserve", 600, "c1"), ("top_up", 400, "c1")
    ]


async def test_reserve_that_does_not_fit_changes_nothing(store: Store) -> None:
    await store.create_trial(trial("t1", cap_micros=1000))
    await store.claim_case(start("c1"))
    await store.claim_case(start("c2"))
    assert (await store.reserve("t1", "c1", 700, kind="reserve", at=1.0)).applied
    r = await store.reserve("t1", "c2", 301, kind="reserve", at=2.0)
    assert (r.applied, r.cap_micros, r.spent_micros, r.reserved_micros, r.status) == (False, 1000, 0, 700, "running")
    c2 = [c for c in await store.cases("t1") if c["id"] == "c2"][0]
    assert (c2["state"], c2["reserved_micros"]) == ("claimed", 0)
    assert len(await store.ledger("t1")) == 1


async def test_reserve_on_a_trial_not_running(store: Store) -> None:
    await store.create_trial(trial("t1", cap_micros=1000))
    await store.claim_case(start("c1"))
    await store.set_trial_status("t1", "stopped", None, ended=True, now=1.0)
    r = await store.reserve("t1", "c1", 10, kind="reserve", at=2.0)
    assert (r.applied, r.reserved_micros, r.status) == (False, 0, "stopped")
    r = await store.reserve("nope", "c1", 10, kind="reserve", at=2.0)
    assert (r.applied, r.status) == (False, "missing")
    assert await store.ledger("t1") == []


async def test_reserve_for_a_finished_case_changes_nothing(store: Store) -> None:
    """A case finished (or recovered) already can never hold a reservation again:
    it would stay on the trial forever, since nothing releases a finished case."""
    await store.create_trial(trial("t1", cap_micros=1000))
    await store.claim_case(start("c1"))
    assert await store.finish_case(finish("c1", outcome="candidate_failed"), "A")
    r = await store.reserve("t1", "c1", 10, kind="top_up", at=2.0)
    assert (r.applied, r.reserved_micros) == (False, 0)
    r = await store.reserve("t1", "unknown-case", 10, kind="reserve", at=2.0)
    assert (r.applied, r.reserved_micros) == (False, 0)
    got = await store.get_trial("t1")
    assert got is not None and got.reserved_micros == 0


# -- dispatch and finish ----------------------------------------------------------


async def test_mark_dispatched_only_by_the_owner_and_only_once_reserved(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.claim_case(start("c1", owner="A"))
    assert not await store.mark_dispatched("c1", "A"), "a claimed case has no reservation yet"
    await store.reserve("t1", "c1", 10, kind="reserve", at=1.0)
    assert not await store.mark_dispatched("c1", "B")
    assert await store.mark_dispatched("c1", "A")
    assert not await store.mark_dispatched("c1", "A"), "already dispatched"
    assert not await store.mark_dispatched("nope", "A")
    assert (await store.cases("t1"))[0]["state"] == "dispatched"


async def test_finish_settles_spend_and_writes_everything_in_one_go(store: Store) -> None:
    await store.create_trial(trial("t1", cap_micros=10_000))
    await store.claim_case(start("c1", bodies_json='{"prompt": "p"}'))
    await store.reserve("t1", "c1", 3000, kind="reserve", at=1.0)
    await store.mark_dispatched("c1", "A")
    done = finish(
        "c1", charged=1200, known_micros=1000, unknown_calls=1, priced_calls=1, score=0.5, disputed_calls=1,
        judgments=[judgment("j1", "c1", score=1, strong=True, is_audit=False, longer_won=True),
                   judgment("j2", "c1", score=0, winner_slot=None, is_audit=True, order="incumbent_first",
                            longer_won=None, created_at=1002.5)],
        effects=(effect("r1", '{"a": 1}'), effect("r2")),
        bodies_json='{"answer": "x"}',
    )
    assert await store.finish_case(done, "A")
    got = await store.get_trial("t1")
    assert got is not None
    assert (got.spent_micros, got.known_micros, got.reserved_micros, got.unknown_calls, got.priced_calls,
            got.disputed_calls) == (1200, 1000, 0, 1, 1, 1)
    assert [(e.kind, e.micros) for e in await store.ledger("t1")] == [("reserve", 3000), ("release", 3000), ("charge", 1200)]
    case = (await store.cases("t1"))[0]
    assert (case["state"], case["outcome"], case["charged_micros"], case["reserved_micros"], case["score"]) == (
        "finished", "judged", 1200, 3000, 0.5
    )
    snap = await store.snapshot("t1")
    assert snap is not None
    assert snap.funnel == {"judged": 1}
    assert snap.judgments == done.judgments
    assert [(j.is_audit, j.strong, j.longer_won) for j in snap.judgments] == [(False, True, True), (True, False, None)]
    assert [(o.record_id, o.body) for o in await store.outbox()] == [("r1", '{"a": 1}'), ("r2", "{}")]


async def test_finish_of_a_case_never_reserved_charges_nothing_and_releases_nothing(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.claim_case(start("c1"))
    assert await store.finish_case(finish("c1", outcome="shed_cap_busy", priced_calls=0), "A")
    assert [(e.kind, e.micros) for e in await store.ledger("t1")] == [("charge", 0)]
    assert (await store.cases("t1"))[0]["state"] == "finished"


async def test_finish_only_by_the_owner(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.claim_case(start("c1", owner="A"))
    await store.reserve("t1", "c1", 500, kind="reserve", at=1.0)
    assert not await store.finish_case(finish("c1", charged=100, effects=(effect("r1"),)), "B")
    got = await store.get_trial("t1")
    assert got is not None and (got.spent_micros, got.reserved_micros) == (0, 500)
    assert await store.outbox() == [] and len(await store.ledger("t1")) == 1
    assert not await store.finish_case(finish("nope", charged=0), "A")


async def test_finish_twice_is_a_no_op(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.claim_case(start("c1"))
    await store.reserve("t1", "c1", 500, kind="reserve", at=1.0)
    assert await store.finish_case(finish("c1", charged=100, effects=(effect("r1"),)), "A")
    before = (await store.ledger("t1"), await store.snapshot("t1"), await store.outbox())
    assert not await store.finish_case(finish("c1", charged=400, outcome="judge_failed", effects=(effect("r9"),)), "A")
    assert (await store.ledger("t1"), await store.snapshot("t1"), await store.outbox()) == before


async def test_effects_are_written_once_per_record_id(store: Store) -> None:
    await store.create_trial(trial("t1"))
    for cid in ("c1", "c2"):
        await store.claim_case(start(cid))
    await store.finish_case(finish("c1", effects=(effect("r1", "first"), effect("r2"))), "A")
    await store.finish_case(finish("c2", effects=(effect("r1", "second"), effect("r3"))), "A")
    assert [(o.record_id, o.body) for o in await store.outbox()] == [("r1", "first"), ("r2", "{}"), ("r3", "{}")]
    assert [o.record_id for o in await store.outbox(limit=2)] == ["r1", "r2"]


async def test_finish_moves_only_a_running_trial(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.create_trial(trial("t2"))
    for tid in ("t1", "t2"):
        await store.claim_case(start(f"{tid}-c1", trial_id=tid))
    await store.set_trial_status("t2", "stopped", "operator", ended=True, now=5.0)
    exhausted: dict[str, Any] = dict(
        trial_status="cap_reached", trial_status_reason="remaining cap below a case", finished_at=9.0
    )
    assert await store.finish_case(finish("t1-c1", "t1", **exhausted), "A")
    assert await store.finish_case(finish("t2-c1", "t2", **exhausted), "A")
    t1, t2 = await store.get_trial("t1"), await store.get_trial("t2")
    assert t1 is not None and (t1.status, t1.status_reason, t1.ended_at) == ("cap_reached", "remaining cap below a case", 9.0)
    assert t2 is not None and (t2.status, t2.status_reason, t2.ended_at) == ("stopped", "operator", 5.0)


async def test_a_charge_past_the_cap_is_refused_whole(store: Store) -> None:
    """The cap is also a constraint: a caller bug (charging more than it
    reserved, past the cap) fails the transaction and writes nothing."""
    await store.create_trial(trial("t1", cap_micros=1000))
    await store.claim_case(start("c1"))
    await store.reserve("t1", "c1", 900, kind="reserve", at=1.0)
    with pytest.raises(Exception):
        await store.finish_case(finish("c1", charged=1001, effects=(effect("r1"),)), "A")
    got = await store.get_trial("t1")
    assert got is not None and (got.spent_micros, got.reserved_micros) == (0, 900)
    assert await store.outbox() == [] and (await store.cases("t1"))[0]["state"] == "reserved"
    snap = await store.snapshot("t1")
    assert snap is not None and snap.funnel == {}


# -- funnel and reads ---------------------------------------------------------------


async def test_count_outcomes_adds(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.create_trial(trial("t2"))
    await store.count_outcomes({})
    await store.count_outcomes({("t1", "not_sampled"): 5, ("t1", "shed_queue_full"): 1, ("t2", "not_sampled"): 2})
    await store.count_outcomes({("t1", "not_sampled"): 3})
    await store.claim_case(start("c1"))
    await store.finish_case(finish("c1", outcome="candidate_failed"), "A")
    snap = await store.snapshot("t1")
    assert snap is not None and snap.funnel == {"not_sampled": 8, "shed_queue_full": 1, "candidate_failed": 1}
    snap2 = await store.snapshot("t2")
    assert snap2 is not None and snap2.funnel == {"not_sampled": 2}


async def test_snapshot_figures_agree(store: Store) -> None:
    assert await store.snapshot("nope") is None
    await store.create_trial(trial("t1", cap_micros=100_000))
    scores = {"c1": 1.0, "c2": 1.0, "c3": -0.5, "c4": None}
    for i, (cid, score) in enumerate(scores.items()):
        await store.claim_case(start(cid, incumbent_latency_ms=100.0 + i, incumbent_cost_micros=200))
        await store.reserve("t1", cid, 1000, kind="reserve", at=1.0)
        outcome = "judged" if score is not None else "judge_failed"
        await store.finish_case(finish(cid, charged=100 * (i + 1), outcome=outcome, score=score,
                                       candidate_latency_ms=200.0 + 10 * i, candidate_cost_micros=100 * (i + 1),
                                       judgments=[judgment(f"j-{cid}", cid, created_at=1000.0 + i)]), "A")
    await store.claim_case(start("c5"))
    snap = await store.snapshot("t1")
    assert snap is not None
    assert snap.record == await store.get_trial("t1")
    assert (snap.record.spent_micros, snap.record.reserved_micros) == (1000, 0)
    assert snap.funnel == {"judged": 3, "judge_failed": 1}
    assert snap.score_counts == {1.0: 2, -0.5: 1} == await store.score_counts("t1")
    assert snap.case_states == {"finished": 4, "claimed": 1}
    assert [j.judgment_id for j in snap.judgments] == ["j-c1", "j-c2", "j-c3", "j-c4"]
    assert snap.paired == {
        "cost_cases": 3, "candidate_cost_micros": 600, "incumbent_cost_micros": 600, "cost_ratio": 1.0,
        "latency_cases": 3, "candidate_latency_ms_p50": 210.0, "incumbent_latency_ms_p50": 101.0,
        "latency_ratio": 210.0 / 101.0,
    }


async def test_fold_inputs_count_decisive_primary_judgments_and_first_slot_wins(store: Store) -> None:
    assert await store.fold_inputs("nope") is None
    await store.create_trial(trial("t1"))
    winners = {"c1": ("A", "verdict", False), "c2": ("B", "verdict", False), "c3": (None, "verdict", False),
               "c4": ("A", "error", False), "c5": ("A", "verdict", True), "c6": ("A", "verdict", False)}
    for cid, (slot, outcome, audit) in winners.items():
        await store.claim_case(start(cid))
        await store.finish_case(finish(cid, judgments=[judgment(f"j-{cid}", cid, winner_slot=slot, outcome=outcome,
                                                                is_audit=audit)]), "A")
    got = await store.fold_inputs("t1")
    assert got is not None
    assert got.record == await store.get_trial("t1") and got.score_counts == await store.score_counts("t1")
    assert (got.decisive, got.first_slot_wins) == (3, 2)  # c1, c2, c6: no tie, failure or audit


async def test_claim_and_reserve_claims_reserves_and_dispatches_in_one_call(store: Store) -> None:
    """What a case does before its candidate call, as one store call: claimed, reserved (one
    conditional update against the cap) and dispatched; a reservation the cap refuses leaves
    the case claimed; a re-delivery is a duplicate; a case of an ended trial is counted."""
    await store.create_trial(trial("t1", cap_micros=1_500))
    assert await store.claim_and_reserve(start("c1"), 1_000, at=1.0) == ("claimed", True)
    assert await store.claim_and_reserve(start("c2"), 1_000, at=1.0) == ("claimed", False)  # 2000 > cap
    assert await store.claim_and_reserve(start("c1"), 1_000, at=1.0) == ("duplicate", False)
    cases = {c["id"]: (c["state"], c["reserved_micros"]) for c in await store.cases("t1")}
    assert cases == {"c1": ("dispatched", 1_000), "c2": ("claimed", 0)}
    record = await store.get_trial("t1")
    assert record is not None and record.reserved_micros == 1_000
    assert [(e.case_id, e.kind, e.micros) for e in await store.ledger("t1")] == [("c1", "reserve", 1_000)]
    assert await store.finish_case(finish("c1", charged=400), "A")
    assert (await store.reserve("t1", "c2", 1_000, kind="reserve", at=2.0)).applied  # room again: the long way
    await store.set_trial_status("t1", "stopped", "by hand", ended=True, now=3.0)
    assert await store.claim_and_reserve(start("c3"), 10, at=4.0) == ("not_running", False)
    snap = await store.snapshot("t1")
    assert snap is not None and snap.funnel == {"judged": 1, "shed_stopped": 1}


async def test_claim_and_reserve_is_one_write_transaction(store: Store, backend: Any) -> None:
    """Issue 29: the claim, the reservation and the dispatch mark commit as one transaction on
    either backend (PostgreSQL made them three): counted as SQLite's ``BEGIN IMMEDIATE`` and as
    the transaction ids PostgreSQL assigned in between."""
    await store.create_trial(trial("t1", cap_micros=1_500))
    if backend.kind == "sqlite":
        traced: list[str] = []
        run = store._run  # type: ignore[attr-defined]
        await run(lambda conn: conn.set_trace_callback(traced.append))
        assert await store.claim_and_reserve(start("c1"), 1_000, at=1.0) == ("claimed", True)
        await run(lambda conn: conn.set_trace_callback(None))
        assert traced.count("BEGIN IMMEDIATE") == 1
        return
    import asyncpg

    pg = await asyncpg.connect(backend.url)
    try:
        before = int(await pg.fetchval("SELECT pg_current_xact_id()::text"))
        assert await store.claim_and_reserve(start("c1"), 1_000, at=1.0) == ("claimed", True)
        after = int(await pg.fetchval("SELECT pg_current_xact_id()::text"))
    finally:
        await pg.close()
    assert after - before - 1 == 1  # the one transaction between the two probes' own


async def test_total_spend_with_and_without_teams(store: Store) -> None:
    assert await store.total_spend() == {"spent": 0, "known": 0, "reserved": 0, "unknown_calls": 0}
    for tid, team in (("t1", "a"), ("t2", "a"), ("t3", "b")):
        await store.create_trial(trial(tid, team=team))
        await store.claim_case(start(f"{tid}-done", trial_id=tid))
        await store.reserve(tid, f"{tid}-done", 500, kind="reserve", at=1.0)
        await store.finish_case(finish(f"{tid}-done", tid, charged=300, known_micros=200, unknown_calls=1), "A")
        await store.claim_case(start(f"{tid}-open", trial_id=tid))
        await store.reserve(tid, f"{tid}-open", 50, kind="reserve", at=2.0)
    assert await store.total_spend() == {"spent": 900, "known": 600, "reserved": 150, "unknown_calls": 3}
    assert await store.total_spend(teams=["a"]) == {"spent": 600, "known": 400, "reserved": 100, "unknown_calls": 2}
    assert await store.total_spend(teams=["zzz"]) == {"spent": 0, "known": 0, "reserved": 0, "unknown_calls": 0}
    assert await store.total_spend(teams=[]) == {"spent": 0, "known": 0, "reserved": 0, "unknown_calls": 0}
    assert all(type(v) is int for v in (await store.total_spend()).values())


async def test_ledger_is_per_trial_in_commit_order(store: Store) -> None:
    await store.create_trial(trial("t1"))
    await store.create_trial(trial("t2"))
    await store.claim_case(start("a", trial_id="t1"))
    await store.claim_case(start("b", trial_id="t2"))
    await store.reserve("t1", "a", 10, kind="reserve", at=1.0)
    await store.reserve("t2", "b", 20, kind="reserve", at=2.0)
    await store.finish_case(finish("a", "t1", charged=5), "A")
    t1 = await store.ledger("t1")
    assert [(e.trial_id, e.case_id, e.kind, e.micros, e.at) for e in t1] == [
        ("t1", "a", "reserve", 10, 1.0), ("t1", "a", "release", 10, 1003.0), ("t1", "a", "charge", 5, 1003.0)
    ]
    assert replay(t1, 1_000_000) == (5, 0)
    assert [e.micros for e in await store.ledger("t2")] == [20]
    assert await store.ledger("nope") == []


async def test_reopening_the_same_database_keeps_everything(store: Store) -> None:
    await store.create_trial(trial("t1"))
    kept = await store.save_states("t1", sequence=KeptState("s", 4, None), judge_health=KeptState("h", 3, None))
    await store.close()
    await store.open()
    assert await store.get_trial("t1") == kept
    assert kept is not None and kept == trial("t1", sequence_state="s", judge_health_state="h")
    # The counts the conditional update compares survive too.
    refused = await store.save_states("t1", sequence=KeptState("s3", 3, "s"))
    assert refused is not None and refused.sequence_state == "s"


async def test_resume_runs_only_a_paused_trial_and_hands_it_to_the_resumer(store: Store) -> None:
    await store.create_trial(trial("t1"))
    assert await store.resume_trial("t1", paused=("starter_unauthorized",), started_by="b") == (
        await store.get_trial("t1"), False)  # running: nothing to resume
    await store.set_trial_status("t1", "starter_unauthorized", "a was revoked", ended=False, now=5.0)
    after, changed = await store.resume_trial("t1", paused=("starter_unauthorized", "posture_changed"), started_by="b")
    assert changed and after is not None
    assert (after.status, after.status_reason, after.started_by, after.ended_at) == ("running", None, "b", None)
    await store.set_trial_status("t1", "stopped", "by operator", ended=True, now=6.0)
    stopped, changed = await store.resume_trial("t1", paused=("starter_unauthorized",), started_by="c")
    assert not changed and stopped is not None and (stopped.status, stopped.started_by) == ("stopped", "b")
    assert await store.resume_trial("nope", paused=("starter_unauthorized",), started_by="c") == (None, False)
