"""The watches' post-finish hook: each judged case of a watch's sentinel steps its detector.

Installed by the runtime always (it does nothing for a trial's cases). The hook is pure:
it turns the finished case into a :class:`~sidecar.store.watch_records.WatchStep` effect,
and the store applies :func:`policies.cusum.step` to the watch's stored state in the same
transaction as the case's outcome — so a detector is stepped exactly once per judged case,
never for a case that was not recorded, on whichever sidecar of the fleet finished it.

With ``[uplink]`` on, the step asks the store to announce the alert: the store writes the
alert's content-free ``firing`` record to the outbox only if this step fires the detector
(:func:`watch_step_with_uplink`). The store words it because only the store, under its write
lock, knows the watch's current period and so the alert's id (each period has its own).

Module-level functions, so they pickle into the engine's own process.
"""

from __future__ import annotations

from policies.promotion import observation
from sidecar.engine.subjects import Subject
from sidecar.store.records import CaseFinish, Effect
from sidecar.store.watch_records import WatchStep


def _step(subject: Subject, finish: CaseFinish, *, uplink: bool) -> tuple[Effect, ...]:
    watch_id = subject.record.watch_id
    if subject.kind != "watch" or watch_id is None or finish.outcome != "judged" or finish.score is None:
        return ()
    return (WatchStep(watch_id=watch_id, case_id=finish.case_id, observation=observation(finish.score),
                      at=finish.finished_at, announce=uplink),)


def watch_step(subject: Subject, finish: CaseFinish) -> tuple[Effect, ...]:
    """The :data:`~sidecar.engine.subjects.FinishHook` of watches (uplink off)."""
    return _step(subject, finish, uplink=False)


def watch_step_with_uplink(subject: Subject, finish: CaseFinish) -> tuple[Effect, ...]:
    """As :func:`watch_step`, with the alert's uplink record written when the step fires."""
    return _step(subject, finish, uplink=True)
