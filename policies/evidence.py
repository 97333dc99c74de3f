"""Comparing evidence: two experiments, or two grading passes of one (issue 13, item 5).

Pure: plain data in, plain data out; no I/O, no clock. :func:`compare_evidence` takes two
:class:`Side` values (the *baseline* and the *candidate*: each one run of one arm, as one
grading pass, with one :class:`Attempt` per generation) and returns an
:class:`EvidenceComparison`.

**Pairing.** An attempt's key is ``(item id, revision id, repetition)``. Two attempts pair
only when their keys are equal: a revised item has a new revision id, so its new content
never pairs with its old self, and a repetition one side ran and the other did not pairs
with nothing. Every attempt without a partner is *listed* in its side's ``unmatched``, with
the reason (``item_missing``, ``revision_differs``, ``repetition_missing``), and enters no
paired figure. So on each side, pairs + unmatched = attempts. One side holds at most one
attempt per key (pass a retry, not also the attempt it retried).

**Denominators, never merged.** Each is reported per side, side by side:

* generation reliability = completed / planned generations. ``failed`` and
  ``invocation_indeterminate`` attempts are not completed (a failed generation is never
  counted as a loss: it has no score at all); planned generations never attempted count
  against reliability too;
* grading completion = completed attempts graded on every metric the side grades (each
  metric scored or not applicable) / completed attempts;
* per-grader coverage = scored / (eligible - not applicable), eligible being the completed
  attempts (only a completed generation has an answer to grade: scores on any other attempt
  are ignored). A metric missing from a completed attempt counts as not scored;
* full-run spend: generation (every attempt's cost, matched or not, completed or not, and the
  attempts a linked retry superseded) plus every grading pass and stage (``Side.grading_costs``:
  judge calls included), each part and the total a :class:`policies.money.Cost`
  (``known_micros``, ``coverage``, ``basis`` together). An unknown cost is never zero: one
  unknown part makes the side ``partial`` (every part unknown: ``unknown``), and
  ``known_micros`` is the sum of what is known;
* paired quality: per metric, over pairs where both attempts completed and both scored;
* paired latency: over pairs where both attempts completed with a latency.

**Per metric** (a row for every metric id on either side): the paired delta is candidate -
baseline in the metric's own units. Matching repetitions collapse to per-case means before
cases are averaged (:func:`policies.case_means.paired_cases`, the computation a comparison
group's results use too), with each side's run spread, the delta spread and per-case ranges.
The 95% interval is the project's case-cluster bootstrap (:func:`policies.bootstrap.bootstrap_interval`: whole cases, 2,000
resamples) over the case deltas, expanded for small samples (percentiles at
:func:`policies.corpus_verdict.expanded_alpha`, issue 23 item 7), seeded from :func:`comparison_identity` (the two runs'
ids, their grading passes and the metric id), so the same selection gives the same interval.
The directional result (mean delta, interval, reading) is withheld, with the reason, when:

* ``metric_missing`` — only one side has the metric;
* ``versions_differ`` — the sides graded it with different versions (or a side with several);
* ``directions_differ`` — the sides disagree on the direction;
* ``categorical`` — no numeric winner: each side's distribution over the paired cases;
* ``no_paired_scores`` — no pair has both scores;
* ``small_sample`` — fewer than 20 distinct paired cases: the mean delta, no interval;
* ``run_in_progress`` — a side's run has not ended (``Side.complete``): a fixed-sample interval
  read after every item is not a 95% interval, so only the mean delta so far (issue 23, item 3);
* ``no_spread`` — every case has the same delta: a bootstrap would be a zero-width "95%"
  interval, which is never shown (issue 23, item 6; the metric's bounds are not known here).

The reading says which side the interval favours under the metric's direction
(``candidate_ahead``, ``baseline_ahead``) or ``no_difference_shown`` when it holds zero.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from policies.bootstrap import DEFAULT_RESAMPLES, MIN_BOOTSTRAP_CASES, Interval, bootstrap_interval
from policies.case_means import PairedCase, paired_cases, run_spread
from policies.corpus_verdict import expanded_alpha
from policies.graders import Direction
from policies.money import Cost, add_costs

Status = Literal["completed", "failed", "invocation_indeterminate"]
STATUSES: tuple[str, ...] = ("completed", "failed", "invocation_indeterminate")
UnmatchedReason = Literal["item_missing", "revision_differs", "repetition_missing"]
Withheld = Literal[
    "metric_missing", "versions_differ", "directions_differ", "categorical", "no_paired_scores", "small_sample",
    "run_in_progress", "no_spread",
]
Reading = Literal["candidate_ahead", "baseline_ahead", "no_difference_shown"]
#: An attempt's pairing key: (item id, revision id, repetition).
Key = tuple[str, str, int]


@dataclass(frozen=True, slots=True)
class MetricScore:
    """One metric's grade of one attempt, with the version and direction it was graded by.

    ``value`` is a number (``higher``/``lower``) or a category (``categorical``); ``None``
    means not scored, or not applicable when ``not_applicable`` (e.g. an exact match on an
    item without an expected output): never a pass, never a fail."""

    metric_id: str
    metric_version: str
    direction: Direction
    value: float | str | None = None
    not_applicable: bool = False

    def __post_init__(self) -> None:
        if self.direction not in ("higher", "lower", "categorical"):
            raise ValueError(f"direction must be higher, lower or categorical, not {self.direction!r}")
        if self.value is None:
            return
        if self.not_applicable:
            raise ValueError(f"metric {self.metric_id!r}: a not-applicable grade has no value")
        if self.direction == "categorical":
            if not isinstance(self.value, str):
                raise ValueError(f"metric {self.metric_id!r} is categorical: its value must be a category string")
        elif isinstance(self.value, str) or not math.isfinite(self.value):
            raise ValueError(f"metric {self.metric_id!r} is {self.direction}: its value must be a finite number")

    @property
    def scored(self) -> bool:
        return self.value is not None


@dataclass(frozen=True, slots=True)
class Attempt:
    """One generation attempt of a run, as the experiment runner stores it."""

    group_id: str
    arm: str
    item_id: str
    revision_id: str
    repetition: int
    status: Status
    latency_ms: float | None
    cost: Cost
    scores: tuple[MetricScore, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {', '.join(STATUSES)}, not {self.status!r}")
        if self.repetition < 0:
            raise ValueError("repetition cannot be negative")
        if self.latency_ms is not None and not (math.isfinite(self.latency_ms) and self.latency_ms >= 0):
            raise ValueError("latency_ms must be a finite non-negative number")
        ids = [s.metric_id for s in self.scores]
        if len(ids) != len(set(ids)):
            raise ValueError(f"attempt {self.key}: a metric is graded twice")

    @property
    def key(self) -> Key:
        return (self.item_id, self.revision_id, self.repetition)

    def score(self, metric_id: str) -> MetricScore | None:
        return next((s for s in self.scores if s.metric_id == metric_id), None)


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a comparison: one run (one arm of one group) as graded by one pass.

    ``planned_generations`` is what the run planned (items x repetitions); attempts never
    exceed it, and at most one attempt has each key."""

    run_id: str
    planned_generations: int
    attempts: tuple[Attempt, ...]
    grading_pass: str | None = None
    #: Whether the run has ended. Before that no direction is read (see ``run_in_progress``).
    complete: bool = True
    #: The rest of the run's spend (issue 24, item 11): attempts superseded by a linked retry,
    #: and every grading pass and stage (judge calls, validator fees), failed work included.
    superseded_costs: tuple[Cost, ...] = ()
    grading_costs: tuple[Cost, ...] = ()

    def __post_init__(self) -> None:
        if len(self.attempts) > self.planned_generations:
            raise ValueError(f"run {self.run_id!r}: {len(self.attempts)} attempts, "
                             f"but only {self.planned_generations} generations planned")
        runs = {(a.group_id, a.arm) for a in self.attempts}
        if len(runs) > 1:
            raise ValueError(f"run {self.run_id!r}: attempts of several arms {sorted(runs)}; a side is one run")
        seen: set[Key] = set()
        for a in self.attempts:
            if a.key in seen:
                raise ValueError(f"run {self.run_id!r}: two attempts for {a.key}; pass one attempt per key")
            seen.add(a.key)


