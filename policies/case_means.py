"""Per-case means of paired repetitions: the one computation behind a comparison group's
``results[].estimate`` and the evidence comparison's ``mean_delta`` (issue 24, items 9 and 12).
Pure: plain data in, plain data out.

A *pair* is one repetition both arms completed and scored on the same metric:
``(item id, revision id, repetition, baseline value, candidate value)``. A repetition only one
arm has (a failed call, a repetition not run) is not a pair, so it is never averaged in, and
nothing is invented for it.

- **Per-case means**: a case is an item revision; its matching repetitions collapse to each
  arm's mean over those repetitions, and the case's delta is candidate - baseline of the two.
- **Estimate** (``mean_delta``): the mean of the case deltas — every case weighs the same,
  whatever its number of repetitions.
- **Per-case ranges**: the smallest and largest value of each arm's matched repetitions in a
  case (within-case variation; equal ends with one repetition).
- **Delta spread**: the population standard deviation of the paired case deltas.
- **Run spread** (:func:`run_spread`): the population standard deviation of one arm's case
  means over that arm's own scored repetitions (its own observed population, paired or not).

Sums are exact-rounded (``math.fsum``) and cases are taken in key order, so two callers with
the same pairs get the same floats.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: (item id, revision id, repetition, baseline value, candidate value)
Pair = tuple[str, str, int, float, float]
#: (item id, revision id, repetition, value) of one arm
Observation = tuple[str, str, int, float]


@dataclass(frozen=True, slots=True)
class PairedCase:
    """One item revision: its matched repetitions, each arm's mean and range over them."""

    item_id: str
    revision_id: str
    repetitions: int
    baseline_mean: float
    candidate_mean: float
    baseline_range: tuple[float, float]
    candidate_range: tuple[float, float]
    #: Candidate - baseline, in the metric's units.
    delta: float


@dataclass(frozen=True, slots=True)
class PairedCases:
    """Every paired case (in key order) and what is read from them; None where there is none."""

    cases: tuple[PairedCase, ...]
    pairs: int
    mean_delta: float | None
    baseline_mean: float | None
    candidate_mean: float | None
    delta_spread: float | None

    @property
    def deltas(self) -> list[float]:
        return [c.delta for c in self.cases]


def _mean(values: list[float]) -> float:
    return math.fsum(values) / len(values)


def population_sd(values: Iterable[float]) -> float | None:
    """The population standard deviation (divides by n); None without a value."""
    xs = list(values)
    if not xs:
        return None
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / len(xs))


def paired_cases(pairs: Iterable[Pair]) -> PairedCases:
    """Collapse matched repetitions to per-case means, then average the cases (module docs).
    A repetition given twice for one case is an error: pass one value per arm and repetition."""
    by_case: dict[tuple[str, str], dict[int, tuple[float, float]]] = {}
    n = 0
    for item, revision, rep, base, cand in pairs:
        reps = by_case.setdefault((item, revision), {})
        if rep in reps:
            raise ValueError(f"case {(item, revision)}: repetition {rep} paired twice")
        if not (math.isfinite(base) and math.isfinite(cand)):
            raise ValueError(f"case {(item, revision)}: values must be finite")
        reps[rep] = (float(base), float(cand))
        n += 1
    cases: list[PairedCase] = []
    for (item, revision), reps in sorted(by_case.items()):
        b = [v[0] for _, v in sorted(reps.items())]
        c = [v[1] for _, v in sorted(reps.items())]
        cases.append(PairedCase(item, revision, len(reps), _mean(b), _mean(c), (min(b), max(b)), (min(c), max(c)),
                                _mean(c) - _mean(b)))
    if not cases:
        return PairedCases((), 0, None, None, None, None)
    return PairedCases(tuple(cases), n, _mean([x.delta for x in cases]), _mean([x.baseline_mean for x in cases]),
                       _mean([x.candidate_mean for x in cases]), population_sd(x.delta for x in cases))


def case_means(observations: Iterable[Observation]) -> list[float]:
    """One arm's case means over its own scored repetitions, in key order."""
    by_case: dict[tuple[str, str], list[float]] = {}
    for item, revision, _, value in observations:
        by_case.setdefault((item, revision), []).append(float(value))
    return [_mean(v) for _, v in sorted(by_case.items())]


def run_spread(observations: Iterable[Observation]) -> float | None:
    """The population standard deviation of one arm's case means; None without a case."""
    return population_sd(case_means(observations))
