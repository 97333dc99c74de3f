"""The uplink's ``trial_state`` records: each trial's status, verdict and figures, as they change.

A trial's state is derived, not an event: a later state supersedes an earlier
one. So it is published from the store, not from one code path: every few
seconds the publisher reads each trial that may have changed, folds its
evidence as a trial view does (:mod:`sidecar.trials.fold`), and writes a content-free
:class:`~uplink.schema.TrialState` into the outbox. Its ``revision`` is the
trial row's ``state_revision`` (raised by the store on every change of the row)
plus the funnel's stored total: both only grow, both come from one consistent
read, so a later read has a revision at least as high, and the collector keeps
the highest (sidecars of a fleet publishing the same trial agree: equal revisions
read equal facts). Nothing is lost if the process dies before a publish: the
next publisher (a restart, a fleet peer) reads the same store.

Which trials are read: any whose ``state_revision`` moved since the last look (a
case, a stop, a pause), and a running one every :data:`UNCHANGED_EVERY` passes
(outcomes counted before a case do not touch the row). An ended trial that nothing
touches is read once per process life. Content-free: ids, models, status,
numbers; the status *reason* (free text, which may name a person) is not sent.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Callable

from policies.wording import trial_status_wording
from sidecar.trials.fold import fold_trial
from sidecar.store.base import Store
from sidecar.store.records import OutboxRecord, TrialRecord, TrialSnapshot
from sidecar.trials.segments import evaluate_segments, rejected_keys, segments_of
from uplink.schema import Interval, SegmentState, TrialState, encode_record

log = logging.getLogger("shadowtrial.uplink")

TOPIC = "trial_state"
#: A running trial whose row has not changed is read again only every this many passes: only
#: outcomes counted before a case (``not_sampled``, ``shed_*``) can have moved its state.
UNCHANGED_EVERY = 12


def revision(snap: TrialSnapshot) -> int:
    """The state's order: the row's own revision plus every outcome counted in the store."""
    return snap.record.state_revision + sum(snap.funnel.values())


async def trial_state(store: Store, snap: TrialSnapshot, *, at: float) -> TrialState:
    """The content-free state of ``snap``, its evidence folded (and kept, as a view keeps it)."""
    r = snap.record
    ev = (await fold_trial(store, r, snap.score_counts, snap.judgments)).evaluation
    segments = (evaluate_segments(r, await store.tracked_segments(r.id), await store.segment_cases(r.id))
                if segments_of(r) else [])
    return TrialState(
        id=f"trial:{r.id}:{revision(snap)}",
        trial_id=r.id,
        team=r.team,
        revision=revision(snap),
        status=r.status,
        at=at,
        incumbent_model=r.incumbent_model,
        candidate_model=r.candidate_model,
        execution_site=r.execution_site,
        judge_version_id=r.judge_version_id,
        verdict=trial_status_wording(ev.verdict, status=r.status),  # "Paused" while paused
        decision=ev.verdict,
        interval=Interval(ev.sequence.lower, ev.sequence.upper),
        bootstrap=None if ev.interval is None else Interval(ev.interval.lower, ev.interval.upper),
        cases=ev.n,
        funnel=dict(snap.funnel),
        cap_micros=r.cap_micros,
        spent_micros=r.spent_micros,
        known_micros=r.known_micros,
        unknown_calls=r.unknown_calls,
        gateway=r.gateway,
        route=r.route,
        segments=[SegmentState(key=x.key, judged=x.evaluation.n, decision=x.evaluation.verdict,
                               interval=Interval(x.evaluation.sequence.lower, x.evaluation.sequence.upper),
                               win_rate=x.evaluation.win_rate) for x in segments],
        segments_rejected=rejected_keys(segments),
    )


def _only_folded(before: TrialRecord, after: TrialRecord) -> bool:
    """Whether ``after`` differs from ``before`` at most in the statistics a fold keeps."""
    return dataclasses.replace(
        after, sequence_state=before.sequence_state, judge_health_state=before.judge_health_state,
        state_revision=before.state_revision,
    ) == before


class StatePublisher:
    """Writes a ``trial_state`` for each trial whose state moved since it last looked."""

    def __init__(self, store: Store, *, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._clock = clock
        #: Per trial: the revision last published, and the row's revision after that publish's fold.
        self._published: dict[str, int] = {}
        self._seen_row: dict[str, int] = {}
        #: Passes made, and the pass at which each trial was last read.
        self._passes = 0
        self._read_at: dict[str, int] = {}

    async def publish(self) -> int:
        """One pass; how many records it wrote."""
        written: list[OutboxRecord] = []
        self._passes += 1
        for record in await self._store.list_trials(kind="trial"):  # a watch's day rows: its alerts are its records
            if self._seen_row.get(record.id) == record.state_revision and (
                record.status != "running" or self._passes - self._read_at.get(record.id, 0) < UNCHANGED_EVERY
            ):
                continue
            self._read_at[record.id] = self._passes
            snap = await self._store.snapshot(record.id)
            if snap is None:
                continue
            rev = revision(snap)
            if self._published.get(record.id, -1) < rev:
                state = await trial_state(self._store, snap, at=self._clock())
                written.append(OutboxRecord(record_id=state.id, topic=TOPIC, body=encode_record(state).decode()))
                self._published[record.id] = rev
                self._seen_row[record.id] = snap.record.state_revision
                after = await self._store.get_trial(record.id)
                if after is not None and _only_folded(snap.record, after):
                    # The fold kept new statistics: the row moved, the state did not.
                    self._published[record.id] = after.state_revision + sum(snap.funnel.values())
                    self._seen_row[record.id] = after.state_revision
            else:
                self._seen_row[record.id] = snap.record.state_revision
        if written:
            await self._store.enqueue_outbox(written, now=self._clock())
        return len(written)

    async def run(self, every_s: float) -> None:
        while True:
            try:
                await self.publish()
            except asyncio.CancelledError:
                raise
            except Exception:  # the store is down, say: the next pass reads it again
                log.exception("publishing trial states failed; trying again in %.1f s", every_s)
            await asyncio.sleep(every_s)
