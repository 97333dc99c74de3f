"""Judgment scores and case scores.

A *judgment* is one verdict of the paired judge on one case, already mapped from
presentation slots back to the arms: ``candidate`` (+1), ``tie`` (0) or
``incumbent`` (-1), with ``strong`` recording a ``>>`` label. A judge ``error``
(no parsable label, or several) and an ``abstain`` (the judge declined) are *not*
judgments: they have no score, are counted separately, and never enter a mean
(product rule 4: unknown is not zero, an error is never a tie).

A *case score* is the mean of the case's valid judgments: a case judged once
scores -1, 0 or +1; a case audited in both presentation orders scores one of
-1, -0.5, 0, +0.5, +1. A case with no valid judgment has no score and is left
out of every statistic (it is counted as ``unscored``).

Case scores take few distinct values, so the statistics work on *score counts*
(distinct value -> number of cases), built once per evaluation. Values are kept
as exact fractions while aggregating so that 1/3 computed two ways is one key.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import numpy as np

Outcome = Literal["candidate", "incumbent", "tie", "error", "abstain"]

_SCORE: dict[str, int | None] = {"candidate": 1, "tie": 0, "incumbent": -1, "error": None, "abstain": None}


@dataclass(frozen=True, slots=True)
class Judgment:
    """One judge verdict on one case, in arm terms (not slot terms).

    ``strong`` is meaningful only for ``candidate``/``incumbent`` outcomes and
    never changes the score (strength is recorded, not weighted).
    """

    case_id: str
    outcome: Outcome
    strong: bool = False

    def __post_init__(self) -> None:
        if self.outcome not in _SCORE:
            raise ValueError(f"unknown judgment outcome {self.outcome!r}")

    @property
    def score(self) -> int | None:
        """+1, 0 or -1; ``None`` for an error or abstention."""
        return _SCORE[self.outcome]


def judgment_score(outcome: Outcome) -> int | None:
    """The score of one outcome: +1 candidate, 0 tie, -1 incumbent, None otherwise."""
    if outcome not in _SCORE:
        raise ValueError(f"unknown judgment outcome {outcome!r}")
    return _SCORE[outcome]


@dataclass(frozen=True, slots=True)
class CaseScore:
    """A case's score (``None`` when it has no valid judgment) and its tallies."""

    case_id: str
    score: float | None
    judgments: int
    strong: int
    errors: int
    abstentions: int


@dataclass(frozen=True, slots=True)
class ScoreCounts:
    """Distinct case scores and how many cases hold each, sorted by value.

    This is the whole evidence the verdict needs; it is independent of the
    order in which cases arrived.
    """

    values: tuple[float, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(self.counts):
            raise ValueError("values and counts differ in length")
        if any(c < 0 for c in self.counts):
            raise ValueError("counts cannot be negative")
        if list(self.values) != sorted(set(self.values)):
            raise ValueError("values must be distinct and sorted")

    @property
    def n(self) -> int:
        """Number of scored cases."""
        return sum(self.counts)

    def as_dict(self) -> dict[float, int]:
        return dict(zip(self.values, self.counts))


@dataclass(frozen=True, slots=True)
class ScoreSummary:
    """Per-case scores plus the counts the verdict reads.

    ``cases`` is sorted by case id. ``errors`` and ``abstentions`` count
    judgments (not cases); ``unscored_cases`` counts cases with no valid
    judgment.
    """

    cases: tuple[CaseScore, ...]
    counts: ScoreCounts
    judgments: int
    errors: int
    abstentions: int
    unscored_cases: int


def summarize(judgments: Iterable[Judgment]) -> ScoreSummary:
    """Group judgments by case, score each case, and aggregate to counts."""
    per_case: dict[str, list[Judgment]] = {}
    for j in judgments:
        per_case.setdefault(j.case_id, []).append(j)
    cases: list[CaseScore] = []
    exact: dict[Fraction, int] = {}
    total_valid = total_err = total_abs = unscored = 0
    for case_id in sorted(per_case):
        items = per_case[case_id]
        valid = [j.score for j in items if j.score is not None]
        errors = sum(1 for j in items if j.outcome == "error")
        abst = sum(1 for j in items if j.outcome == "abstain")
        strong = sum(1 for j in items if j.strong and j.score not in (None, 0))
        total_valid += len(valid)
        total_err += errors
        total_abs += abst
        if valid:
            value = Fraction(sum(valid), len(valid))
            exact[value] = exact.get(value, 0) + 1
            cases.append(CaseScore(case_id, float(value), len(valid), strong, errors, abst))
        else:
            unscored += 1
            cases.append(CaseScore(case_id, None, 0, 0, errors, abst))
    keys = sorted(exact)
    counts = ScoreCounts(tuple(float(k) for k in keys), tuple(exact[k] for k in keys))
    return ScoreSummary(tuple(cases), counts, total_valid, total_err, total_abs, unscored)


def aggregate(case_scores: Iterable[float] | Mapping[float, int] | ScoreCounts) -> ScoreCounts:
    """Aggregate case scores (a sequence, or a ``{value: count}`` mapping) to counts.

    Values are rounded to 12 decimals before grouping so that floating
    representations of the same fraction fall together. ``None`` and NaN are
    refused: an unscored case must be left out by the caller, not passed in.
    """
    if isinstance(case_scores, ScoreCounts):
        return case_scores
    if isinstance(case_scores, np.ndarray):
        return _aggregate_array(case_scores)
    acc: dict[float, int] = {}
    if isinstance(case_scores, Mapping):
        pairs: Iterable[tuple[float, int]] = case_scores.items()
    else:
        # Equal values counted first (in C): the loop below then runs once per distinct value.
        # Python's == is exact, so values counted together have the same float() and key.
        items = case_scores if isinstance(case_scores, (list, tuple)) else list(case_scores)
        try:
            pairs = Counter(items).items()
        except TypeError:  # an unhashable item: float() below refuses it as before
            pairs = ((v, 1) for v in items)
    for value, count in pairs:
        v = float(value)
        if v != v:
            raise ValueError("a case score cannot be NaN")
        if int(count) != count or count < 0:
            raise ValueError("counts must be non-negative integers")
        if count:
            key = round(v, 12) + 0.0  # + 0.0 folds -0.0 into 0.0
            acc[key] = acc.get(key, 0) + int(count)
    keys = sorted(acc)
    return ScoreCounts(tuple(keys), tuple(acc[k] for k in keys))


def _aggregate_array(x: np.ndarray) -> ScoreCounts:
    """Vectorised :func:`aggregate` for a numpy array of case scores (one pass, sort-based)."""
    arr = np.asarray(x, dtype=np.float64).ravel()
    if np.isnan(arr).any():
        raise ValueError("a case score cannot be NaN")
    values, counts = np.unique(np.round(arr, 12) + 0.0, return_counts=True)
    return ScoreCounts(tuple(float(v) for v in values), tuple(int(c) for c in counts))
