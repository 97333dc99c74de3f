"""What the API does with a running group (issue 13, items 3-4): its report, its attempts,
a linked retry, an arm's cancellation, and the refusal of promotion.

- ``GET /v1/comparisons/{id}`` adds ``run`` (:func:`sidecar.collector.corpus.runs.report`) once started.
- ``GET /v1/comparisons/{id}/attempts`` — every attempt with its scores, no content
  (what :mod:`policies.evidence` pairs on).
- ``POST /v1/comparisons/{id}/retry`` ``{"attempt_id": …}`` — an explicit linked retry of a
  ``failed`` or ``invocation_indeterminate`` attempt: a new attempt (number + 1,
  ``retry_of`` the original) that the runner then runs. Asking again returns the same retry
  (``200``); an attempt that cannot be retried is ``409 not_retryable``.
- ``POST /v1/comparisons/{id}/arms/{arm}/cancel`` — the arm takes no new invocation; its
  peers carry on.
- ``POST /v1/comparisons/{id}/promote`` — always ``409 promotion_refused`` with
  ``reason: corpus_evidence`` (:func:`policies.promotion.refusal`): corpus evidence never
  promotes, whatever client asks.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import msgspec

from policies.promotion import refusal
from policies.roles import Principal
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.datasets import require_write
from sidecar.collector.corpus.plan import load_plan
from sidecar.collector.corpus.runs import attempt_view, report
from sidecar.errors import Conflict, NotFound, PromotionRefused
from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.collector.store.corpus_run_records import AttemptRecord, attempt_id


class RetryIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    attempt_id: str


class RunService:
    def __init__(self, ctx: CorpusContext) -> None:
        self._ctx = ctx

    async def _group(self, principal: Principal, comparison_id: str) -> ComparisonRecord:
        record = await self._ctx.store.get_comparison(comparison_id)
        if record is None or not principal.sees(record.team):
            raise NotFound(f"no comparison {comparison_id!r}")
        return record

    async def report(self, record: ComparisonRecord) -> dict[str, Any] | None:
        store = self._ctx.store
        run = await store.get_run(record.id)
        if run is None:
            return None
        plan = await load_plan(store, record)
        return report(plan, run, await store.run_attempts(record.id), await store.run_scores(record.id))

    async def attempts(self, principal: Principal, comparison_id: str) -> dict[str, Any]:
        record = await self._group(principal, comparison_id)
        store = self._ctx.store
        scores: dict[str, list[Any]] = {}
        for s in await store.run_scores(record.id):
            scores.setdefault(s.attempt_id, []).append(s)
        return {"comparison_id": record.id, "evidence": "corpus",
                "attempts": [attempt_view(a, scores.get(a.id, [])) for a in await store.run_attempts(record.id)]}

    async def retry(self, principal: Principal, comparison_id: str, body: RetryIn) -> tuple[dict[str, Any], bool]:
        record = await self._group(principal, comparison_id)
        require_write(principal, record.team, "comparisons")
        now = self._ctx.clock()

        def new(original: AttemptRecord) -> AttemptRecord:
            n = original.attempt + 1
            return replace(original, id=attempt_id(original.comparison_id, original.arm, original.item_id,
                                                   original.revision_id, original.repetition, n),
                           attempt=n, retry_of=original.id, status="queued", owner=None, lease_until=None,
                           reserved_micros=0, created_at=now, finished_at=None, latency_ms=None, cost_micros=0,
                           cost_coverage="unknown", output=None, error=None)

        outcome, attempt = await self._ctx.store.queue_retry(body.attempt_id, new=new)
        if outcome == "missing" or attempt is None or attempt.comparison_id != record.id:
            raise NotFound(f"group {record.id!r} has no attempt {body.attempt_id!r}", field="$.attempt_id")
        if outcome in ("not_retryable", "superseded"):
            why = ("it is not failed or invocation_indeterminate" if outcome == "not_retryable"
                   else "a later attempt of its identity exists")
            raise Conflict(f"attempt {body.attempt_id!r} cannot be retried: {why}", field="$.attempt_id",
                           code="not_retryable")
        if self._ctx.on_change is not None:
            self._ctx.on_change()
        return attempt_view(attempt, []), outcome == "queued"

    async def cancel_arm(self, principal: Principal, comparison_id: str, arm: str) -> dict[str, Any]:
        record = await self._group(principal, comparison_id)
        require_write(principal, record.team, "comparisons")
        arms = [a["name"] for a in msgspec.json.decode(record.spec)["arms"]]
        if arm not in arms:
            raise NotFound(f"group {record.id!r} has no arm {arm!r}", field="arm")
        if not await self._ctx.store.cancel_arm(record.id, arm):
            await self._ctx.store.begin_run(record.id, cap_micros=_cap(record), now=self._ctx.clock())
            await self._ctx.store.cancel_arm(record.id, arm)
        return {"comparison_id": record.id, "arm": arm, "cancelled": True}

    async def promote(self, principal: Principal, comparison_id: str) -> None:
        record = await self._group(principal, comparison_id)
        reason = refusal(evidence="corpus", status=record.status, verdict="inconclusive")
        assert reason is not None  # corpus evidence is always refused
        raise PromotionRefused("a comparison group is corpus evidence, which never promotes: only traffic evidence "
                               "(a trial or a replay trial) may; run a trial of the candidate on live traffic",
                               reason=reason)


def _cap(record: ComparisonRecord) -> int:
    return int(msgspec.json.decode(record.readiness).get("spend", {}).get("cap_micros") or 0)