@dataclass(frozen=True, slots=True)
class Unmatched:
    item_id: str
    revision_id: str
    repetition: int
    reason: UnmatchedReason


@dataclass(frozen=True, slots=True)
class Matching:
    """Pairs of (baseline, candidate) attempts with equal keys, sorted by key, and the rest."""

    pairs: tuple[tuple[Attempt, Attempt], ...]
    unmatched_baseline: tuple[Unmatched, ...]
    unmatched_candidate: tuple[Unmatched, ...]


@dataclass(frozen=True, slots=True)
class Ratio:
    """``numerator / denominator``, both kept; ``value`` is None when the denominator is 0."""

    numerator: int
    denominator: int

    def __post_init__(self) -> None:
        if not 0 <= self.numerator <= self.denominator:
            raise ValueError(f"a ratio needs 0 <= {self.numerator} <= {self.denominator}")

    @property
    def value(self) -> float | None:
        return self.numerator / self.denominator if self.denominator else None


@dataclass(frozen=True, slots=True)
class GraderCoverage:
    """One metric on one side: ``coverage`` = scored / (eligible - not applicable)."""

    metric_id: str
    versions: tuple[str, ...]
    eligible: int
    scored: int
    not_applicable: int
    not_scored: int

    @property
    def coverage(self) -> Ratio:
        return Ratio(self.scored, self.eligible - self.not_applicable)


