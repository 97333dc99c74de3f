"""The ``trial_state`` publisher over a real store: a state per change, none when nothing moved,
revisions that only grow, and nothing of a trial's free text."""

from __future__ import annotations

import json
from pathlib import Path

from sidecar.store.sqlite import SQLiteStore
from sidecar.export.trial_states import UNCHANGED_EVERY, StatePublisher
from tests.store.factories import effect, finish, start, trial


async def _states(store: SQLiteStore) -> list[dict[str, object]]:
    return [json.loads(r.body) for r in await store.outbox() if r.topic == "trial_state"]


async def test_a_state_per_change_and_none_while_nothing_moves(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    await store.open()
    try:
        await store.create_trial(trial("t1", cap_micros=10_000))
        publisher = StatePublisher(store, clock=lambda: 1000.0)
        assert await publisher.publish() == 1
        assert await publisher.publish() == 0, "nothing moved: nothing written (the first fold's own save included)"
        await store.claim_case(start("c0"))
        await store.reserve("t1", "c0", 100, kind="reserve", at=1.0)
        assert await store.finish_case(finish("c0", charged=50, effects=(effect("r0"),)), "A")
        assert await publisher.publish() == 1
        # Outcomes counted before a case leave the row alone: the next read of it comes later.
        await store.count_outcomes({("t1", "not_sampled"): 3})
        quiet = [await publisher.publish() for _ in range(UNCHANGED_EVERY - 1)]
        assert quiet == [0] * (UNCHANGED_EVERY - 1) and await publisher.publish() == 1
        await store.set_trial_status("t1", "stopped", "stopped by alice@example.com", ended=True, now=5.0)
        assert await publisher.publish() == 1
        assert await publisher.publish() == 0
        states = await _states(store)
        assert [s["status"] for s in states] == ["running", "running", "running", "stopped"]
        revisions = [s["revision"] for s in states]
        assert revisions == sorted(revisions) and len(set(revisions)) == 4
        assert states[1]["funnel"] == {"judged": 1} and states[2]["funnel"] == {"judged": 1, "not_sampled": 3}
        assert states[3]["verdict"] == "Inconclusive"
        assert all("alice" not in json.dumps(s) for s in states), "the status reason is not sent"
        # A new process publishes the current state once; the outbox keeps the first copy of an id.
        again = StatePublisher(store, clock=lambda: 2000.0)
        assert await again.publish() == 1
        assert len(await _states(store)) == 4
    finally:
        await store.close()


async def test_a_paused_trial_reads_paused_and_a_decided_one_its_verdict(tmp_path: Path) -> None:
    """Issue 26 item 4: a paused trial is never worded "Inconclusive" on the uplink either, and a
    trial ended ``decided`` reads the verdict it was decided on."""
    store = SQLiteStore(str(tmp_path / "s.db"))
    await store.open()
    try:
        for tid in ("paused-a", "paused-b", "lost"):
            await store.create_trial(trial(tid, cap_micros=1_000_000))
        for i in range(120):  # the candidate loses every case: decided Rejected
            await store.claim_case(start(f"c{i}", "lost"))
            await store.reserve("lost", f"c{i}", 1, kind="reserve", at=1.0)
            assert await store.finish_case(finish(f"c{i}", "lost", charged=1, score=-1.0), "A")
        await store.set_trial_status("paused-a", "posture_changed", "posture", ended=False, now=5.0)
        await store.set_trial_status("paused-b", "starter_unauthorized", "starter", ended=False, now=5.0)
        await store.set_trial_status("lost", "decided", "decided: regression", ended=True, now=5.0)
        await StatePublisher(store, clock=lambda: 1000.0).publish()
        latest = {s["trial_id"]: s for s in await _states(store)}
        assert latest["paused-a"]["verdict"] == "Paused" and latest["paused-b"]["verdict"] == "Paused"
        assert (latest["lost"]["status"], latest["lost"]["decision"], latest["lost"]["verdict"]) == (
            "decided", "regression", "Rejected")
    finally:
        await store.close()
