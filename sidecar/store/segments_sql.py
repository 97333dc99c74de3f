"""Per-segment evidence (issue 27): the statements, once for both dialects (:mod:`sidecar.store.dialect`).

A trial tracks at most ``segment_cap`` segment values (``trial_segments``, one row each); a
case keeps its keys (``cases.segment_keys``, JSON: tracked keys, and ``other`` when any of its
values was beyond the cap), assigned by :func:`policies.segments.assign` in the transaction
that claims it. So the rows a trial adds for its segments are bounded by its cap, whatever
values its traffic carries, and nothing here holds content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from policies.segments import assign
from sidecar.store.records import CaseStart

TRACKED = "SELECT key, segment, value FROM trial_segments WHERE trial_id = ? ORDER BY ordinal"
TRACKED_KEYS = "SELECT key FROM trial_segments WHERE trial_id = ?"
#: trial id, key, segment, value, trial id: a value takes the next ordinal of its trial.
TRACK = (
    "INSERT INTO trial_segments (trial_id, key, segment, value, ordinal) "
    "SELECT ?, ?, ?, ?, COALESCE(MAX(ordinal), 0) + 1 FROM trial_segments WHERE trial_id = ? "
    "ON CONFLICT DO NOTHING"
)
SET_KEYS = "UPDATE cases SET segment_keys = ? WHERE id = ?"
#: The trial row, locked while a new value is tracked, so two claims cannot pass the cap together
#: (PostgreSQL; SQLite's write lock does it there).
LOCK_TRIAL_PG = "SELECT id FROM trials WHERE id = $1 FOR NO KEY UPDATE"
#: Scored cases in scoring order with their keys and paired figures (the per-segment fold's input).
SCORED = (
    "SELECT score_seq, score, segment_keys, candidate_cost_micros AS cc, candidate_cost_coverage AS ccv, "
    "incumbent_cost_micros AS ic, incumbent_cost_coverage AS icv, candidate_latency_ms AS cl, "
    "incumbent_latency_ms AS il FROM cases WHERE trial_id = ? AND score_seq IS NOT NULL ORDER BY score_seq"
)
#: Judged cases per key (sampling's view of which tracked values are short of their minimum).
KEYS_OF_JUDGED = "SELECT segment_keys FROM cases WHERE trial_id = ? AND score_seq IS NOT NULL"


@dataclass(frozen=True, slots=True)
class SegmentCase:
    """One scored case as the per-segment fold reads it: its scoring number, score, keys and
    paired row (:data:`policies.paired.PairedRow`)."""

    seq: int
    score: float
    keys: tuple[str, ...]
    paired: tuple[Any, ...]


def keys_text(keys: tuple[str, ...]) -> str | None:
    return None if not keys else json.dumps(list(keys), separators=(",", ":"))


def parse_keys(text: str | None) -> tuple[str, ...]:
    if not text:
        return ()
    try:
        data = json.loads(text)
    except ValueError:
        return ()
    return tuple(str(k) for k in data) if isinstance(data, list) else ()


def segment_case(r: Mapping[str, Any]) -> SegmentCase:
    return SegmentCase(int(r["score_seq"]), float(r["score"]), parse_keys(r["segment_keys"]),
                       (r["cc"], r["ccv"], r["ic"], r["icv"], r["cl"], r["il"]))


def plan(case: CaseStart, tracked: set[str]) -> tuple[tuple[str, ...], tuple[tuple[str, str, str], ...]]:
    """The case's keys and the values it newly tracks, given the keys tracked now."""
    return assign(case.segment_values, tracked, case.segment_cap)