@dataclass(frozen=True, slots=True)
class SideEvidence:
    """One side's own figures; none is ever merged with the other side's."""

    run_id: str
    grading_pass: str | None
    attempts: int
    unmatched: tuple[Unmatched, ...]
    generation: Ratio
    failed: int
    indeterminate: int
    grading: Ratio
    coverage: tuple[GraderCoverage, ...]
    #: Full-run spend: generation (every attempt, superseded ones too) plus every grading pass.
    spend: Cost
    generation_spend: Cost
    grading_spend: Cost

    @property
    def unmatched_items(self) -> tuple[tuple[str, str], ...]:
        """The distinct (item id, revision id) with at least one unmatched attempt."""
        return tuple(sorted({(u.item_id, u.revision_id) for u in self.unmatched}))


@dataclass(frozen=True, slots=True)
class MetricComparison:
    """One metric across the two sides. ``mean_delta`` and ``interval`` are candidate -
    baseline in the metric's units; ``withheld`` says why there is no interval (None when
    there is one). ``paired`` counts pairs both scored, ``paired_cases`` their distinct
    item revisions."""

    metric_id: str
    baseline_versions: tuple[str, ...]
    candidate_versions: tuple[str, ...]
    baseline_directions: tuple[str, ...]
    candidate_directions: tuple[str, ...]
    paired: int
    paired_cases: int
    mean_delta: float | None
    interval: Interval | None
    reading: Reading | None
    withheld: Withheld | None
    baseline_distribution: tuple[tuple[str, int], ...] | None = None
    candidate_distribution: tuple[tuple[str, int], ...] | None = None
    #: Spreads (:mod:`policies.case_means`): each side's case means over its own scored
    #: repetitions, and the paired case deltas; None without a numeric value.
    baseline_run_spread: float | None = None
    candidate_run_spread: float | None = None
    delta_spread: float | None = None
    #: Per-case means and ranges over the matched repetitions of every paired case.
    cases: tuple[PairedCase, ...] = ()


@dataclass(frozen=True, slots=True)
class PairedLatency:
    """Latency over pairs both completed with a latency: medians, their ratio
    (candidate / baseline) and the median per-pair difference (candidate - baseline)."""

    pairs: int
    baseline_p50_ms: float | None
    candidate_p50_ms: float | None
    ratio: float | None
    median_delta_ms: float | None


@dataclass(frozen=True, slots=True)
class EvidenceComparison:
    matched_pairs: int
    completed_pairs: int
    baseline: SideEvidence
    candidate: SideEvidence
    metrics: tuple[MetricComparison, ...]
    latency: PairedLatency


def comparison_identity(baseline: Side, candidate: Side, metric_id: str) -> str:
    """What a metric's bootstrap is seeded from: both runs' ids and passes, and the metric."""
    return json.dumps(["evidence", baseline.run_id, baseline.grading_pass,
                       candidate.run_id, candidate.grading_pass, metric_id])


def match(baseline: Sequence[Attempt], candidate: Sequence[Attempt]) -> Matching:
    """Pair attempts on equal (item, revision, repetition); list every other attempt."""
    by_b = {a.key: a for a in baseline}
    by_c = {a.key: a for a in candidate}
    pairs = tuple((by_b[k], by_c[k]) for k in sorted(by_b.keys() & by_c.keys()))
    return Matching(pairs, _unmatched(by_b, by_c), _unmatched(by_c, by_b))


