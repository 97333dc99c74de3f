"""Subjects: what a case runs for — a trial today; a watch's sentinel and a replay next.

A :class:`Subject` carries everything one case needs, resolved once when the
subject is activated on the engine's loop: the candidate's provider client and
upstream name, the pinned judge, the pinned prices. ``run_case`` is the same
for every subject; a subject differs only in what it dispatches (its
candidate) and what follows a finished case (the engine's post-finish hooks
see the subject's ``kind``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Mapping

from judge.paired import PairedJudge
from judge.version import JudgeSpec
from policies.money import Price
from sidecar.engine.completer_adapter import ProviderCompleter
from sidecar.providers.base import Provider
from sidecar.telemetry.names import Role
from sidecar.store.records import CaseFinish, Effect, TrialRecord
from sidecar.trials.create import Resolved, spec_of

SubjectKind = Literal["trial", "watch", "replay"]


@dataclass(frozen=True)
class Subject:
    kind: SubjectKind
    record: TrialRecord
    candidate: Provider
    candidate_upstream: str
    judge: PairedJudge
    judge_spec: JudgeSpec
    candidate_price: Price
    judge_price: Price
    incumbent_price: Price | None

    @property
    def id(self) -> str:
        return self.record.id


#: The post-finish hook: given the subject and how its case ended, the records
#: to write in the same transaction as the outcome (the uplink's outbox record,
#: a watch's detector step). Pure of I/O: the store writes what it returns.
FinishHook = Callable[[Subject, CaseFinish], tuple[Effect, ...]]

#: Wraps a provider client (configured under a name) for a role: the engine's telemetry
#: counts and traces the subject's calls through it (:meth:`sidecar.telemetry.EngineTelemetry.wrap`).
Wrap = Callable[[Provider, str, Role], Provider]


def activate(
    record: TrialRecord,
    *,
    resolve: Callable[[str], Resolved],
    providers: Mapping[str, Provider],
    shadow_header: str,
    kind: SubjectKind = "trial",
    wrap: Wrap | None = None,
) -> Subject:
    """Build the subject of ``record``; raises ``LookupError`` when a model no longer resolves.
    ``wrap``, when given, wraps the candidate's and the judge's clients for their roles."""
    cand = resolve(record.candidate_model)
    judge = resolve(record.judge_model)
    spec = spec_of(record)
    headers = {shadow_header: "1", "X-Shadowtrial-Trial": record.id}
    candidate, judge_client = providers[cand.provider], providers[judge.provider]
    if wrap is not None:
        candidate = wrap(candidate, cand.provider, "candidate")
        judge_client = wrap(judge_client, judge.provider, "judge")
    completer = ProviderCompleter(judge_client, judge.upstream, headers)
    inc_price = (
        Price(record.incumbent_price_in, record.incumbent_price_out)
        if record.incumbent_price_in is not None and record.incumbent_price_out is not None
        else None
    )
    return Subject(
        kind=kind,
        record=record,
        candidate=candidate,
        candidate_upstream=cand.upstream,
        judge=PairedJudge(completer, spec),
        judge_spec=spec,
        candidate_price=Price(record.candidate_price_in, record.candidate_price_out),
        judge_price=Price(record.judge_price_in, record.judge_price_out),
        incumbent_price=inc_price,
    )
