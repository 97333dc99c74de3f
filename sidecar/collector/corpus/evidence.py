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

**What may be compared** (issue 24, item 10). Each side must be a completed experiment: its
group ``completed`` (not admitted, running or ``cap_reached``), the arm not cancelled, and the
group not archived. The two sides must belong to one team and run on one dataset (its versions
may differ; revised items then stay unmatched). Anything else is ``422 comparison_invalid``
naming the side at fault and why; another team's group the caller cannot read is ``404``, as a
missing one. Revision ids are qualified by their dataset (``DATASET/REVISION``), so content
hashes of two datasets never pair.

**Full-run spend** (item 11) is each side's generation (every attempt, superseded ones too)
plus every judge call on its attempts, as the group counts it: the two arms of a two-arm group
add up to the group's own spend.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any, Sequence, cast

from policies.graders import Direction
from policies.money import Coverage, Cost
from policies.roles import Principal
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.errors import ComparisonInvalid
from sidecar.collector.corpus.plan import GroupPlan, load_plan
from sidecar.errors import BadRequest, NotFound
from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.collector.store.corpus_run_records import FINAL, AttemptRecord, ScoreRecord

# policies.evidence (its bootstrap on numpy) is imported where evidence is compared, not when the
# collector starts.
if TYPE_CHECKING:
    from policies.evidence import Attempt, EvidenceComparison, MetricScore, Side, Status

#: The score statuses that carry a grade, and the one that says the metric does not apply.
_NOT_APPLICABLE = "not_applicable"
_PER_ANSWER = ("grader", "absolute_judge", "latency", "cost")
_INVALID = "The evaluation comparison is invalid: "


def _ref(value: str | None, field: str) -> tuple[str, str]:
    group, sep, arm = (value or "").partition(":")
    if not sep or not group or not arm:
        raise BadRequest(f"{field} must be GROUP_ID:ARM, e.g. cg_0123:next", field=field)
    return group, arm


def _score(s: ScoreRecord) -> MetricScore | None:
    from policies.evidence import MetricScore

    if s.kind not in _PER_ANSWER or s.direction not in ("higher", "lower", "categorical"):
        return None
    direction = cast(Direction, s.direction)
    if s.status == _NOT_APPLICABLE:
        return MetricScore(s.metric, s.version, direction, None, not_applicable=True)
    value: float | str | None = s.category if direction == "categorical" else s.value
    return MetricScore(s.metric, s.version, direction, value)


def _attempt(a: AttemptRecord, scores: list[ScoreRecord]) -> Attempt:
    from policies.evidence import Attempt

    cost = _cost(a.cost_coverage, a.cost_micros)
    graded = tuple(m for m in (_score(s) for s in scores) if m is not None) if a.status == "completed" else ()
    return Attempt(a.comparison_id, a.arm, a.item_id, a.revision_id, a.repetition, cast("Status", a.status),
                   a.latency_ms, cost, graded)


#: Score kinds whose rows carry the cost of model calls (the judges): part of full-run spend.
_GRADING_CALLS = ("paired_judge", "absolute_judge")


def side_from_records(run_id: str, arm: str, planned: int, attempts: Sequence[AttemptRecord],
                      scores: Sequence[ScoreRecord], *, dataset_id: str, complete: bool) -> Side:
    """One arm of a group as a :class:`policies.evidence.Side`: the latest final attempt of each
    (item, revision, repetition) with its per-answer scores; revision ids qualified by the
    dataset (``DATASET/REVISION``: content hashes of two datasets never pair); full-run spend
    beside it — the attempts a retry superseded and every judge call on the arm's attempts,
    as the group's own spend counts them (:func:`sidecar.collector.corpus.runs.report`)."""
    from policies.evidence import Side

    mine = [a for a in attempts if a.arm == arm and a.status in FINAL]
    latest: dict[tuple[str, str, int], AttemptRecord] = {}
    for a in mine:
        key = (a.item_id, a.revision_id, a.repetition)
        if key not in latest or a.attempt > latest[key].attempt:
            latest[key] = a
    kept = {a.id for a in latest.values()}
    ids = {a.id for a in attempts if a.arm == arm}
    by_attempt: dict[str, list[ScoreRecord]] = {}
    for sc in scores:
        by_attempt.setdefault(sc.attempt_id, []).append(sc)
    qualified = [dataclasses.replace(a, revision_id=f"{dataset_id}/{a.revision_id}") for a in latest.values()]
    return Side(
        f"{run_id}:{arm}", planned, tuple(_attempt(a, by_attempt.get(a.id, [])) for a in qualified),
        complete=complete,
        superseded_costs=tuple(_cost(a.cost_coverage, a.cost_micros) for a in mine if a.id not in kept),
        grading_costs=tuple(_cost(sc.cost_coverage, sc.cost_micros) for sc in scores
                            if sc.attempt_id in ids and sc.kind in _GRADING_CALLS and sc.status != "pending"),
    )