def _unmatched(mine: dict[Key, Attempt], theirs: dict[Key, Attempt]) -> tuple[Unmatched, ...]:
    their_items = {k[0] for k in theirs}
    their_revisions = {k[:2] for k in theirs}
    out: list[Unmatched] = []
    for item, revision, rep in sorted(mine.keys() - theirs.keys()):
        reason: UnmatchedReason
        if item not in their_items:
            reason = "item_missing"
        elif (item, revision) not in their_revisions:
            reason = "revision_differs"
        else:
            reason = "repetition_missing"
        out.append(Unmatched(item, revision, rep, reason))
    return tuple(out)


def sum_costs(costs: Iterable[Cost]) -> Cost:
    """Costs summed (:func:`policies.money.add_costs`: an unknown part makes the sum partial);
    nothing at all is a known zero."""
    total: Cost | None = None
    for c in costs:
        total = c if total is None else add_costs(total, c)
    return Cost.zero() if total is None else total


def full_run_spend(attempts: Iterable[Attempt]) -> Cost:
    """Every attempt's cost summed; no attempt at all is a known zero."""
    return sum_costs(a.cost for a in attempts)


def _side_evidence(side: Side, unmatched: tuple[Unmatched, ...]) -> SideEvidence:
    completed = [a for a in side.attempts if a.status == "completed"]
    metric_ids = sorted({s.metric_id for a in completed for s in a.scores})
    coverage: list[GraderCoverage] = []
    for m in metric_ids:
        grades = [a.score(m) for a in completed]
        scored = sum(1 for g in grades if g is not None and g.scored)
        na = sum(1 for g in grades if g is not None and g.not_applicable)
        versions = tuple(sorted({g.metric_version for g in grades if g is not None}))
        coverage.append(GraderCoverage(m, versions, len(completed), scored, na, len(completed) - scored - na))
    fully_graded = sum(
        1 for a in completed
        if all((g := a.score(m)) is not None and (g.scored or g.not_applicable) for m in metric_ids)
    )
    generation = sum_costs((full_run_spend(side.attempts), *side.superseded_costs))
    grading = sum_costs(side.grading_costs)
    return SideEvidence(
        run_id=side.run_id,
        grading_pass=side.grading_pass,
        attempts=len(side.attempts),
        unmatched=unmatched,
        generation=Ratio(len(completed), side.planned_generations),
        failed=sum(1 for a in side.attempts if a.status == "failed"),
        indeterminate=sum(1 for a in side.attempts if a.status == "invocation_indeterminate"),
        grading=Ratio(fully_graded, len(completed)),
        coverage=tuple(coverage),
        spend=sum_costs((generation, *side.grading_costs)),
        generation_spend=generation,
        grading_spend=grading,
    )


def _grades(attempts: Iterable[Attempt], metric_id: str) -> list[MetricScore]:
    return [g for a in attempts if a.status == "completed" and (g := a.score(metric_id)) is not None]


_Dist = tuple[tuple[str, int], ...]


def _distribution(values: Iterable[float | str]) -> _Dist:
    return tuple(sorted(Counter(str(v) for v in values).items()))


