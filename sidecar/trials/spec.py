"""A control-plane trial's ``trial_spec`` records: how the collector learns a trial it runs.

The sidecar pins a trial's execution site at creation (DESIGN.md section 9). For a trial
pinned to the control plane the collector runs the cases (issue 11 item 5), so it must
know the trial — its models, pinned prices, judge, cap, sampling and statistics settings —
and every later change of its status or site, in the order they happened. Each is one
:class:`~uplink.schema.TrialSpec` outbox record written *in the same transaction* as the
change it reports (the store's ``effects`` arguments): creation, an operator's stop, a
pause (``posture_changed``), a resume (which may re-pin the site to local: the collector
then stops running it).

``revision`` is the change's time in microseconds: it only grows for one trial, and a
collector applies a spec only when it is the highest revision it holds for the trial, so
a re-delivery or an out-of-order delivery (a fleet's sidecars send in parallel) never
takes a trial back to an older state.

Content-free: ids, model names, numbers, the judge's spec and the status reason an
operator or the posture wrote.
"""

from __future__ import annotations

import json
from typing import Mapping, Sequence

from sidecar.store.base import Store
from sidecar.store.records import OutboxRecord, TrialRecord
from sidecar.trials.segments import segments_of
from uplink.schema import TrialSpec, encode_record

TOPIC = "trial_spec"
CONTROL_PLANE = "control_plane"


def revision_at(at: float) -> int:
    """The revision of a change made at ``at`` (seconds): its time in microseconds."""
    return int(round(at * 1_000_000))


def trial_spec(
    record: TrialRecord, *, status: str, reason: str | None, at: float,
    site: str | None = None, retention: bool | None = None, started_by: str | None = None,
) -> TrialSpec:
    """The spec of ``record`` after a change to ``status`` (and, on a resume, its new pins)."""
    rev = revision_at(at)
    return TrialSpec(
        id=f"trial_spec:{record.id}:{rev}",
        trial_id=record.id,
        team=record.team,
        revision=rev,
        status=status,
        execution_site=record.execution_site if site is None else site,
        prompt_retention=record.prompt_retention if retention is None else retention,
        incumbent_model=record.incumbent_model,
        candidate_model=record.candidate_model,
        sample_rate=record.sample_rate,
        cap_micros=record.cap_micros,
        expected_cases=record.expected_cases,
        delta=record.delta,
        min_cases=record.min_cases,
        audit_share=record.audit_share,
        candidate_max_tokens=record.candidate_max_tokens,
        candidate_price_in=record.candidate_price_in,
        candidate_price_out=record.candidate_price_out,
        judge_price_in=record.judge_price_in,
        judge_price_out=record.judge_price_out,
        judge_model=record.judge_model,
        judge_version_id=record.judge_version_id,
        judge_version_name=record.judge_version_name,
        judge_spec_json=record.judge_spec_json,
        created_at=record.created_at,
        incumbent_price_in=record.incumbent_price_in,
        incumbent_price_out=record.incumbent_price_out,
        status_reason=reason,
        route=record.route,
        gateway=record.gateway,
        started_by=record.started_by if started_by is None else started_by,
        on_decision=record.on_decision,
        segments=list(segments_of(record)),
        segment_cap=record.segment_cap,
        segment_min_cases=record.segment_min_cases,
    )


def spec_effects(
    record: TrialRecord, *, status: str, reason: str | None, at: float,
    site: str | None = None, retention: bool | None = None, started_by: str | None = None,
) -> tuple[OutboxRecord, ...]:
    """The outbox record of a change of ``record``, or none when the trial neither was nor
    becomes pinned to the control plane (a local trial is nobody else's business)."""
    if CONTROL_PLANE not in (record.execution_site, site):
        return ()
    spec = trial_spec(record, status=status, reason=reason, at=at, site=site, retention=retention,
                      started_by=started_by)
    return (OutboxRecord(record_id=spec.id, topic=TOPIC, body=encode_record(spec).decode()),)


async def pause_effects(store: Store, team: str, *, reason: str, at: float) -> Mapping[str, Sequence[OutboxRecord]]:
    """The spec each running control-plane trial of ``team`` gets if a posture write pauses it
    (the store writes only those of the trials it pauses, in the pause's transaction)."""
    running = await store.list_trials(teams=[team], status="running")
    out: dict[str, Sequence[OutboxRecord]] = {}
    for r in running:
        effects = spec_effects(r, status="posture_changed", reason=reason, at=at)
        if effects:
            out[r.id] = effects
    return out


def record_of(spec: TrialSpec) -> TrialRecord:
    """The collector's own copy of the trial a spec describes (no spend, no kept statistics yet)."""
    return TrialRecord(
        id=spec.trial_id, team=spec.team, incumbent_model=spec.incumbent_model, candidate_model=spec.candidate_model,
        route=spec.route, gateway=spec.gateway, sample_rate=spec.sample_rate, cap_micros=spec.cap_micros,
        expected_cases=spec.expected_cases, delta=spec.delta, min_cases=spec.min_cases, audit_share=spec.audit_share,
        candidate_max_tokens=spec.candidate_max_tokens, candidate_price_in=spec.candidate_price_in,
        candidate_price_out=spec.candidate_price_out, judge_price_in=spec.judge_price_in,
        judge_price_out=spec.judge_price_out, incumbent_price_in=spec.incumbent_price_in,
        incumbent_price_out=spec.incumbent_price_out, judge_model=spec.judge_model,
        judge_version_id=spec.judge_version_id, judge_version_name=spec.judge_version_name,
        judge_spec_json=spec.judge_spec_json, execution_site=spec.execution_site,
        prompt_retention=spec.prompt_retention, created_at=spec.created_at,
        status=spec.status if spec.status in _STATUSES else "stopped",  # type: ignore[arg-type]
        status_reason=spec.status_reason, started_by=spec.started_by,
        on_decision=on_decision_of(spec),
        segments=json.dumps(list(spec.segments)),
        segment_cap=spec.segment_cap,
        segment_min_cases=spec.segment_min_cases,
    )


#: What a spec without ``on_decision`` (one sent by a sidecar from before the setting) reads as:
#: ``continue``, today's behaviour of such a trial, which its own sidecar's store migrated with
#: the same default (a decision there never stopped it).
OLD_SPEC_ON_DECISION = "continue"


def on_decision_of(spec: TrialSpec) -> str:
    """The spec's ``on_decision``: ``stop`` or ``continue`` (anything else or none: continue)."""
    return spec.on_decision if spec.on_decision in ("stop", "continue") else OLD_SPEC_ON_DECISION


_STATUSES = ("running", "cap_reached", "stopped", "posture_changed", "starter_unauthorized", "decided")
