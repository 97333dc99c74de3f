"""The record a finished case's post-finish hook asks the store to write into the outbox.

Its own module, under :mod:`.records` and :mod:`.watch_records` both (each names it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class OutboxRecord:
    """An effect of a finished case: one record for the uplink's outbox.

    ``record_id`` is the deduplication key downstream; writing the same id
    twice keeps the first (at-least-once delivery, DESIGN.md rule 9).
    """

    record_id: str
    topic: str
    body: str
