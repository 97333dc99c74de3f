"""A trial that knows when to stop (issue 26, item 2).

A trial created with ``on_decision = "stop"`` (the default) ends ``decided`` as soon as a fold
of its evidence (:mod:`sidecar.trials.fold`) finds its verdict decided: from then on the store
refuses every new case of it (a claim counts ``after_decision``, a reservation is refused), so
nothing more is dispatched and the decision, the evidence and the spend freeze. The running
intersection already makes a reached decision stand; stopping also stops paying for it.
``continue`` keeps the trial running and narrowing its bounds up to ``expected_cases``.

Cases already dispatched when the decision lands finish and are recorded (their spend was
reserved before the decision): the engine folds a stopping trial right after each judged case
(:meth:`sidecar.engine.engine.Engine.fold_now`), so at most the cases then in flight finish after it.

The decision is only ever *read* here (:func:`policies.verdict.evaluate` decides); the status
change is one conditional update from ``running`` (:meth:`~sidecar.store.base.TrialStore.decide_trial`),
so an operator's stop, a pause or a promotion that came first stands, and of two folds that
both see the decision exactly one changes the trial.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sidecar.store.base import TrialStore
from sidecar.store.records import TrialRecord
from sidecar.trials.spec import spec_effects

if TYPE_CHECKING:
    from policies.verdict import Evaluation  # numpy: imported where a trial is folded

#: The status reason of a trial that stopped on its decision starts with this.
REASON = "decided"


def stops_now(record: TrialRecord, evaluation: Evaluation) -> bool:
    """Whether ``record`` stops on this evaluation: a running live trial (never a watch's day
    row; a replay ends when its window is replayed) with ``on_decision = "stop"`` whose verdict
    is decided."""
    return (
        record.kind == "trial"
        and record.source == "live"
        and record.on_decision == "stop"
        and record.status == "running"
        and evaluation.verdict != "inconclusive"
    )


async def stop_if_decided(
    store: TrialStore, record: TrialRecord, evaluation: Evaluation, *, now: float
) -> TrialRecord | None:
    """End ``record`` ``decided`` when :func:`stops_now`; the record after, or None when
    nothing changed (not decided, ``continue``, or no longer running)."""
    if not stops_now(record, evaluation):
        return None
    at = evaluation.sequence_state.decided_at
    reason = f"{REASON}: {evaluation.verdict}" + ("" if at is None else f" at {at} judged cases")
    return await store.decide_trial(
        record.id, reason, now=now, effects=spec_effects(record, status="decided", reason=reason, at=now)
    )
