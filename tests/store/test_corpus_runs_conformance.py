"""The running-groups part of the store contract (:class:`sidecar.collector.store.base.CorpusRunStore`),
on every backend (``-k sqlite`` / ``-k postgres``): the group's cap is never passed, a claim
is taken once, an expired claim becomes ``invocation_indeterminate`` with its worst case held,
a linked retry is queued once."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from sidecar.collector.store import ControlPlaneStore
from sidecar.collector.store.corpus_records import ComparisonRecord, DatasetRecord, DatasetVersion, SuiteRecord
from sidecar.collector.store.corpus_run_records import AttemptRecord, ScoreRecord, attempt_id
from tests.store.conftest import OpenStore

pytestmark = pytest.mark.collector_store


async def group(store: ControlPlaneStore, cid: str = "cg1", cap: int = 1000) -> None:
    await store.create_dataset(DatasetRecord("ds1", "a", "d", 1, 1.0, None),
                               DatasetVersion("ds1", 1, "import", None, 0, "d", 1.0, None), [])
    await store.save_suite(SuiteRecord("su1", "a", "s", 0, "ds1", 1, None, None, "[]", "d", 1.0, None))
    await store.create_comparison(ComparisonRecord(cid, "a", "su1", "{}", "{}", "tok", 4, "admitted", 1.0, None),
                                  request_key=f"key-{cid}", body_hash="h")
    run = await store.begin_run(cid, cap_micros=cap, now=2.0)
    assert run is not None and run.cap_micros == cap


def attempt(n: int, reserve: int, *, rep: int = 1, number: int = 1, lease: float = 100.0, owner: str = "me",
            status: str = "claimed") -> AttemptRecord:
    return AttemptRecord(attempt_id("cg1", "arm", f"i{n}", f"r{n}", rep, number), "cg1", "arm", f"i{n}", f"r{n}", rep,
                         number, None, status, owner, lease, reserve, 3.0)


async def test_claims_reserve_against_the_cap_and_settle_no_more_than_reserved(store: ControlPlaneStore) -> None:
    await group(store)
    assert (await store.get_comparison("cg1")).status == "running"  # type: ignore[union-attr]
    assert await store.begin_run("missing", cap_micros=1, now=1.0) is None
    assert await store.claim_attempt(attempt(1, 600)) == "claimed"
    assert await store.claim_attempt(attempt(1, 600)) == "exists", "an identity is claimed once"
    assert await store.claim_attempt(attempt(2, 500)) == "cap", "600 + 500 > 1000: nothing written"
    assert len(await store.run_attempts("cg1")) == 1
    assert not await store.top_up("cg1", attempt(1, 0).id, 401)
    assert await store.top_up("cg1", attempt(1, 0).id, 400)
    done = dataclasses.replace(attempt(1, 0), status="completed", finished_at=4.0, latency_ms=12.0, cost_micros=5000,
                               cost_coverage="complete", output="x")
    score = ScoreRecord(done.id, "cg1", "exact", "grader", "v1", "higher", "scored", value=1.0)
    assert await store.finish_attempt(done, charge_micros=5000, scores=[score])
    assert not await store.finish_attempt(done, charge_micros=1, scores=[]), "finished once"
    run = await store.get_run("cg1")
    assert run is not None and (run.spent_micros, run.reserved_micros) == (1000, 0), "charged at most the reservation"
    assert await store.run_scores("cg1") == [score]
    assert (await store.run_attempts("cg1"))[0].status == "completed"


async def test_concurrent_claims_never_pass_the_cap(stores: OpenStore) -> None:
    first = await stores()
    await group(first, cap=1000)
    second = await stores()
    results = await asyncio.gather(*(s.claim_attempt(attempt(n, 300)) for n, s in
                                     enumerate([first, second] * 5)))
    assert results.count("claimed") == 3 and results.count("cap") == 7
    run = await first.get_run("cg1")
    assert run is not None and run.reserved_micros == 900 <= run.cap_micros


async def test_expired_claims_become_indeterminate_with_their_worst_case_held(store: ControlPlaneStore) -> None:
    await group(store)
    assert await store.claim_attempt(attempt(1, 200, lease=10.0)) == "claimed"
    assert await store.claim_attempt(attempt(2, 300, lease=50.0, owner="other")) == "claimed"
    pending = ScoreRecord(attempt(1, 0).id, "cg1", "pref", "paired_judge", "jv", "higher", "pending",
                          paired_with="x", owner="me", lease_until=10.0, reserved_micros=100)
    assert await store.claim_judgment(pending) == "claimed"
    assert await store.claim_judgment(pending) == "exists"
    await store.refresh_claims("me", lease_until=40.0)
    assert await store.expire_claims(now=45.0) == 2
    attempts = {a.item_id: a for a in await store.run_attempts("cg1")}
    assert attempts["i1"].status == "invocation_indeterminate" and attempts["i1"].cost_coverage == "unknown"
    assert attempts["i1"].owner == "me", "an indeterminate claim names whose process held it"
    assert attempts["i2"].status == "claimed"
    assert (await store.run_scores("cg1"))[0].status == "invocation_indeterminate"
    run = await store.get_run("cg1")
    assert run is not None and (run.spent_micros, run.reserved_micros) == (300, 300)
    late = dataclasses.replace(attempt(1, 0), status="completed")
    assert not await store.finish_attempt(late, charge_micros=0, scores=[]), "a retired claim stays retired"


async def test_items_are_leased_to_one_runner_at_a_time_until_the_lease_ends(stores: OpenStore) -> None:
    first = await stores()
    await group(first)
    second = await stores()
    granted = await asyncio.gather(first.lease_items("cg1", [0, 1, 2], owner="a", now=1.0, lease_until=10.0),
                                   second.lease_items("cg1", [1, 2, 3], owner="b", now=1.0, lease_until=10.0))
    assert sorted(granted[0] + granted[1]) == [0, 1, 2, 3], "each item to one runner"
    assert await first.lease_items("cg1", granted[0], owner="a", now=2.0, lease_until=10.0) == granted[0], \
        "a runner's own lease is its own"
    await first.release_items("cg1", granted[0], owner="a")
    assert await second.lease_items("cg1", [0, 1, 2, 3], owner="b", now=2.0, lease_until=10.0) == [0, 1, 2, 3]
    assert await first.lease_items("cg1", [3], owner="a", now=5.0, lease_until=20.0) == []
    await second.refresh_claims("b", lease_until=30.0)
    assert await first.lease_items("cg1", [3], owner="a", now=25.0, lease_until=40.0) == [], "refreshed"
    assert await first.lease_items("cg1", [3], owner="a", now=31.0, lease_until=40.0) == [3], "its lease ended"


async def test_a_run_that_cannot_go_on_fails_with_its_named_error(store: ControlPlaneStore) -> None:
    await group(store)
    assert await store.fail_run("cg1", error="model_unavailable: arm 'b'", now=5.0)
    assert not await store.fail_run("cg1", error="again", now=6.0), "only a runnable group fails"
    assert (await store.get_comparison("cg1")).status == "failed"  # type: ignore[union-attr]
    run = await store.get_run("cg1")
    assert run is not None and (run.error, run.ended_at) == ("model_unavailable: arm 'b'", 5.0)
    assert "cg1" not in {c.id for c in await store.runnable_comparisons()}


async def test_a_linked_retry_is_queued_once_and_claimed_like_a_new_attempt(store: ControlPlaneStore) -> None:
    await group(store)
    assert await store.claim_attempt(attempt(1, 100, lease=1.0)) == "claimed"
    original = attempt(1, 0).id

    def new(a: AttemptRecord) -> AttemptRecord:
        return dataclasses.replace(a, id=attempt(1, 0, number=2).id, attempt=2, retry_of=a.id, status="queued",
                                   owner=None, lease_until=None, reserved_micros=0)

    assert (await store.queue_retry(original, new=new))[0] == "not_retryable", "still claimed"
    await store.expire_claims(now=5.0)
    outcome, retry = await store.queue_retry(original, new=new)
    assert outcome == "queued" and retry is not None and retry.retry_of == original
    again, same = await store.queue_retry(original, new=new)
    assert again == "existing" and same == retry
    assert (await store.queue_retry("nope", new=new))[0] == "missing"
    assert await store.claim_attempt(attempt(1, 50, number=2)) == "claimed"
    assert await store.cancel_arm("cg1", "arm") and not await store.cancel_arm("zz", "arm")
    run = await store.get_run("cg1")
    assert run is not None and run.cancelled_arms == '["arm"]'
    assert await store.set_comparison_status("cg1", "completed", allowed_from=("running",), now=9.0, final=True)
    assert not await store.set_comparison_status("cg1", "completed", allowed_from=("running",), now=9.0, final=True)
    assert [c.id for c in await store.runnable_comparisons()] == []
