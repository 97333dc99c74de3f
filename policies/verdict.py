"""The one evaluation a trial view calls: reported interval, decision interval, verdict.

:func:`evaluate` decides from the anytime-valid empirical-Bernstein confidence
sequence (:mod:`policies.confseq`), folded into the trial's running
intersection (:mod:`policies.sequence`), never from the bootstrap: the
bootstrap interval is the *reported* interval, and a fixed-n interval re-checked
after every case would reach a wrong decision far more often than alpha
(docs/statistics.md). The verdict rule itself is :mod:`policies.decision`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from policies import confseq
from policies.bootstrap import MIN_BOOTSTRAP_CASES, Interval, bootstrap_interval
from policies.decision import VERDICT_CODES, VerdictCode, decide
from policies.scores import ScoreCounts, aggregate
from policies.sequence import SequenceState, fold
from policies.stream import StreamFold

__all__ = [
    "VERDICT_CODES",
    "Evaluation",
    "SequenceState",
    "VerdictCode",
    "decide",
    "evaluate",
    "sequence_bounds",
    "win_rate",
]

SMALL_SAMPLE = "small sample"
NO_SPREAD = (
    "no observed spread: every scored case has the same score, so resampling cannot show any "
    "uncertainty; no 95% interval is shown (the decision interval still is)"
)
CONTRADICTED = (
    "the current confidence interval does not overlap the interval kept so far: the evidence "
    "contradicts itself (traffic changed, or a rare miss); the kept interval restarted and any "
    "standing decision was withdrawn"
)


def win_rate(mean_score: float) -> float:
    """Win rate = (1 + mean score) / 2."""
    return (1.0 + mean_score) / 2.0


@dataclass(frozen=True, slots=True)
class Evaluation:
    """What a trial view shows. All intervals are on the win-rate scale [0, 1].

    ``interval`` is the reported bootstrap interval: ``None`` with
    ``small_sample`` set below 20 scored cases, and ``None`` with
    ``interval_note`` set when every case has the same score (a zero-width
    interval would read as certainty). ``sequence`` is the interval the
    ``verdict`` is decided from: the running intersection of the confidence
    sequence over every look folded into ``sequence_state`` (the whole of [0, 1]
    before the first case). ``sequence_now`` is this look's confidence-sequence
    interval alone. ``sequence_state`` is what the caller persists and passes
    back as ``prior``. ``contradicted`` is True when this look emptied the kept
    intersection (see :mod:`policies.sequence`). ``note`` is ``"small sample"``,
    the contradiction note, or ``None``.
    """

    n: int
    mean_score: float | None
    win_rate: float | None
    interval: Interval | None
    small_sample: bool
    sequence: Interval
    verdict: VerdictCode
    delta: float
    alpha: float
    expected_cases: int
    min_cases: int
    note: str | None
    sequence_now: Interval
    sequence_state: SequenceState
    contradicted: bool
    interval_note: str | None
    method: str = "empirical_bernstein"


def sequence_bounds(counts: ScoreCounts, *, alpha: float, expected_cases: int) -> Interval:
    """The confidence-sequence interval for the mean *score* at this look (scale [-1, 1], clipped)."""
    n = counts.n
    if n == 0:
        return Interval(-1.0, 1.0)
    values = np.asarray(counts.values, dtype=np.float64)
    weights = np.asarray(counts.counts, dtype=np.float64)
    mean = float(weights @ values) / n
    q = float(weights @ (values * values))
    lo, hi = confseq.eb_bounds(n, mean, q, alpha=alpha, expected_cases=expected_cases)
    return Interval(max(-1.0, float(lo)), min(1.0, float(hi)))


def evaluate(
    case_scores: Iterable[float] | Mapping[float, int] | ScoreCounts,
    *,
    identity: str,
    expected_cases: int = 1000,
    delta: float = 0.05,
    min_cases: int = 20,
    alpha: float = 0.05,
    prior: SequenceState | None = None,
    stream: StreamFold | None = None,
) -> Evaluation:
    """Evaluate paired-judge evidence: case scores in [-1, 1] (sequence or ``{value: count}``).

    ``identity`` seeds the bootstrap (see ``policies.bootstrap.bootstrap_identity``).
    ``delta`` is the equivalence tolerance on the win-rate scale. Pure and
    deterministic: the same evidence, parameters and ``prior`` give the same
    Evaluation.

    The running intersection (contract for the caller):

    * ``prior`` is the ``sequence_state`` of an earlier evaluation of the same
      trial with the same ``alpha``, ``expected_cases`` and ``delta`` (other
      settings raise ``ValueError``); ``None`` means no history.
    * Persist the returned ``sequence_state`` with the trial *before or together
      with* showing or acting on the verdict (e.g. in the transaction that
      records a case, or on every view). A verdict shown from a state that was
      not persisted may not stand after a restart. Storing after every
      evaluation is always correct; skipping some evaluations only makes the
      intersection less tight, never invalid.
    * Evaluating the same counts twice with the returned state is idempotent:
      the state and verdict do not change. Looks may even arrive out of order
      (a stale read with fewer cases): the state's ``n`` is the largest count
      folded in, and a stale look only intersects with a wider interval. With
      several writers, keep the state with the larger ``n``.
    * If the intersection becomes empty (this look's interval does not overlap
      the kept one), the evidence contradicts itself: the state restarts from
      this look's interval, any standing decision is withdrawn, ``restarts``
      grows, and the evaluation has ``contradicted=True`` and a note.

    With ``stream`` (a trial deciding on the betting sequence, :mod:`policies.stream`), the
    decision interval, verdict and kept state are those of the stream, folded case by case
    in the store's scoring order, and ``prior`` is not used; the counts still give n, the
    mean and the reported interval.
    """
    if not 0 < delta < 0.5:
        raise ValueError("delta must be in (0, 0.5)")
    counts = aggregate(case_scores)
    if counts.values and (counts.values[0] < -1 or counts.values[-1] > 1):
        raise ValueError("case scores must lie in [-1, 1]")
    n = counts.n
    mean = None if n == 0 else math.fsum(v * c for v, c in zip(counts.values, counts.counts)) / n
    boot = bootstrap_interval(counts, identity=identity, alpha=alpha)
    interval_note = None
    if boot is not None and boot.lower == boot.upper:
        boot, interval_note = None, NO_SPREAD
    reported = None if boot is None else Interval(win_rate(boot.lower), win_rate(boot.upper))
    if stream is not None:
        kept = stream.state.sequence or SequenceState(0, 0.0, 1.0, "inconclusive", None, 0, alpha, expected_cases,
                                                      delta)
        now = Interval(*stream.state.now)
        note = CONTRADICTED if stream.contradicted else SMALL_SAMPLE if n < MIN_BOOTSTRAP_CASES else None
        return Evaluation(
            n=n, mean_score=mean, win_rate=None if mean is None else win_rate(mean), interval=reported,
            small_sample=n < MIN_BOOTSTRAP_CASES, sequence=Interval(kept.lower, kept.upper), verdict=kept.decision,
            delta=delta, alpha=alpha, expected_cases=expected_cases, min_cases=min_cases, note=note,
            sequence_now=now, sequence_state=kept, contradicted=stream.contradicted, interval_note=interval_note,
            method="betting",
        )
    seq_score = sequence_bounds(counts, alpha=alpha, expected_cases=expected_cases)
    now = Interval(win_rate(seq_score.lower), win_rate(seq_score.upper))
    folded = fold(
        prior,
        n=n,
        lower=now.lower,
        upper=now.upper,
        parity=0.5,
        tolerance=delta,
        min_cases=min_cases,
        alpha=alpha,
        expected_cases=expected_cases,
    )
    small = n < MIN_BOOTSTRAP_CASES
    note = CONTRADICTED if folded.contradicted else SMALL_SAMPLE if small else None
    return Evaluation(
        n=n,
        mean_score=mean,
        win_rate=None if mean is None else win_rate(mean),
        interval=reported,
        small_sample=small,
        sequence=Interval(folded.state.lower, folded.state.upper),
        verdict=folded.verdict,
        delta=delta,
        alpha=alpha,
        expected_cases=expected_cases,
        min_cases=min_cases,
        note=note,
        sequence_now=now,
        sequence_state=folded.state,
        contradicted=folded.contradicted,
        interval_note=interval_note,
    )


def bounds_path(
    case_scores: Sequence[float], *, alpha: float = 0.05, expected_cases: int = 1000, points: int = 120,
) -> list[tuple[int, float, float]]:
    """The decision bounds on the win-rate scale after each judged case, in the order given
    (the order cases finished), as ``(n, lower, upper)`` at up to ``points`` evenly spaced
    case counts, the last always included.

    Each point is the running intersection of the confidence sequence had the trial been
    looked at after every case (the same bounds :func:`sequence_bounds` gives at one look);
    where the intersection would empty, it starts again from that case, as
    :func:`policies.sequence.path` does. A trial folds at its own looks, so its kept
    bounds are at least as wide: this is the every-case view of the same evidence."""
    arr = np.asarray(case_scores, dtype=np.float64)
    if arr.size == 0:
        return []
    lo, hi = confseq.running_eb_bounds(arr, alpha=alpha, expected_cases=expected_cases)
    lo = (np.clip(lo, -1.0, 1.0) + 1.0) / 2.0
    hi = (np.clip(hi, -1.0, 1.0) + 1.0) / 2.0
    run_lo, run_hi = np.empty_like(lo), np.empty_like(hi)
    cur_lo, cur_hi = 0.0, 1.0
    for i in range(arr.size):  # one pass; restarts are rare
        cur_lo, cur_hi = max(cur_lo, float(lo[i])), min(cur_hi, float(hi[i]))
        if cur_lo > cur_hi:
            cur_lo, cur_hi = float(lo[i]), float(hi[i])
        run_lo[i], run_hi[i] = cur_lo, cur_hi
    picks = np.unique(np.linspace(0, arr.size - 1, min(points, arr.size)).round().astype(np.int64))
    return [(int(i) + 1, float(run_lo[i]), float(run_hi[i])) for i in picks]
