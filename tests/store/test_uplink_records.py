"""What the store writes for the uplink itself, on SQLite and PostgreSQL: the ``case_result``
of each case recovery finishes (in the same transaction), records enqueued directly, and the
trial row's ``state_revision`` that orders ``trial_state`` records."""

from __future__ import annotations

import json

from sidecar.store import Store
from tests.store.conftest import Backend, OpenStore, backend, store, stores  # noqa: F401  (fixtures)
from tests.store.factories import effect, finish, start, trial
from sidecar.store.records import OutboxRecord
from sidecar.store.records import LedgerKind
from uplink.schema import CaseResult, decode_batch, encode_batch


async def _in_flight(store: Store) -> None:
    """Three cases of owner A: one claimed, one reserved, one dispatched."""
    await store.create_trial(trial("t1", cap_micros=10_000, gateway="gw-1"))
    await store.heartbeat("A", now=100.0, lease_s=10.0)
    kind: LedgerKind = "reserve"
    for i in range(3):
        await store.claim_case(start(f"c{i}", exchange_id=f"x{i}"))
    await store.reserve("t1", "c1", 500, kind=kind, at=101.0)
    await store.reserve("t1", "c2", 700, kind=kind, at=101.0)
    assert await store.mark_dispatched("c2", "A")


def _results(records: list[OutboxRecord]) -> dict[str, CaseResult]:
    _, decoded = decode_batch(encode_batch("s", 0.0, [r.body.encode() for r in records]))
    return {r.case_id: r for r in decoded if isinstance(r, CaseResult)}


async def test_recovery_with_report_writes_each_cases_result_with_its_outcome(store: Store) -> None:
    await _in_flight(store)
    recovered = await store.recover_expired(200.0, report=True)
    assert sorted(recovered) == ["c0", "c1", "c2"]
    results = _results(await store.outbox())
    assert sorted(results) == ["c0", "c1", "c2"]
    for case_id, r in results.items():
        assert r.id == f"case:{case_id}" and r.outcome == "indeterminate" and r.trial_id == "t1"
        assert r.exchange_id == f"x{case_id[1:]}" and r.team == trial().team and r.gateway == "gw-1"
        assert r.judge_version_id == trial().judge_version_id and r.finished_at == 200.0
    # The dispatched case may have been billed: unknown, its reservation held; the others called nothing.
    assert results["c2"].candidate_cost.coverage == "unknown" and results["c2"].candidate_cost.micros is None
    assert results["c2"].charged_micros == 700
    assert results["c1"].candidate_cost.coverage == "complete" and results["c1"].candidate_cost.micros == 0
    assert results["c1"].charged_micros == 0
    assert results["c0"].incumbent_cost.micros == 300 and results["c0"].incumbent_latency_ms == 120.0
    assert all("error" not in json.loads(r.body) for r in await store.outbox())  # its free text stays home


async def test_retire_with_report_writes_the_results_and_without_report_writes_none(store: Store) -> None:
    await _in_flight(store)
    assert sorted(await store.retire("A", 150.0, report=True)) == ["c0", "c1", "c2"]
    assert sorted(_results(await store.outbox())) == ["c0", "c1", "c2"]
    await store.create_trial(trial("t2"))
    await store.heartbeat("B", now=100.0, lease_s=10.0)
    await store.claim_case(start("d0", trial_id="t2", owner="B"))
    assert await store.recover_expired(500.0) == ["d0"]
    assert "d0" not in _results(await store.outbox()), "no report asked, none written"


async def test_enqueue_keeps_the_first_copy_of_an_id(store: Store) -> None:
    await store.enqueue_outbox([OutboxRecord("s1", "trial_state", '{"a": 1}')], now=1.0)
    await store.enqueue_outbox([OutboxRecord("s1", "trial_state", '{"a": 2}'),
                                OutboxRecord("s2", "trial_state", '{"b": 1}')], now=2.0)
    assert [(r.record_id, r.body) for r in await store.outbox()] == [("s1", '{"a": 1}'), ("s2", '{"b": 1}')]
    assert await store.outbox_depth() == 2


async def test_state_revision_grows_with_every_change_of_the_trial_row(store: Store) -> None:
    created = await store.create_trial(trial("t1", cap_micros=10_000))
    seen = [created.state_revision]

    async def now() -> int:
        record = await store.get_trial("t1")
        assert record is not None
        return record.state_revision

    await store.claim_case(start("c0"))
    await store.reserve("t1", "c0", 100, kind="reserve", at=1.0)
    seen.append(await now())
    assert await store.finish_case(finish("c0", charged=50, effects=(effect("r0"),)), "A")
    seen.append(await now())
    await store.set_trial_status("t1", "stopped", "by hand", ended=True, now=5.0)
    seen.append(await now())
    unchanged = await now()
    assert unchanged == seen[-1], "a read changes nothing"
    assert seen == sorted(seen) and len(set(seen)) == len(seen), seen
