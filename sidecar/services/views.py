"""What the admin API shows of a trial: status, funnel, spend, verdict, judge
health, and the candidate's cost and latency beside the incumbent's.

Assembly of store figures and pure statistics; no decisions here. A read folds
the trial's evidence into the statistics kept with it (:mod:`sidecar.trials.fold`), so
the verdict and the judge-health flag shown stand on the next read and after a
restart; that is the one thing a view writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policies.forecast import forecast
from policies.wording import traffic_wording
from sidecar.services.health import judge_health_view
from sidecar.trials.fold import fold_trial
from sidecar.trials.segments import (
    SegmentResult,
    evaluate_segments,
    rejected_keys,
    segments_of,
    segments_view,
    summary_words,
)
from sidecar.store.records import OUTCOMES, TrialRecord, TrialSnapshot
from sidecar.services.context import ViewContext

if TYPE_CHECKING:
    from policies.verdict import Evaluation  # numpy: imported where a trial is folded


def _interval(iv: Any) -> dict[str, float] | None:
    return None if iv is None else {"lower": iv.lower, "upper": iv.upper}


def spend_view(r: TrialRecord) -> dict[str, Any]:
    held = r.spent_micros - r.known_micros
    if r.unknown_calls == 0:
        coverage = "complete"
    elif r.priced_calls == 0:
        coverage = "unknown"
    else:
        coverage = "partial"
    return {
        "cap_micros": r.cap_micros,
        "known_micros": r.known_micros,
        "coverage": coverage,
        "basis": "list_price",
        "unknown_calls": r.unknown_calls,
        "disputed_reports": r.disputed_calls,
        "held_for_unknown_micros": held,
        "charged_micros": r.spent_micros,
        "reserved_micros": r.reserved_micros,
        "remaining_micros": r.cap_micros - r.spent_micros - r.reserved_micros,
    }


def summary(r: TrialRecord) -> dict[str, Any]:
    return {
        "id": r.id,
        "team": r.team,
        "status": r.status,
        "incumbent_model": r.incumbent_model,
        "candidate_model": r.candidate_model,
        "route": r.route,
        "gateway": r.gateway,
        "sample_rate": r.sample_rate,
        "spend_cap_usd": r.cap_micros / 1_000_000,
        "created_at": r.created_at,
        "ended_at": r.ended_at,
        "started_by": r.started_by,
        "source": source_view(r),
        "on_decision": r.on_decision,
    }


def source_view(r: TrialRecord) -> dict[str, Any]:
    """Live traffic, or a replay of the retention window (its window and progress)."""
    if r.source != "replay":
        return {"kind": "live"}
    return {"kind": "replay", "from": r.source_from, "to": r.source_to, "sample_size": r.source_size,
            "fed": r.replay_fed}


#: A paused trial (``starter_unauthorized``, ``posture_changed``) reads this, never "Inconclusive"
#: (DESIGN.md section 8; issue 26, item 4): it is neither running nor ended.
PAUSED_WORDING = "Paused"
_PAUSED = ("starter_unauthorized", "posture_changed")


def verdict_view(r: TrialRecord, ev: Evaluation) -> dict[str, Any]:
    ended = r.status != "running"
    wording = traffic_wording(ev.verdict, ended=ended, promoted=r.status == "adopted")
    return {
        "code": ev.verdict,
        "wording": PAUSED_WORDING if r.status in _PAUSED else wording,
        "evidence": "traffic",
        "cases": ev.n,
        "mean_score": ev.mean_score,
        "win_rate": ev.win_rate,
        "interval": _interval(ev.interval),
        "interval_kind": "95% case-cluster bootstrap (2,000 resamples), win-rate scale",
        "small_sample": ev.small_sample,
        "decision_bounds": _interval(ev.sequence),
        "decision_kind": (
            "running intersection, kept with the trial, of an anytime-valid 95% betting confidence "
            "sequence (Waudby-Smith and Ramdas 2024, hedged capital, mixed constant bets) over every scored case "
            "in scoring order; win-rate scale"
            if ev.method == "betting" else
            "running intersection, kept with the trial, of an anytime-valid 95% empirical-Bernstein "
            "confidence sequence (Howard et al. 2021) over every look; win-rate scale"
        ),
        "decision_method": ev.method,
        "min_cases": ev.min_cases,
        "forecast": forecast_view(r, ev),
        "decision_bounds_now": _interval(ev.sequence_now),
        "decided_at": ev.sequence_state.decided_at,
        "contradicted": ev.contradicted,
        "restarts": ev.sequence_state.restarts,
        "interval_note": ev.interval_note,
        "tolerance": ev.delta,
        "note": ev.note,
    }


def forecast_view(r: TrialRecord, ev: Evaluation) -> list[dict[str, Any]] | None:
    """Expected cases, and cost at the spend so far per scored case, to *Adoptable* and to
    ``candidate_better`` at a few true win rates (:mod:`policies.forecast`; betting trials only)."""
    if ev.method != "betting":
        return None
    per_case = r.spent_micros / ev.n if ev.n else None

    def pair(v: tuple[int, int] | None) -> dict[str, int] | None:
        return None if v is None else {"median": v[0], "p90": v[1]}

    return [
        {"win_rate": f.win_rate, "adoptable_cases": pair(f.adoptable), "adoptable_cost_micros": pair(f.adoptable_cost_micros),
         "candidate_better_cases": pair(f.better), "candidate_better_cost_micros": pair(f.better_cost_micros)}
        for f in forecast(tolerance=ev.delta, min_cases=ev.min_cases, cost_per_case_micros=per_case)
    ]


async def evaluation(ctx: ViewContext, r: TrialRecord) -> Evaluation:
    """The verdict of ``r`` now, folded into (and kept with) the trial's running intersection."""
    return (await fold_trial(ctx.store, r, await ctx.store.score_counts(r.id))).evaluation


