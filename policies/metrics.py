"""Several metrics (comparisons with several graders) and their combined verdict.

Each metric has a :class:`MetricSpec`: a name, a direction (``higher`` or
``lower`` is better), a kind (``numeric`` or ``categorical``), and for numeric
metrics an equivalence tolerance in the metric's own units.

A numeric metric is compared on paired cases (cases where both arms have a
score): the per-case difference is *oriented* so that positive always means
"candidate better" (candidate - incumbent when higher is better, incumbent -
candidate when lower is better), and its mean gets the same anytime-valid
confidence sequence and the same :func:`policies.verdict.decide` rules as the
paired judge, with parity 0. A numeric metric where one arm has no score at
all is ``inconclusive`` and marked ``missing_side``.

A categorical metric gets the distribution of each arm and no numeric verdict.

:func:`combine` (categorical metrics are ignored):

1. any metric in ``regression``                    -> ``regression``
2. any metric without a score on one side          -> ``inconclusive``
3. every metric ``equivalent``                     -> ``equivalent``
4. none worse and at least one ``candidate_better`` -> ``candidate_better``
5. otherwise (including no numeric metric at all)  -> ``inconclusive``

"None worse" is read strictly: every metric is ``candidate_better`` or
``equivalent``. An ``inconclusive`` metric has not shown that it is not worse,
so it keeps the combination inconclusive.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from policies import confseq
from policies.bootstrap import Interval
from policies.verdict import Evaluation, VerdictCode, decide

Direction = Literal["higher", "lower"]
Kind = Literal["numeric", "categorical"]


@dataclass(frozen=True, slots=True)
class MetricSpec:
    """A metric's definition. ``design_sd`` is a typical per-case standard
    deviation of the difference, used only to tune the confidence sequence."""

    name: str
    direction: Direction = "higher"
    kind: Kind = "numeric"
    tolerance: float = 0.0
    design_sd: float = 1.0

    def __post_init__(self) -> None:
        if self.direction not in ("higher", "lower"):
            raise ValueError(f"direction must be 'higher' or 'lower', not {self.direction!r}")
        if self.kind not in ("numeric", "categorical"):
            raise ValueError(f"kind must be 'numeric' or 'categorical', not {self.kind!r}")
        if self.tolerance < 0 or self.design_sd <= 0:
            raise ValueError("tolerance must be >= 0 and design_sd > 0")


@dataclass(frozen=True, slots=True)
class MetricResult:
    """One metric's comparison. Numeric fields are on the oriented scale
    (positive = candidate better); categorical results carry distributions
    (sorted ``(category, count)`` pairs) and ``verdict=None``."""

    name: str
    kind: Kind
    direction: Direction
    verdict: VerdictCode | None
    paired: int
    missing_side: bool
    difference: float | None = None
    sequence: Interval | None = None
    candidate_distribution: tuple[tuple[str, int], ...] | None = None
    incumbent_distribution: tuple[tuple[str, int], ...] | None = None


def _distribution(values: Iterable[object]) -> tuple[tuple[str, int], ...]:
    counts = Counter(str(v) for v in values if v is not None)
    return tuple(sorted(counts.items()))


def compare_metric(
    spec: MetricSpec,
    candidate: Sequence[float | str | None],
    incumbent: Sequence[float | str | None],
    *,
    alpha: float = 0.05,
    expected_cases: int = 1000,
    min_cases: int = 20,
) -> MetricResult:
    """Compare one metric over the same cases; ``candidate[i]`` and ``incumbent[i]``
    are case i's scores (None where the grader gave none)."""
    if len(candidate) != len(incumbent):
        raise ValueError("candidate and incumbent must cover the same cases")
    if spec.kind == "categorical":
        return MetricResult(
            spec.name, "categorical", spec.direction, None,
            paired=sum(1 for c, i in zip(candidate, incumbent) if c is not None and i is not None),
            missing_side=all(c is None for c in candidate) or all(i is None for i in incumbent),
            candidate_distribution=_distribution(candidate),
            incumbent_distribution=_distribution(incumbent),
        )
    missing = all(c is None for c in candidate) or all(i is None for i in incumbent)
    sign = 1.0 if spec.direction == "higher" else -1.0
    diffs = [sign * (float(c) - float(i)) for c, i in zip(candidate, incumbent) if c is not None and i is not None]
    n = len(diffs)
    if missing or n == 0:
        return MetricResult(spec.name, "numeric", spec.direction, "inconclusive", n, missing)
    mean = math.fsum(diffs) / n
    var = math.fsum((d - mean) ** 2 for d in diffs) / n
    lo, hi = confseq.bounds(
        n, mean, var, alpha=alpha, expected_cases=expected_cases, design_variance=spec.design_sd**2
    )
    seq = Interval(float(lo), float(hi))
    code = decide(seq.lower, seq.upper, n=n, parity=0.0, tolerance=spec.tolerance, min_cases=min_cases)
    return MetricResult(spec.name, "numeric", spec.direction, code, n, False, mean, seq)


def from_evaluation(name: str, evaluation: Evaluation) -> MetricResult:
    """The paired judge's preference as a metric (scale: win rate - 0.5, higher is better)."""
    seq = Interval(evaluation.sequence.lower - 0.5, evaluation.sequence.upper - 0.5)
    diff = None if evaluation.win_rate is None else evaluation.win_rate - 0.5
    return MetricResult(name, "numeric", "higher", evaluation.verdict, evaluation.n, False, diff, seq)


def combine(results: Iterable[MetricResult]) -> VerdictCode:
    """The combined verdict over numeric metrics; see the module docstring."""
    numeric = [r for r in results if r.kind == "numeric"]
    if not numeric:
        return "inconclusive"
    codes = [r.verdict for r in numeric]
    if "regression" in codes:
        return "regression"
    if any(r.missing_side for r in numeric):
        return "inconclusive"
    if all(c == "equivalent" for c in codes):
        return "equivalent"
    if all(c in ("candidate_better", "equivalent") for c in codes):
        return "candidate_better"
    return "inconclusive"
