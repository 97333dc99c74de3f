"""What a comparison group's run reads as (issue 13, item 3): progress, per-arm denominators,
spend and per-metric results in corpus wording.

Denominators are kept apart, never merged:

- **generation reliability** — an arm's completed generations over its planned ones
  (items x repetitions); failed, ``invocation_indeterminate``, in flight and not yet run are
  counted beside, and they add up to the planned count;
- **grading completion** — of the completed generations, those whose every per-answer
  metric has a final grade (scored, not applicable or a grading error);
- **per-grader coverage** — scored / (eligible - not applicable), eligible being the
  completed generations (for the paired judge: the pairs where both arms completed).

**Spend** is ``known_micros``, ``coverage`` and ``basis`` together (unknown is never
zero), beside the group's ledger (``cap_micros``; ``spent_micros``, which holds the worst
case of every call whose cost is not known; ``reserved_micros``).

**Results**: for each non-baseline arm and each metric, the paired items' estimate and, once
the run is complete (``final``), its 95% interval (:func:`policies.corpus_verdict.corpus_interval`:
items are the clusters, their repetitions inside; the expanded case-cluster bootstrap, never of
zero width), the code of :func:`policies.corpus_verdict.corpus_code` (better or worse only
beyond the tolerance band, read exactly: :mod:`policies.exact_tolerance`) and its corpus
wording. While the run is going the results are read
after every item, and a fixed-sample interval read that way is not a 95% interval: no interval
and no direction is shown (*Inconclusive*, ``final: false``, ``interval_note`` says why), only the
running estimate. Categorical metrics show each arm's distribution and name no winner. The
pairing here is the group's own (same item revision and repetition, one group); comparing
evidence across groups is :mod:`policies.evidence`'s.

Corpus evidence never promotes (:func:`policies.promotion.refusal`): nothing here reads
"Adoptable", and ``evidence`` is ``corpus`` everywhere.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from fractions import Fraction
from typing import Any, Iterable, Sequence

from policies.case_means import paired_cases, run_spread
from policies.exact_tolerance import exact_mean, grid_of
from policies.money import Cost, add_costs
from policies.wording import corpus_wording
from sidecar.collector.corpus.plan import GroupPlan
from sidecar.collector.store.corpus_run_records import AttemptRecord, RunRecord, ScoreRecord

Key = tuple[str, str, str, int]


def latest_attempts(attempts: Iterable[AttemptRecord]) -> dict[Key, AttemptRecord]:
    out: dict[Key, AttemptRecord] = {}
    for a in attempts:
        key = (a.arm, a.item_id, a.revision_id, a.repetition)
        if key not in out or out[key].attempt < a.attempt:
            out[key] = a
    return out


def _cost(coverage: str, micros: int) -> Cost:
    return Cost(micros, "unknown" if coverage == "unknown" else coverage)  # type: ignore[arg-type]


def _spend(parts: Sequence[Cost]) -> dict[str, object]:
    total: Cost | None = None
    for c in parts:
        total = c if total is None else add_costs(total, c)
    return (total or Cost.zero()).to_dict()


def attempt_view(a: AttemptRecord, scores: Sequence[ScoreRecord]) -> dict[str, Any]:
    """An attempt as the evidence comparison reads it (no content)."""
    return {"id": a.id, "arm": a.arm, "item_id": a.item_id, "revision_id": a.revision_id,
            "repetition": a.repetition, "attempt": a.attempt, "retry_of": a.retry_of, "status": a.status,
            "latency_ms": a.latency_ms, "cost": {"known_micros": a.cost_micros, "coverage": a.cost_coverage,
                                                 "basis": "list_price"},
            "error": a.error,
            "scores": [{"metric": s.metric, "kind": s.kind, "version": s.version, "direction": s.direction,
                        "status": s.status, "value": s.value, "category": s.category, "paired_with": s.paired_with}
                       for s in scores]}


def report(plan: GroupPlan, run: RunRecord | None, attempts: Sequence[AttemptRecord],
           scores: Sequence[ScoreRecord]) -> dict[str, Any]:
    """The run part of ``GET /v1/comparisons/{id}`` (see the module's docs)."""
    latest = latest_attempts(attempts)
    by_attempt: dict[str, list[ScoreRecord]] = defaultdict(list)
    for s in scores:
        by_attempt[s.attempt_id].append(s)
    cancelled = set(json.loads(run.cancelled_arms)) if run is not None else set()
    arms = [_arm_view(plan, arm.name, latest, by_attempt, arm.name in cancelled) for arm in plan.arms]
    items_done = sum(1 for item in plan.items if all(
        (a.name, item.id, item.revision_id, r) in latest and latest[(a.name, item.id, item.revision_id, r)].status
        in ("completed", "failed", "invocation_indeterminate")
        for a in plan.arms if a.name not in cancelled for r in range(1, plan.repetitions + 1)))
    costs = [_cost(a.cost_coverage, a.cost_micros) for a in attempts if a.status not in ("claimed", "queued")]
    costs += [_cost(s.cost_coverage, s.cost_micros) for s in scores if s.kind in ("paired_judge", "absolute_judge")
              and s.status != "pending"]
    spend: dict[str, Any] = {**_spend(costs)}
    if run is not None:
        spend["ledger"] = {"cap_micros": run.cap_micros, "spent_micros": run.spent_micros,
                           "reserved_micros": run.reserved_micros}
    complete = run is not None and run.ended_at is not None
    results = _results(plan, latest, by_attempt, cancelled, complete=complete)
    primary = [r for r in results if r["metric"] == plan.primary_metric]
    return {
        "progress": {"items": len(plan.items), "items_done": items_done,
                     "invocations_planned": plan.planned_per_arm * len(plan.arms),
                     "invocations_done": sum(a["generation"]["completed"] + a["generation"]["failed"]
                                             + a["generation"]["invocation_indeterminate"] for a in arms)},
        "arms": arms, "spend": spend, "results": results,
        "primary": [{"arm": r["arm"], "metric": r["metric"], "code": r["code"], "wording": r["wording"]}
                    for r in primary],
        "started_at": None if run is None else run.started_at, "ended_at": None if run is None else run.ended_at,
        # Why a ``failed`` group could not go on (``model_unavailable: …``); None otherwise.
        "error": None if run is None else run.error,
    }


def _arm_view(plan: GroupPlan, arm: str, latest: dict[Key, AttemptRecord],
              by_attempt: dict[str, list[ScoreRecord]], cancelled: bool) -> dict[str, Any]:
    mine = [a for k, a in latest.items() if k[0] == arm]
    counts = Counter(a.status for a in mine)
    planned = plan.planned_per_arm
    completed = [a for a in mine if a.status == "completed"]
    per_answer = [m for m in plan.metrics if m["kind"] != "paired_judge"]
    graded = sum(1 for a in completed
                 if {m["name"] for m in per_answer} <= {s.metric for s in by_attempt[a.id] if s.status != "pending"})
    coverage = []
    is_baseline = arm == plan.baseline.name
    for m in plan.metrics:
        if m["kind"] == "paired_judge":
            if is_baseline:
                continue
            base = {k[1:]: a for k, a in latest.items() if k[0] == plan.baseline.name}
            eligible_attempts = [a for a in completed
                                 if (b := base.get((a.item_id, a.revision_id, a.repetition))) is not None
                                 and b.status == "completed"]
        else:
            eligible_attempts = completed
        rows = [s for a in eligible_attempts for s in by_attempt[a.id] if s.metric == m["name"]]
        c = Counter(s.status for s in rows)
        denominator = len(eligible_attempts) - c["not_applicable"]
        coverage.append({"metric": m["name"], "kind": m["kind"], "version": m["version"],
                         "eligible": len(eligible_attempts), "not_applicable": c["not_applicable"],
                         "scored": c["scored"], "errors": c["error"],
                         "indeterminate": c["invocation_indeterminate"], "pending": c["pending"],
                         "coverage": None if denominator <= 0 else c["scored"] / denominator})
    arm_costs = [_cost(a.cost_coverage, a.cost_micros) for a in mine if a.status not in ("claimed", "queued")]
    return {
        "arm": arm, "cancelled": cancelled,
        "generation": {"planned": planned, "completed": len(completed), "failed": counts["failed"],
                       "invocation_indeterminate": counts["invocation_indeterminate"],
                       "in_flight": counts["claimed"], "queued": counts["queued"],
                       "not_started": planned - len(mine),
                       "reliability": None if planned == 0 else len(completed) / planned},
        "grading": {"completed_generations": len(completed), "graded": graded,
                    "completion": None if not completed else graded / len(completed)},
        "coverage": coverage, "generation_spend": _spend(arm_costs),
    }


def _exact_case_deltas(shared: Sequence[tuple[str, str, int]], base: dict[tuple[str, str, int], ScoreRecord],
                       cand: dict[tuple[str, str, int], ScoreRecord], sign: int) -> list[Fraction]:
    """Per-case differences (matching repetitions' means, candidate - baseline, times ``sign``) in
    exact fractions of the scores' decimals: what the grid of the interval's bounds is read from."""
    by_case: dict[tuple[str, str], tuple[list[float], list[float]]] = defaultdict(lambda: ([], []))
    for k in shared:
        b, c = by_case[k[:2]]
        b.append(base[k].value or 0.0)
        c.append(cand[k].value or 0.0)
    return [sign * ((exact_mean(c) or Fraction(0)) - (exact_mean(b) or Fraction(0))) for b, c in by_case.values()]


def _results(plan: GroupPlan, latest: dict[Key, AttemptRecord], by_attempt: dict[str, list[ScoreRecord]],
             cancelled: set[str], *, complete: bool) -> list[dict[str, Any]]:
    # The statistics (numpy) are imported by the first report, not when the collector starts.
    from policies.bootstrap import bootstrap_identity
    from policies.corpus_verdict import band_for, corpus_code, corpus_interval, delta_bounds, exact_band

    out: list[dict[str, Any]] = []
    base = plan.baseline.name

    def values(arm: str, metric: str) -> dict[str, list[ScoreRecord]]:
        per_item: dict[str, list[ScoreRecord]] = defaultdict(list)
        for k, a in latest.items():
            if k[0] == arm and a.status == "completed":
                for s in by_attempt[a.id]:
                    if s.metric == metric and s.status == "scored":
                        per_item[f"{a.item_id}/{a.revision_id}"].append(s)
        return per_item

    def scored(arm: str, metric: str) -> dict[tuple[str, str, int], ScoreRecord]:
        """The arm's scored repetitions of a metric, by (item, revision, repetition)."""
        out: dict[tuple[str, str, int], ScoreRecord] = {}
        for k, a in latest.items():
            if k[0] == arm and a.status == "completed":
                for s in by_attempt[a.id]:
                    if s.metric == metric and s.status == "scored" and s.value is not None:
                        out[k[1:]] = s
        return out

    for arm in plan.arms[1:]:
        for m in plan.metrics:
            row: dict[str, Any] = {"arm": arm.name, "baseline_arm": base, "metric": m["name"], "kind": m["kind"],
                                   "family": m.get("family"), "version": m["version"], "direction": m["direction"],
                                   "tolerance": plan.tolerance, "arm_cancelled": arm.name in cancelled}
            if m["direction"] == "categorical":
                row["distribution"] = {a: dict(Counter(s.category for ss in values(a, m["name"]).values() for s in ss))
                                       for a in (base, arm.name)}
                row.update(code=None, wording=None, estimate=None, interval=None, paired_items=0)
                out.append(row)
                continue
            cand = values(arm.name, m["name"])
            if m["kind"] == "paired_judge":
                clusters = {k: [s.value or 0.0 for s in ss if s.paired_with is not None] for k, ss in cand.items()}
                diffs = [sum(v) / len(v) for v in clusters.values() if v]
                exact_diffs = [exact_mean(v) or Fraction(0) for v in clusters.values() if v]
                estimate = None if not diffs else math.fsum(diffs) / len(diffs)
                baseline_mean = None
                versions = {s.version for ss in cand.values() for s in ss}
            else:
                # Matching repetitions only, collapsed to per-case means (the evidence comparison's
                # computation): a repetition one arm lacks is never averaged in.
                b_scored, c_scored = scored(base, m["name"]), scored(arm.name, m["name"])
                shared = sorted(b_scored.keys() & c_scored.keys())
                paired = paired_cases((k[0], k[1], k[2], b_scored[k].value or 0.0, c_scored[k].value or 0.0)
                                      for k in shared)
                sign = -1.0 if m["direction"] == "lower" else 1.0
                diffs = [sign * d for d in paired.deltas]
                exact_diffs = _exact_case_deltas(shared, b_scored, c_scored, -1 if m["direction"] == "lower" else 1)
                estimate = None if paired.mean_delta is None else sign * paired.mean_delta
                baseline_mean = paired.baseline_mean
                versions = {s.version for k in shared for s in (b_scored[k], c_scored[k])}
                row["run_spread"] = {a: run_spread((k[0], k[1], k[2], s.value or 0.0)
                                                   for k, s in scored(a, m["name"]).items()) for a in (base, arm.name)}
                row["delta_spread"] = paired.delta_spread
            scale = tuple(m["spec"]["scale"]) if m["kind"] == "absolute_judge" else None
            band = band_for(m["kind"], plan.tolerance, scale=scale, baseline_mean=baseline_mean)
            withheld = len(versions) > 1
            got = corpus_interval(diffs, identity=bootstrap_identity(plan.comparison.id, m["version"],
                                                                     f"{m['name']}/{arm.name}"),
                                  bounds=delta_bounds(m["kind"], scale=scale), complete=complete)
            interval = None if withheld or not diffs else got.interval
            # The tolerance read exactly (issue 24, item 13, as the A/B path reads it): a bound
            # exactly at the band is at it, whatever float rounding made of it.
            exact_limit = exact_band(m["kind"], plan.tolerance, scale=scale, baseline_mean=baseline_mean)
            code = corpus_code(interval, exact_limit, grid_of(exact_diffs))
            row.update(paired_items=len(diffs), estimate=estimate,
                       interval=None if interval is None else [interval.lower, interval.upper], band=band,
                       small_sample=len(diffs) < 20, withheld="versions_differ" if withheld else None,
                       final=complete, interval_note=None if withheld or not diffs else got.note,
                       code=code, wording=corpus_wording(code))
            if m["kind"] == "paired_judge" and diffs:
                row["win_rate"] = (1 + row["estimate"]) / 2
            out.append(row)
    return out