def _cost(coverage: str, micros: int) -> Cost:
    cov = cast(Coverage, coverage if coverage in ("complete", "partial", "unknown") else "unknown")
    return Cost(0 if cov == "unknown" else micros, cov)


class EvidenceService:
    def __init__(self, ctx: CorpusContext) -> None:
        self._ctx = ctx

    async def _experiment(self, principal: Principal, ref: tuple[str, str], field: str
                          ) -> tuple[ComparisonRecord, GroupPlan, str]:
        """The group and arm a side names, refused unless it may be compared (module docs)."""
        group_id, arm = ref
        store = self._ctx.store
        record = await store.get_comparison(group_id)
        if record is None or not principal.sees(record.team):
            raise NotFound(f"no comparison {group_id!r}", field=field)
        plan = await load_plan(store, record)
        if arm not in {a.name for a in plan.arms}:
            raise NotFound(f"comparison {group_id!r} has no arm {arm!r}", field=field)
        run = await store.get_run(group_id)
        cancelled = set(json.loads(run.cancelled_arms)) if run is not None else set()
        if record.status != "completed" or run is None or run.ended_at is None or arm in cancelled:
            state = f"arm {arm!r} was cancelled" if arm in cancelled and record.status == "completed" \
                else f"its status is {record.status!r}"
            raise ComparisonInvalid(f"{_INVALID}{field}: experiment {group_id}:{arm} is not completed ({state}); "
                                    "an unfinished experiment cannot be compared", field=field)
        if await store.comparison_archived(group_id) is not None:
            raise ComparisonInvalid(f"{_INVALID}{field}: experiment {group_id} is archived; an archived "
                                    "experiment cannot be compared", field=field)
        suite = await store.get_suite(record.suite_id)
        if suite is None:
            raise NotFound(f"comparison {group_id!r}: its suite is gone", field=field)
        return record, plan, suite.dataset_id

    async def compare(self, principal: Principal, baseline: str | None, candidate: str | None) -> dict[str, Any]:
        b_ref, c_ref = _ref(baseline, "baseline"), _ref(candidate, "candidate")
        if b_ref == c_ref:
            raise BadRequest("baseline and candidate are the same run", field="candidate")
        b_record, b_plan, b_dataset = await self._experiment(principal, b_ref, "baseline")
        c_record, c_plan, c_dataset = await self._experiment(principal, c_ref, "candidate")
        if b_record.team != c_record.team:
            raise ComparisonInvalid(f"{_INVALID}candidate: experiment {c_record.id} belongs to another team than "
                                    "the baseline; only experiments of one team compare", field="candidate")
        if b_dataset != c_dataset:
            raise ComparisonInvalid(f"{_INVALID}candidate: experiment {c_record.id} runs on dataset {c_dataset}, "
                                    f"the baseline on {b_dataset}; only experiments of one dataset compare "
                                    "(its versions may differ)", field="candidate")
        sides = []
        for (group_id, arm), plan, dataset in ((b_ref, b_plan, b_dataset), (c_ref, c_plan, c_dataset)):
            store = self._ctx.store
            sides.append(side_from_records(group_id, arm, plan.planned_per_arm, await store.run_attempts(group_id),
                                           await store.run_scores(group_id), dataset_id=dataset, complete=True))
        from policies.evidence import compare_evidence

        return view(compare_evidence(sides[0], sides[1]))


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