def funnel_view(funnel: dict[str, int], states: dict[str, int]) -> dict[str, Any]:
    counts = {o: funnel.get(o, 0) for o in OUTCOMES}
    in_flight = states.get("claimed", 0) + states.get("reserved", 0) + states.get("dispatched", 0)
    return {"outcomes": counts, "total": sum(counts.values()), "in_flight": in_flight}


@dataclass(frozen=True, slots=True)
class TrialRead:
    """One consistent read of a trial: the store's snapshot and the funnel counts not yet flushed."""

    snapshot: TrialSnapshot
    pending: dict[str, int]

    @property
    def record(self) -> TrialRecord:
        return self.snapshot.record


async def read_trial(ctx: ViewContext, trial_id: str) -> TrialRead | None:
    """Read a trial (None: no such trial). Nothing is folded or written: the caller checks
    who may see it before :func:`trial_view` folds its statistics."""
    async with ctx.funnel.consistent():  # store counts and pending counts, each count in exactly one
        snap = await ctx.store.snapshot(trial_id)
        pending = ctx.funnel.pending(trial_id)
    return None if snap is None else TrialRead(snap, pending)


async def trial_view(ctx: ViewContext, read: TrialRead) -> dict[str, Any]:
    """The whole view of one trial, from one consistent read of the store."""
    snap = read.snapshot
    funnel = dict(snap.funnel)
    for outcome, n in read.pending.items():
        funnel[outcome] = funnel.get(outcome, 0) + n
    r = snap.record
    folded = await fold_trial(ctx.store, r, snap.score_counts, snap.judgments)
    ev, health = folded.evaluation, folded.health
    out = summary(r)
    out.update(
        {
            "status_reason": r.status_reason,
            "execution_site": r.execution_site,
            "prompt_retention": r.prompt_retention,
            "judge": {"version_id": r.judge_version_id, "name": r.judge_version_name, "model": r.judge_model},
            "funnel": funnel_view(funnel, snap.case_states),
            "spend": spend_view(r),
            "verdict": verdict_view(r, ev),
            "judge_health": None if health is None else judge_health_view(health),
            "paired": snap.paired,
        }
    )
    out["segments"] = await segment_block(ctx, r, out["verdict"]["wording"])
    return out


async def segment_results(ctx: ViewContext, r: TrialRecord) -> list[SegmentResult]:
    """Each tracked segment value's verdict (issue 27; empty for a trial read by no segment)."""
    if not segments_of(r):
        return []
    return evaluate_segments(r, await ctx.store.tracked_segments(r.id), await ctx.store.segment_cases(r.id))


async def segment_block(ctx: ViewContext, r: TrialRecord, overall_word: str) -> dict[str, Any] | None:
    """The ``segments`` block of a trial's view (None: read by no segment)."""
    if not segments_of(r):
        return None
    return segments_view(r, await segment_results(ctx, r), overall_word)


async def segment_list_fields(ctx: ViewContext, r: TrialRecord, overall_word: str) -> dict[str, Any]:
    """What a list row says of a trial's segments (issue 27): ``segments_rejected`` (the rejected
    segment keys, [] when none or when read by no segment) and ``segments_summary`` ("Adoptable
    overall; Rejected on tag:tier=reasoning"; None when read by no segment)."""
    if not segments_of(r):
        return {"segments_rejected": [], "segments_summary": None}
    rejected = rejected_keys(await segment_results(ctx, r))
    return {"segments_rejected": rejected, "segments_summary": summary_words(overall_word, rejected)}


async def list_item(ctx: ViewContext, r: TrialRecord) -> dict[str, Any]:
    """A trial as ``GET /v1/trials`` lists it: the summary, a short verdict, the spend, the
    rejected segments (:func:`segment_list_fields`)."""
    ev = await evaluation(ctx, r)
    item = summary(r)
    item["verdict"] = {"code": ev.verdict, "wording": verdict_view(r, ev)["wording"], "cases": ev.n}
    item["spend"] = spend_view(r)
    item.update(await segment_list_fields(ctx, r, item["verdict"]["wording"]))
    return item


async def live_item(ctx: ViewContext, r: TrialRecord) -> dict[str, Any]:
    """A running trial as ``GET /v1/live`` shows it: the summary, the whole verdict, the spend,
    the rejected segments (:func:`segment_list_fields`)."""
    ev = await evaluation(ctx, r)
    item = summary(r)
    item["verdict"] = verdict_view(r, ev)
    item["spend"] = spend_view(r)
    item.update(await segment_list_fields(ctx, r, item["verdict"]["wording"]))
    return item


def spend_totals_view(totals: dict[str, int]) -> dict[str, Any]:
    """Evaluation spend summed over trials (``ReadModel.total_spend``)."""
    return {
        "known_micros": totals["known"],
        "charged_micros": totals["spent"],
        "reserved_micros": totals["reserved"],
        "unknown_calls": totals["unknown_calls"],
        "note": "evaluation spend is reported beside the gateway's metered spend, never summed into it",
    }
