"""Per-segment verdicts of a trial (issue 27): each tracked segment value read as its own trial.

Each tracked value (and the pooled ``other``) is decided by the *same* function and settings
as the overall verdict (:mod:`sidecar.trials.fold`): its judged cases, in the trial's scoring
order, folded case by case into the betting confidence sequence
(:func:`policies.stream.fold_cases`) and evaluated (:func:`policies.verdict.evaluate`), with
the trial's tolerance, minimum cases and expected cases — at the level
:func:`policies.segment_alpha.segment_alpha` gives for ``segment_cap + 1`` groups. Splitting
the trial's level over every group the trial *can* track (Bonferroni, fixed at creation)
keeps the chance that any segment reads wrong within the trial's level, under continuous
looks and whatever the dependence between segments: family-wise error control. The overall
verdict is untouched.

A segment's stream is a function of the ordered cases alone, so it is folded from its first
case at every read instead of being kept: nothing per segment is stored but the case's keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from policies.paired import paired_figures
from policies.segment_alpha import segment_alpha
from policies.segments import OTHER
from policies.wording import TRAFFIC_WORDING
from sidecar.ingest.routing import Favour
from sidecar.ingest.segment_keys import exchange_values
from sidecar.ingest.wire import Exchange
from sidecar.store.base import ReadModel
from sidecar.store.records import TrialRecord
from sidecar.store.segments_sql import SegmentCase
from sidecar.trials.fold import ALPHA

if TYPE_CHECKING:
    from policies.verdict import Evaluation

CONTROL = "family-wise"


def segments_of(record: TrialRecord) -> tuple[str, ...]:
    """The segments ``record`` is read by (none for a trial created without them)."""
    try:
        data = json.loads(record.segments or "[]")
    except ValueError:
        return ()
    return tuple(str(s) for s in data) if isinstance(data, list) else ()


def case_segments(record: TrialRecord, exchange: Exchange) -> tuple[tuple[str, str], ...]:
    """The (segment, value) pairs of ``exchange`` for the segments ``record`` is read by."""
    segments = segments_of(record)
    return exchange_values(segments, exchange) if segments else ()


async def favour_of(store: ReadModel, record: TrialRecord) -> Favour | None:
    """Sampling's favour of ``record``'s segments below ``segment_min_cases`` (None: none set)."""
    segments = segments_of(record)
    if record.segment_min_cases is None or not segments:
        return None
    tracked = frozenset(key for key, _, _ in await store.tracked_segments(record.id))
    judged = await store.judged_keys(record.id)
    short = frozenset(k for k in tracked if judged.get(k, 0) < record.segment_min_cases)
    return Favour(segments, short, tracked, len(tracked) < record.segment_cap)


async def favours(store: ReadModel, records: Sequence[TrialRecord]) -> dict[str, Favour]:
    """:func:`favour_of` for each running trial that sets a minimum. Not for a trial run at the
    control plane: its cases are judged (and its values tracked) at the collector, so here no
    value would ever reach its minimum and every exchange would be favoured; its sample rate
    alone decides."""
    out: dict[str, Favour] = {}
    for r in records:
        if r.status == "running" and r.segment_min_cases is not None and r.execution_site != "control_plane":
            f = await favour_of(store, r)
            if f is not None:
                out[r.id] = f
    return out


def per_segment_alpha(record: TrialRecord) -> float:
    """The level each segment value of ``record`` is read at (its cap plus ``other``)."""
    return segment_alpha(ALPHA, record.segment_cap + 1)


@dataclass(frozen=True, slots=True)
class SegmentResult:
    key: str
    segment: str
    value: str
    evaluation: Evaluation
    paired: Mapping[str, Any]


def evaluate_segments(
    record: TrialRecord, tracked: Sequence[tuple[str, str, str]], cases: Sequence[SegmentCase]
) -> list[SegmentResult]:
    """Every tracked value's verdict (then ``other``'s, when any case was pooled), from the
    trial's scored cases in scoring order."""
    # The statistics (numpy) are imported on the first read, not with the sidecar (start-up cost).
    from policies.bootstrap import bootstrap_identity
    from policies.stream import fold_cases
    from policies.verdict import evaluate

    alpha = per_segment_alpha(record)
    groups: dict[str, list[SegmentCase]] = {key: [] for key, _, _ in tracked}
    for case in cases:
        for key in case.keys:
            groups.setdefault(key, []).append(case)
    names = {key: (segment, value) for key, segment, value in tracked}
    order = [key for key, _, _ in tracked] + ([OTHER] if groups.get(OTHER) else [])
    out = []
    for key in order:
        group = groups.get(key, [])
        stream = [(i + 1, c.score) for i, c in enumerate(group)]
        folded = fold_cases(None, stream, alpha=alpha, tolerance=record.delta, min_cases=record.min_cases,
                            expected_cases=record.expected_cases)
        counts: dict[float, int] = {}
        for c in group:
            counts[c.score] = counts.get(c.score, 0) + 1
        ev = evaluate(counts, identity=bootstrap_identity(record.id + "/" + key, record.judge_version_id),
                      expected_cases=record.expected_cases, delta=record.delta, min_cases=record.min_cases,
                      alpha=alpha, stream=folded)
        segment, value = names.get(key, (OTHER, OTHER))
        out.append(SegmentResult(key, segment, value, ev, paired_figures([c.paired for c in group])))
    return out


def segment_word(code: str) -> str:
    """Adoptable / Rejected / Collecting: a segment's verdict in the traffic words."""
    return TRAFFIC_WORDING[code]


def rejected_keys(results: Sequence[SegmentResult]) -> list[str]:
    return [r.key for r in results if segment_word(r.evaluation.verdict) == "Rejected"]


def segments_view(record: TrialRecord, results: Sequence[SegmentResult], overall_word: str) -> dict[str, Any] | None:
    """The ``segments`` block of a trial view (None: the trial is read by no segment)."""
    by = segments_of(record)
    if not by:
        return None
    rejected = rejected_keys(results)
    values = []
    pooled = 0
    for r in results:
        ev = r.evaluation
        if r.key == OTHER:
            pooled = ev.n
        values.append({
            "segment": r.segment, "value": r.value, "key": r.key, "judged": ev.n, "win_rate": ev.win_rate,
            "lower": ev.sequence.lower, "upper": ev.sequence.upper, "code": ev.verdict,
            "verdict": segment_word(ev.verdict), "cost_ratio": r.paired.get("cost_ratio"),
            "latency_ratio": r.paired.get("latency_ratio"),
        })
    return {
        "by": list(by),
        "cap": record.segment_cap,
        "min_cases": record.segment_min_cases,
        "per_segment_alpha": per_segment_alpha(record),
        "control": CONTROL,
        "rejected": rejected,
        "values": values,
        "pooled_other": pooled,
        "summary": summary_words(overall_word, rejected),
    }


def summary_words(overall_word: str, rejected: Sequence[str]) -> str:
    """The trial's verdict with its rejected segments, in words ("Adoptable overall; Rejected on
    tag:tier=reasoning")."""
    if not rejected:
        return f"{overall_word} overall; no segment rejected"
    return f"{overall_word} overall; Rejected on {', '.join(rejected)}"
