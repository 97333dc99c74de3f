"""Comparing evidence across runs over HTTP (issue 13 item 5): two arms of comparison groups,
each read from the store as :mod:`policies.evidence` takes them.

``GET /v1/evaluations/evidence?baseline=GROUP:ARM&candidate=GROUP:ARM`` — the two runs (an
arm of a group is a run; the two may be arms of one group or of two, over two dataset
versions). Each side is the latest attempt of every (item, revision, repetition) that has a
final status (``completed``, ``failed``, ``invocation_indeterminate``), with its per-answer
scores (graders, the absolute judge, latency, cost). Paired-judge scores are left out: each
is relative to its own group's baseline arm, so it means nothing across runs. Pairing,
denominators, spend, latency and the bootstrap are :func:`policies.evidence.compare_evidence`'s;
this module only reads and words. Corpus evidence: nothing here reads "Adoptable".
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from policies.evidence import Attempt, EvidenceComparison, MetricScore, Side, Status, compare_evidence
from policies.graders import Direction
from policies.money import Coverage, Cost
from policies.roles import Principal
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.plan import load_plan
from sidecar.errors import BadRequest, NotFound
from sidecar.collector.store.corpus_run_records import FINAL, AttemptRecord, ScoreRecord

#: The score statuses that carry a grade, and the one that says the metric does not apply.
_NOT_APPLICABLE = "not_applicable"
_PER_ANSWER = ("grader", "absolute_judge", "latency", "cost")


def _ref(value: str | None, field: str) -> tuple[str, str]:
    group, sep, arm = (value or "").partition(":")
    if not sep or not group or not arm:
        raise BadRequest(f"{field} must be GROUP_ID:ARM, e.g. cg_0123:next", field=field)
    return group, arm


def _score(s: ScoreRecord) -> MetricScore | None:
    if s.kind not in _PER_ANSWER or s.direction not in ("higher", "lower", "categorical"):
        return None
    direction = cast(Direction, s.direction)
    if s.status == _NOT_APPLICABLE:
        return MetricScore(s.metric, s.version, direction, None, not_applicable=True)
    value: float | str | None = s.category if direction == "categorical" else s.value
    return MetricScore(s.metric, s.version, direction, value)


def _attempt(a: AttemptRecord, scores: list[ScoreRecord]) -> Attempt:
    coverage = cast(Coverage, a.cost_coverage if a.cost_coverage in ("complete", "partial", "unknown") else "unknown")
    cost = Cost(0 if coverage == "unknown" else a.cost_micros, coverage)
    graded = tuple(m for m in (_score(s) for s in scores) if m is not None) if a.status == "completed" else ()
    return Attempt(a.comparison_id, a.arm, a.item_id, a.revision_id, a.repetition, cast(Status, a.status),
                   a.latency_ms, cost, graded)


class EvidenceService:
    def __init__(self, ctx: CorpusContext) -> None:
        self._ctx = ctx

    async def _side(self, principal: Principal, ref: tuple[str, str], field: str) -> Side:
        group_id, arm = ref
        store = self._ctx.store
        record = await store.get_comparison(group_id)
        if record is None or not principal.sees(record.team):
            raise NotFound(f"no comparison {group_id!r}", field=field)
        plan = await load_plan(store, record)
        if arm not in {a.name for a in plan.arms}:
            raise NotFound(f"comparison {group_id!r} has no arm {arm!r}", field=field)
        latest: dict[tuple[str, str, int], AttemptRecord] = {}
        for a in await store.run_attempts(group_id):
            key = (a.item_id, a.revision_id, a.repetition)
            if a.arm == arm and a.status in FINAL and (key not in latest or a.attempt > latest[key].attempt):
                latest[key] = a
        scores: dict[str, list[ScoreRecord]] = {}
        for s in await store.run_scores(group_id):
            scores.setdefault(s.attempt_id, []).append(s)
        attempts = tuple(_attempt(a, scores.get(a.id, [])) for a in latest.values())
        run = await store.get_run(group_id)
        return Side(f"{group_id}:{arm}", plan.planned_per_arm, attempts,
                    complete=run is not None and run.ended_at is not None)

    async def compare(self, principal: Principal, baseline: str | None, candidate: str | None) -> dict[str, Any]:
        base = await self._side(principal, _ref(baseline, "baseline"), "baseline")
        cand = await self._side(principal, _ref(candidate, "candidate"), "candidate")
        if base.run_id == cand.run_id:
            raise BadRequest("baseline and candidate are the same run", field="candidate")
        return view(compare_evidence(base, cand))


def view(ev: EvidenceComparison) -> dict[str, Any]:
    """The comparison as JSON: every figure as computed, plus the ratios' values."""

    def plain(obj: Any) -> Any:
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            out = {f.name: plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
            if {"numerator", "denominator"} <= out.keys():
                out["value"] = getattr(obj, "value")
            return out
        if isinstance(obj, (list, tuple)):
            return [plain(x) for x in obj]
        if isinstance(obj, dict):
            return {k: plain(v) for k, v in obj.items()}
        return obj

    body: dict[str, Any] = plain(ev)
    body["evidence"] = "corpus"
    return body
