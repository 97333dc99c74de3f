"""A watch's sentinel as rows of the case ledger: one ``kind = 'watch'`` trials row per UTC day.

The promoted trial's candidate is now the incumbent; its incumbent (the replaced model) is
dispatched as the sentinel's *candidate*, at the watch's sample rate, judged with the
promoted trial's pinned judge version, against the new incumbent's served answers (the
incumbent is never called). Each day row's cap is the watch's daily cap, so the ledger's
own cap rule — one conditional update, a constraint behind it — keeps each UTC day under
its cap at every moment; :func:`roll_watches` starts the new day's row (the engine calls it
on every refresh, with its injected clock).
"""

from __future__ import annotations

import dataclasses
import logging

from policies.money import Price
from policies.promotion import utc_day
from sidecar.store.base import Store
from sidecar.store.records import TrialRecord

log = logging.getLogger("shadowtrial.watches")


def day_row_id(watch_id: str, day: str) -> str:
    return f"{watch_id}-{day.replace('-', '')}"


def first_day_row(
    trial: TrialRecord, *, watch_id: str, sample_rate: float, daily_cap_micros: int, old_price: Price,
    now: float, started_by: str | None,
) -> TrialRecord:
    """The sentinel's row for the UTC day of ``now``: the promoted trial with its models swapped
    (the replaced model dispatched, the promoted one served), its judge version kept."""
    new_price_in, new_price_out = trial.candidate_price_in, trial.candidate_price_out
    return dataclasses.replace(
        trial,
        id=day_row_id(watch_id, utc_day(now)),
        incumbent_model=trial.candidate_model,
        candidate_model=trial.incumbent_model,
        sample_rate=sample_rate,
        cap_micros=daily_cap_micros,
        candidate_price_in=old_price.input_per_mtok,
        candidate_price_out=old_price.output_per_mtok,
        incumbent_price_in=new_price_in,
        incumbent_price_out=new_price_out,
        created_at=now,
        status="running",
        status_reason=None,
        ended_at=None,
        spent_micros=0,
        known_micros=0,
        reserved_micros=0,
        unknown_calls=0,
        priced_calls=0,
        disputed_calls=0,
        sequence_state=None,
        judge_health_state=None,
        started_by=started_by,
        kind="watch",
        watch_id=watch_id,
    )


def next_day_row(current: TrialRecord, *, day: str, now: float) -> TrialRecord:
    """The row of ``day``, copied from the watch's current row with fresh figures."""
    return dataclasses.replace(
        current, id=day_row_id(current.watch_id or current.id, day), created_at=now, status="running",
        status_reason=None, ended_at=None, spent_micros=0, known_micros=0, reserved_micros=0, unknown_calls=0,
        priced_calls=0, disputed_calls=0, sequence_state=None, judge_health_state=None,
    )


async def roll_watches(store: Store, now: float) -> list[str]:
    """Start today's row of every active watch whose current row is of an earlier day; the ids
    of the rows started. Conditional in the store, so sidecars rolling at once roll once."""
    day = utc_day(now)
    rolled: list[str] = []
    for watch in await store.list_watches(status="active"):
        if watch.current_day >= day:
            continue
        current = await store.get_trial(watch.current_trial_id)
        if current is None:
            continue
        row = next_day_row(current, day=day, now=now)
        if await store.roll_watch_day(watch.id, day, row):
            rolled.append(row.id)
            log.info("watch %s: day %s started (row %s)", watch.id, day, row.id)
    return rolled
