"""Folding a trial's evidence into the states kept with it (sidecar/trials/fold.py), on a real SQLite store.

Counts below are chosen with the policies: ``DECIDED`` reaches
``not_worse`` (Adoptable, issue 23) on its own; with one more loss (``ONE_MORE_LOSS``) the
current interval alone reaches below 0.45 (-tolerance) again, so a read that evaluated from
scratch would say ``inconclusive``.

These trials keep an empirical-Bernstein state from before the betting sequence (issue 31), so
they go on deciding on it from score counts: the compare-and-set machinery is the same for both.
The betting fold, which reads the stored cases in scoring order, is tested in
test_betting_fold.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from policies.verdict import evaluate
from sidecar.trials.fold import _text, fold_trial
from sidecar.store.records import KeptState, TrialRecord
from sidecar.store.sqlite import SQLiteStore
from tests.store.factories import judgment, trial

DECIDED = {1.0: 44, 0.0: 11, -1.0: 15}
ONE_MORE_LOSS = {1.0: 44, 0.0: 11, -1.0: 16}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(str(tmp_path / "fold.db"))
    await s.open()
    yield s
    await s.close()


async def _record(store: SQLiteStore, *, legacy: bool = True, **kw: object) -> TrialRecord:
    """The trial, keeping an (empty) empirical-Bernstein state as a trial from before issue 31 does."""
    record = trial("t1", expected_cases=1000, min_cases=20, delta=0.05, **kw)
    await store.create_trial(record)
    if not legacy:
        return record
    empty = evaluate({}, identity="x", expected_cases=1000, delta=0.05, min_cases=20).sequence_state
    await store.save_states("t1", sequence=KeptState(_text(empty.to_dict()), 0, None))
    kept = await store.get_trial("t1")
    assert kept is not None
    return kept


def test_the_counts_are_what_the_tests_need() -> None:
    assert evaluate(DECIDED, identity="x").verdict == "not_worse"
    fresh = evaluate(ONE_MORE_LOSS, identity="x")
    assert fresh.verdict == "inconclusive" and fresh.sequence.lower < 0.45


async def test_a_decision_stands_after_one_more_loss_and_is_kept(store: SQLiteStore) -> None:
    record = await _record(store)
    first = await fold_trial(store, record, DECIDED)
    assert first.kept and first.evaluation.verdict == "not_worse"
    stored = await store.get_trial("t1")
    assert stored is not None and stored.sequence_state is not None
    state = json.loads(stored.sequence_state)
    assert (state["n"], state["decision"], state["decided_at"]) == (70, "not_worse", 70)

    second = await fold_trial(store, stored, ONE_MORE_LOSS)
    ev = second.evaluation
    assert ev.verdict == "not_worse" and not ev.contradicted
    assert ev.sequence_now.lower < 0.45 < ev.sequence.lower, \
        "the current interval reaches below -tolerance, the kept one does not"
    stored = await store.get_trial("t1")
    assert stored is not None and stored.sequence_state is not None
    assert json.loads(stored.sequence_state)["n"] == 71


async def test_a_reader_that_read_before_another_save_keeps_the_others_decision(store: SQLiteStore) -> None:
    """The race "larger n wins" alone would lose: two readers start from the same
    (empty) state; the one with fewer cases decides and saves first; the one with
    more cases would, on its own, save an undecided state over it."""
    record = await _record(store)
    decided = await fold_trial(store, record, DECIDED)
    assert decided.evaluation.verdict == "not_worse"
    late = await fold_trial(store, record, ONE_MORE_LOSS)  # ``record`` is stale: it has the empty state
    assert late.kept and late.evaluation.verdict == "not_worse"
    stored = await store.get_trial("t1")
    assert stored is not None and stored.sequence_state is not None
    state = json.loads(stored.sequence_state)
    assert (state["n"], state["decision"], state["decided_at"]) == (71, "not_worse", 70)


async def test_a_stale_look_with_fewer_cases_changes_no_decision(store: SQLiteStore) -> None:
    record = await _record(store)
    await fold_trial(store, record, DECIDED)
    stored = await store.get_trial("t1")
    assert stored is not None
    stale = await fold_trial(store, stored, {1.0: 20, 0.0: 5, -1.0: 10})
    assert stale.evaluation.verdict == "not_worse"
    after = await store.get_trial("t1")
    assert after is not None and after.sequence_state is not None and json.loads(after.sequence_state)["n"] == 70


async def test_contradicting_evidence_restarts_the_kept_interval_and_withdraws_the_decision(store: SQLiteStore) -> None:
    record = await _record(store)
    await fold_trial(store, record, {1.0: 60})
    stored = await store.get_trial("t1")
    assert stored is not None
    assert json.loads(stored.sequence_state or "{}")["decision"] == "candidate_better"  # 60 straight wins: above 0.55
    reversed_ = await fold_trial(store, stored, {1.0: 60, -1.0: 600})
    ev = reversed_.evaluation
    assert ev.contradicted and ev.note is not None and "contradicts" in ev.note
    assert ev.sequence == ev.sequence_now, "restarted from this look alone"
    assert ev.verdict == "regression", "the new epoch decides on its own evidence"
    after = await store.get_trial("t1")
    assert after is not None
    state = json.loads(after.sequence_state or "{}")
    assert (state["restarts"], state["decision"], state["decided_at"]) == (1, "regression", 660)


async def test_a_judge_health_flag_stands_on_a_later_read_with_fewer_judgments(store: SQLiteStore) -> None:
    record = await _record(store)
    # Slot A (shown first) wins 90 of 100 decisive primary judgments: a biased judge.
    rows = [
        judgment(f"j{i}", f"c{i}", order="candidate_first" if i % 2 else "incumbent_first",
                 winner_slot="A" if i < 90 else "B")
        for i in range(100)
    ]
    flagged = await fold_trial(store, record, DECIDED, rows)
    assert flagged.health is not None and flagged.health.flagged
    stored = await store.get_trial("t1")
    assert stored is not None and stored.judge_health_state is not None
    assert json.loads(stored.judge_health_state)["decisive"] == 100
    # A stale read (a replica behind) sees half the judgments, evenly split: the flag stands.
    few = [replace(r, winner_slot="A" if i % 2 else "B") for i, r in enumerate(rows[:40])]
    again = await fold_trial(store, stored, DECIDED, few)
    assert again.health is not None and again.health.flagged and again.health.flagged_at == flagged.health.flagged_at


async def test_an_idle_trial_reads_the_same_and_keeps_the_same_text(store: SQLiteStore) -> None:
    record = await _record(store)
    await fold_trial(store, record, DECIDED, [judgment("j1", "c1")])
    first = await store.get_trial("t1")
    assert first is not None
    again = await fold_trial(store, first, DECIDED, [judgment("j1", "c1")])
    assert again.kept and again.evaluation.verdict == "not_worse"
    assert await store.get_trial("t1") == first


async def test_an_unusable_kept_state_is_replaced_not_fatal(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    record = await _record(store)
    other_settings = json.dumps({"n": 5, "lower": 0.1, "upper": 0.9, "decision": "inconclusive", "decided_at": None,
                                 "restarts": 0, "alpha": 0.05, "expected_cases": 7, "tolerance": 0.05})
    await store.save_states("t1", sequence=KeptState(other_settings, 5, None),
                            judge_health=KeptState("not json", 0, None))
    stored = await store.get_trial("t1")
    assert stored is not None
    with caplog.at_level(logging.WARNING, logger="shadowtrial.fold"):
        folded = await fold_trial(store, stored, DECIDED, [judgment("j1", "c1")])
    assert folded.kept and folded.evaluation.verdict == "not_worse"
    assert "cannot be folded" in caplog.text
    after = await store.get_trial("t1")
    assert after is not None
    assert json.loads(after.sequence_state or "{}")["expected_cases"] == 1000
    assert json.loads(after.judge_health_state or "{}")["decisive"] == 1


async def test_a_fold_refused_for_its_smaller_count_gives_up_at_once(
    store: SQLiteStore, caplog: pytest.LogCaptureFixture
) -> None:
    """An unusable state that was kept over more cases than this look cannot be
    replaced by it (the store never lowers a count); the read still answers (a state that is not
    even JSON is replaced by a fresh betting fold, which has no stored case here)."""
    await _record(store, legacy=False)
    await store.save_states("t1", sequence=KeptState("not json", 1000, None))
    stored = await store.get_trial("t1")
    assert stored is not None
    with caplog.at_level(logging.WARNING, logger="shadowtrial.fold"):
        folded = await fold_trial(store, stored, DECIDED)
    assert not folded.kept and folded.evaluation.verdict == "inconclusive"
    assert "larger count" in caplog.text
    assert (await store.get_trial("t1")) == stored


async def test_the_engines_fold_from_store_counts_keeps_the_judge_health_the_judgments_give(
    store: SQLiteStore,
) -> None:
    """The engine folds from :meth:`fold_inputs` (the store counts decisive primary judgments and
    slot A's wins) instead of reading every judgment: the judge-health state it keeps is the one a
    fold of the judgments themselves keeps — audits, ties and failures left out alike."""
    from tests.store.factories import finish, start

    texts = []
    for tid in ("t1", "t2"):
        await store.create_trial(trial(tid, expected_cases=1000, min_cases=20, delta=0.05))
        for i in range(120):
            cid = f"{tid}-c{i}"
            assert await store.claim_case(start(cid, trial_id=tid)) == "claimed"
            rows = [judgment(f"{cid}-p", cid, trial_id=tid, order="candidate_first" if i % 2 else "incumbent_first",
                             winner_slot=("A" if i < 85 else "B") if i % 10 else None,  # every tenth a tie
                             outcome="error" if i % 17 == 0 else "verdict")]
            if i % 5 == 0:  # audited: the swap's winner must not count
                rows.append(judgment(f"{cid}-a", cid, trial_id=tid, is_audit=True, winner_slot="A"))
            assert await store.finish_case(finish(cid, trial_id=tid, judgments=rows), "A")
    got = await store.fold_inputs("t1")
    assert got is not None
    decisive = [i for i in range(120) if i % 10 and i % 17]
    assert (got.decisive, got.first_slot_wins) == (len(decisive), sum(1 for i in decisive if i < 85))
    counted = await fold_trial(store, got.record, got.score_counts, first_slot=(got.decisive, got.first_slot_wins))
    assert counted.health is None
    snap = await store.snapshot("t2")
    assert snap is not None
    read = await fold_trial(store, snap.record, snap.score_counts, snap.judgments)
    assert read.health is not None and read.health.flagged  # the rows make a biased judge: the state says so
    for tid in ("t1", "t2"):
        kept = await store.get_trial(tid)
        assert kept is not None and kept.judge_health_state is not None
        texts.append(kept.judge_health_state)
    assert texts[0] == texts[1]
