"""The watches' post-finish hook: each judged case of a watch's sentinel steps its detector.

Installed by the runtime always (it does nothing for a trial's cases). The hook is pure:
it turns the finished case into a :class:`~sidecar.store.watch_records.WatchStep` effect,
and the store applies :func:`policies.cusum.step` to the watch's stored state in the same
transaction as the case's outcome — so a detector is stepped exactly once per judged case,
never for a case that was not recorded, on whichever sidecar of the fleet finished it.

With ``[uplink]`` on, the step carries the alert's content-free ``firing`` record, written
to the outbox only if this step fires the detector (:func:`watch_step_with_uplink`).

Module-level functions, so they pickle into the engine's own process.
"""

from __future__ import annotations

from policies.promotion import observation
from sidecar.engine.subjects import Subject
from sidecar.store.records import CaseFinish, Effect, OutboxRecord
from sidecar.store.watch_logic import alert_id
from sidecar.store.watch_records import WatchStep
from uplink.schema import AlertRecord, encode_record

TOPIC = "alert"


def _step(subject: Subject, finish: CaseFinish, *, uplink: bool) -> tuple[Effect, ...]:
    watch_id = subject.record.watch_id
    if subject.kind != "watch" or watch_id is None or finish.outcome != "judged" or finish.score is None:
        return ()
    on_fire = None
    if uplink:
        alert = alert_id(watch_id)
        record = AlertRecord(
            id=f"alert:{alert}:firing", alert_id=alert, watch_id=watch_id, team=subject.record.team,
            state="firing", at=finish.finished_at,
        )
        on_fire = OutboxRecord(record_id=record.id, topic=TOPIC, body=encode_record(record).decode())
    return (WatchStep(watch_id=watch_id, case_id=finish.case_id, observation=observation(finish.score),
                      at=finish.finished_at, on_fire=on_fire),)


def watch_step(subject: Subject, finish: CaseFinish) -> tuple[Effect, ...]:
    """The :data:`~sidecar.engine.subjects.FinishHook` of watches (uplink off)."""
    return _step(subject, finish, uplink=False)


def watch_step_with_uplink(subject: Subject, finish: CaseFinish) -> tuple[Effect, ...]:
    """As :func:`watch_step`, with the alert's uplink record when the step fires."""
    return _step(subject, finish, uplink=True)
