"""The replay feeder: a replay trial's retained exchanges, handed to the engine like the tap's.

A replay trial (``TrialRecord.source == "replay"``) reads the retention window instead of
live traffic: the exchanges of its team served in ``[source_from, source_to)``, of its
incumbent model (and route and gateway when set), in arrival order. Each is selected by
the same deterministic hash as live sampling (:func:`policies.sampling.is_sampled`), at the
rate pinned at creation (``source_size`` over what the window held then), at most
``source_size`` in all; a selected exchange becomes a :class:`~sidecar.engine.engine.Claim`,
run by the engine like any other: candidate only, the served answer reused, the same
judge, cap, funnel and statistics.

The funnel counts the selected exchanges (each gets exactly one outcome); exchanges of the
window the hash leaves out are not counted ``not_sampled``, so a re-fed page cannot count
them twice. In a fleet every sidecar resumes a running replay: the work is repeated, the
cases are not (``claim_case``), and progress is kept as the furthest any feeder got.

Backpressure, not shedding: a page of claims goes to the engine's hand-off with
:meth:`~sidecar.ingest.handoff.Handoff.put_many`, which waits (on a worker thread) while the
queue is over half full, so a replay never takes the room live traffic needs and never
sheds. Restart-safe: after each page is handed off, its last ``seq`` and the count fed are
stored with the trial (``save_replay_progress``), and a restarted sidecar resumes there; a
page handed off but not recorded (a crash in between) is fed again, and the store's
``claim_case`` makes each (trial, exchange) a case once — a re-delivery counts nothing.
(Claims of a page still queued at an orderly stop are counted ``shed_stopped`` and not fed
again.)

Only what the window still holds is read: each page is selected with the window's age bound
on the injected clock (``kept_at`` at or after now minus ``window_seconds``), so an exchange
that expired while the trial waited — evicted yet or not — is never fed (issue 21, item 12).

The trial ends — ``stopped``, reason ``replay window exhausted`` — once the window has no
more to feed and every fed exchange has its funnel outcome. A trial stopped, capped or
paused meanwhile stops its feeder at the next page.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Protocol

from policies.sampling import is_sampled
from sidecar.ingest.claims import Claim
from sidecar.ingest.handoff import Handoff
from sidecar.seal import Sealer, UnsealError
from sidecar.retention.window import open_exchange
from sidecar.store.base import Store
from sidecar.store.records import RetainedSelection, TrialRecord
from sidecar.supervise import UNTIL_DONE, Supervisor

log = logging.getLogger("shadowtrial.replay")

#: Retained exchanges read per page.
PAGE = 256
#: Claims handed off per wait: a cancelled feeder's worker thread finishes at most this many.
HANDOFF_CHUNK = 32
#: How often an exhausted replay checks whether its last cases have their outcomes.
SETTLE_POLL_S = 0.25
EXHAUSTED = "replay window exhausted"


class _Pending(Protocol):
    def pending(self, trial_id: str) -> dict[str, int]: ...


def selection(record: TrialRecord, *, kept_after: float | None = None) -> RetainedSelection:
    """What a replay trial reads of the window; ``kept_after``: the window's age bound now
    (:meth:`~sidecar.retention.window.RetentionWindow.keep_after`), so nothing expired is read."""
    assert record.source_from is not None and record.source_to is not None
    return RetainedSelection(
        team=record.team, served_from=record.source_from, served_to=record.source_to,
        model=record.incumbent_model, route=record.route, gateway=record.gateway, kept_after=kept_after,
    )


class ReplayFeeder:
    """One task per running replay trial, on the loop of ``store`` (the admin's).

    :meth:`feed` starts a trial's task (once); :meth:`resume` starts every running replay
    trial's at start-up; :meth:`stop` cancels them (their progress is stored per page).
    ``window_seconds``: the window's age bound (``None``: none), applied to every page read."""

    def __init__(
        self, store: Store, handoff: Handoff[Claim], sealer: Sealer | None, funnel: _Pending,
        *, clock: Callable[[], float] = time.time, window_seconds: float | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self._store = store
        self._supervisor = supervisor or Supervisor()
        self._handoff = handoff
        self._sealer = sealer
        self._funnel = funnel
        self._clock = clock
        self._window_s = window_seconds
        self._tasks: dict[str, asyncio.Task[None]] = {}
        #: Exchanges handed to the engine by every replay of this process, and unreadable rows skipped.
        self.fed = 0
        self.unreadable = 0

    def feed(self, record: TrialRecord) -> None:
        if record.source != "replay" or record.id in self._tasks or self._sealer is None:
            return
        # Supervised: if it raises it is restarted after a backoff from the progress stored
        # with the trial (each page's); returning is its normal end.
        trial_id = record.id
        task = self._supervisor.task(f"replay-{trial_id}", lambda: self._feed_stored(trial_id), UNTIL_DONE)
        self._tasks[record.id] = task

        def forget(_task: asyncio.Task[None]) -> None:
            self._tasks.pop(record.id, None)

        task.add_done_callback(forget)

    async def resume(self) -> None:
        for record in await self._store.list_trials(status="running"):
            self.feed(record)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def wait(self, trial_id: str) -> None:
        """Until the trial's feeder ends (tests)."""
        task = self._tasks.get(trial_id)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)

    async def _feed_stored(self, trial_id: str) -> None:
        """Feed from the progress stored with the trial (a restart after a failure resumes there)."""
        record = await self._store.get_trial(trial_id)
        if record is not None and record.status == "running":
            await self._feed(record)

    async def _feed(self, record: TrialRecord) -> None:
        if await self._pages(record):
            await self._end(record)

    async def _pages(self, record: TrialRecord) -> bool:
        """Feed page by page; True when the window is exhausted (False: the trial ended first)."""
        assert self._sealer is not None and record.source_size is not None
        cursor, fed = record.replay_cursor, record.replay_fed
        while fed < record.source_size:
            current = await self._store.get_trial(record.id)
            if current is None or current.status != "running":
                return False
            kept_after = None if self._window_s is None else self._clock() - self._window_s
            page = await self._store.retained(selection(record, kept_after=kept_after), after_seq=cursor, limit=PAGE)
            if not page:
                break
            claims: list[Claim] = []
            seqs: list[int] = []  # the row of each claim
            start = cursor
            for row in page:
                if fed + len(claims) >= record.source_size:
                    break
                cursor = row.seq
                if not is_sampled(record.id, row.exchange_id, record.sample_rate):
                    continue
                try:
                    exchange = open_exchange(self._sealer, row)
                except (UnsealError, ValueError):  # another key, or not an exchange: skipped, counted
                    self.unreadable += 1
                    continue
                claims.append(Claim(record.id, exchange))
                seqs.append(row.seq)
            if claims:
                taken = 0
                for i in range(0, len(claims), HANDOFF_CHUNK):  # small waits: a stop cancels between them
                    chunk = claims[i : i + HANDOFF_CHUNK]
                    put = await asyncio.to_thread(self._handoff.put_many, chunk)
                    taken += put
                    if put < len(chunk):
                        break
                fed += taken
                self.fed += taken
                if taken < len(claims):  # the hand-off closed: this process is stopping
                    cursor = seqs[taken - 1] if taken else start
                    await self._store.save_replay_progress(record.id, cursor=cursor, fed=fed)
                    return False
            await self._store.save_replay_progress(record.id, cursor=cursor, fed=fed)
        return True

    async def _end(self, record: TrialRecord) -> None:
        """Once every fed exchange has its outcome, end the trial (window exhausted)."""
        while True:
            # The funnel and case states only: a snapshot reads every judgment, a cost that grew
            # with the replay at every poll.
            snap = await self._store.progress(record.id)
            if snap is None or snap.record.status != "running":
                return
            counted = sum(snap.funnel.values()) + sum(self._funnel.pending(record.id).values())
            in_flight = sum(n for state, n in snap.case_states.items() if state != "finished")
            if counted >= snap.record.replay_fed and not in_flight:
                break
            await asyncio.sleep(SETTLE_POLL_S)
        await self._store.set_trial_status(
            record.id, "stopped", f"{EXHAUSTED}: {snap.record.replay_fed} exchange(s) replayed",
            ended=True, now=self._clock(),
        )
