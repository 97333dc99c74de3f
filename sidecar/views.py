"""What the admin API shows of a trial: status, funnel, spend, verdict, judge
health, and the candidate's cost and latency beside the incumbent's.

Read-only assembly of store figures and pure statistics; no decisions here.
"""

from __future__ import annotations

from typing import Any

from policies.verdict import Evaluation, evaluate
from policies.wording import traffic_wording
from sidecar.health import judge_health_view
from sidecar.store.records import OUTCOMES, TrialRecord
from sidecar.runtime import Runtime


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
    }


def verdict_view(r: TrialRecord, ev: Evaluation) -> dict[str, Any]:
    ended = r.status != "running"
    return {
        "code": ev.verdict,
        "wording": traffic_wording(ev.verdict, ended=ended, promoted=False),
        "evidence": "traffic",
        "cases": ev.n,
        "mean_score": ev.mean_score,
        "win_rate": ev.win_rate,
        "interval": _interval(ev.interval),
        "interval_kind": "95% case-cluster bootstrap (2,000 resamples), win-rate scale",
        "small_sample": ev.small_sample,
        "decision_bounds": _interval(ev.sequence),
        "decision_kind": "anytime-valid 95% confidence sequence (normal mixture), win-rate scale",
        "tolerance": ev.delta,
        "note": ev.note,
    }


async def evaluation(rt: Runtime, r: TrialRecord) -> Evaluation:
    counts = await rt.store.score_counts(r.id)
    return evaluate(
        counts,
        identity=f"{r.id}|{r.judge_version_id}|win_rate",
        expected_cases=r.expected_cases,
        delta=r.delta,
        min_cases=r.min_cases,
    )


async def funnel_view(rt: Runtime, r: TrialRecord) -> dict[str, Any]:
    stored = await rt.store.funnel(r.id)
    pending = rt.funnel.pending(r.id)
    counts = {o: stored.get(o, 0) + pending.get(o, 0) for o in OUTCOMES}
    states = await rt.store.case_states(r.id)
    in_flight = states.get("reserved", 0) + states.get("dispatched", 0)
    return {"outcomes": counts, "total": sum(counts.values()), "in_flight": in_flight}


async def trial_view(rt: Runtime, r: TrialRecord) -> dict[str, Any]:
    ev = await evaluation(rt, r)
    judgments = await rt.store.judgments(r.id)
    paired = await rt.store.paired_figures(r.id)
    out = summary(r)
    out.update(
        {
            "status_reason": r.status_reason,
            "execution_site": r.execution_site,
            "prompt_retention": r.prompt_retention,
            "judge": {"version_id": r.judge_version_id, "name": r.judge_version_name, "model": r.judge_model},
            "funnel": await funnel_view(rt, r),
            "spend": spend_view(r),
            "verdict": verdict_view(r, ev),
            "judge_health": judge_health_view(judgments),
            "paired": paired,
        }
    )
    return out