def _metric(
    metric_id: str, baseline: Side, candidate: Side, pairs: Sequence[tuple[Attempt, Attempt]],
    *, alpha: float, resamples: int,
) -> MetricComparison:
    b_grades, c_grades = _grades(baseline.attempts, metric_id), _grades(candidate.attempts, metric_id)
    b_versions = tuple(sorted({g.metric_version for g in b_grades}))
    c_versions = tuple(sorted({g.metric_version for g in c_grades}))
    b_dirs = tuple(sorted({g.direction for g in b_grades}))
    c_dirs = tuple(sorted({g.direction for g in c_grades}))
    scored: list[tuple[str, str, int, float | str, float | str]] = []  # (item, revision, rep, baseline, candidate)
    for b, c in pairs:
        if b.status == "completed" and c.status == "completed":
            bg, cg = b.score(metric_id), c.score(metric_id)
            if bg is not None and cg is not None and bg.value is not None and cg.value is not None:
                scored.append((b.item_id, b.revision_id, b.repetition, bg.value, cg.value))
    n, cases = len(scored), len({(item, rev) for item, rev, _, _, _ in scored})
    numeric = b_dirs == c_dirs and len(b_dirs) == 1 and b_dirs != ("categorical",)
    paired = paired_cases((i, r, k, float(bv), float(cv)) for i, r, k, bv, cv in scored) if numeric else None

    def spread(side: Side) -> float | None:
        return run_spread((a.item_id, a.revision_id, a.repetition, float(g.value))
                          for a in side.attempts if a.status == "completed"
                          and (g := a.score(metric_id)) is not None and isinstance(g.value, (int, float)))

    def row(
        withheld: Withheld | None, mean: float | None = None, interval: Interval | None = None,
        reading: Reading | None = None, distributions: tuple[_Dist, _Dist] | None = None,
    ) -> MetricComparison:
        b_dist, c_dist = distributions if distributions is not None else (None, None)
        return MetricComparison(metric_id, b_versions, c_versions, b_dirs, c_dirs, n, cases,
                                mean, interval, reading, withheld, b_dist, c_dist,
                                baseline_run_spread=spread(baseline), candidate_run_spread=spread(candidate),
                                delta_spread=None if paired is None else paired.delta_spread,
                                cases=() if paired is None else paired.cases)

    if not b_versions or not c_versions:
        return row("metric_missing")
    if len(b_versions) > 1 or b_versions != c_versions:
        return row("versions_differ")
    if len(b_dirs) > 1 or b_dirs != c_dirs:
        return row("directions_differ")
    if b_dirs == ("categorical",):
        return row("categorical", distributions=(_distribution(s[3] for s in scored),
                                                 _distribution(s[4] for s in scored)))
    if n == 0:
        return row("no_paired_scores")
    assert paired is not None and paired.mean_delta is not None  # numeric, with a pair
    case_deltas = paired.deltas
    mean = paired.mean_delta
    if cases < MIN_BOOTSTRAP_CASES:
        return row("small_sample", mean)
    if not (baseline.complete and candidate.complete):
        return row("run_in_progress", mean)
    if min(case_deltas) == max(case_deltas):
        return row("no_spread", mean)
    interval = bootstrap_interval(case_deltas, identity=comparison_identity(baseline, candidate, metric_id),
                                  alpha=expanded_alpha(len(case_deltas), alpha), resamples=resamples)
    assert interval is not None  # at least MIN_BOOTSTRAP_CASES cases
    sign = 1.0 if b_dirs == ("higher",) else -1.0
    low, high = sorted((sign * interval.lower, sign * interval.upper))
    reading: Reading = "candidate_ahead" if low > 0 else "baseline_ahead" if high < 0 else "no_difference_shown"
    return row(None, mean, interval, reading)


def _latency(pairs: Sequence[tuple[Attempt, Attempt]]) -> PairedLatency:
    lat = [(b.latency_ms, c.latency_ms) for b, c in pairs
           if b.status == "completed" and c.status == "completed"
           and b.latency_ms is not None and c.latency_ms is not None]
    if not lat:
        return PairedLatency(0, None, None, None, None)
    b50 = float(statistics.median(b for b, _ in lat))
    c50 = float(statistics.median(c for _, c in lat))
    return PairedLatency(len(lat), b50, c50, c50 / b50 if b50 > 0 else None,
                         float(statistics.median(c - b for b, c in lat)))


def compare_evidence(
    baseline: Side, candidate: Side, *, alpha: float = 0.05, resamples: int = DEFAULT_RESAMPLES
) -> EvidenceComparison:
    """Compare two runs, or two grading passes of one run; see the module docstring."""
    if (baseline.run_id, baseline.grading_pass) == (candidate.run_id, candidate.grading_pass):
        raise ValueError("the two sides are the same run and grading pass")
    matching = match(baseline.attempts, candidate.attempts)
    metric_ids = sorted({s.metric_id for side in (baseline, candidate)
                         for a in side.attempts if a.status == "completed" for s in a.scores})
    return EvidenceComparison(
        matched_pairs=len(matching.pairs),
        completed_pairs=sum(1 for b, c in matching.pairs if b.status == c.status == "completed"),
        baseline=_side_evidence(baseline, matching.unmatched_baseline),
        candidate=_side_evidence(candidate, matching.unmatched_candidate),
        metrics=tuple(_metric(m, baseline, candidate, matching.pairs, alpha=alpha, resamples=resamples)
                      for m in metric_ids),
        latency=_latency(matching.pairs),
    )
