"""Comparing evidence across two runs or two grading passes (policies/evidence.py, issue 13 item 5)."""

from __future__ import annotations

import ast
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.bootstrap import bootstrap_interval
from policies.corpus_verdict import expanded_alpha
from policies.evidence import (
    Attempt,
    EvidenceComparison,
    MetricComparison,
    MetricScore,
    Side,
    Status,
    comparison_identity,
    compare_evidence,
    full_run_spend,
    match,
)
from policies.graders import Direction
from policies.money import Cost

PAID = Cost(1_000, "complete")


def attempt(
    item: str,
    rep: int = 1,
    *,
    rev: str | None = None,
    arm: str = "arm-a",
    status: Status = "completed",
    latency: float | None = 100.0,
    cost: Cost = PAID,
    scores: Sequence[MetricScore] = (),
) -> Attempt:
    return Attempt("group-1", arm, item, rev if rev is not None else f"{item}@r1", rep, status, latency, cost,
                   tuple(scores))


def num(value: float | None, metric: str = "quality", *, version: str = "v1",
        direction: Direction = "higher", not_applicable: bool = False) -> MetricScore:
    return MetricScore(metric, version, direction, value, not_applicable)


def side(run_id: str, attempts: Sequence[Attempt], *, planned: int | None = None,
         grading_pass: str | None = None) -> Side:
    return Side(run_id, len(attempts) if planned is None else planned, tuple(attempts), grading_pass)


def metric(result: EvidenceComparison, metric_id: str = "quality") -> MetricComparison:
    (row,) = [m for m in result.metrics if m.metric_id == metric_id]
    return row


def base_score(i: int) -> float:
    """A per-item quality that varies, so that intervals are not degenerate."""
    return (i * 7919 % 100) / 100


# --- pairing -------------------------------------------------------------------------------


def test_ten_revised_items_across_two_dataset_versions_are_listed_unmatched_not_paired() -> None:
    """Must show: two dataset versions of 50 items where 10 were revised."""
    v1 = [(f"item-{i:02d}", f"item-{i:02d}@r1") for i in range(50)]
    v2 = [(item, f"{item}@r2" if i < 10 else rev) for i, (item, rev) in enumerate(v1)]
    # The revised items score wildly on both sides: averaged in, they would swamp the delta.
    baseline = side("exp-v1", [
        attempt(item, rev=rev, arm="v1", scores=[num(-100.0 if i < 10 else base_score(i))])
        for i, (item, rev) in enumerate(v1)])
    candidate = side("exp-v2", [
        attempt(item, rev=rev, arm="v2", scores=[num(100.0 if i < 10 else base_score(i) + 0.1 + (i % 3) / 100)])
        for i, (item, rev) in enumerate(v2)])
    result = compare_evidence(baseline, candidate)
    print(f"\n10 revised items: {result.matched_pairs} paired; unmatched baseline "
          f"{[(u.item_id, u.revision_id, u.reason) for u in result.baseline.unmatched[:2]]}...")

    assert result.matched_pairs == 40
    assert [(u.item_id, u.revision_id, u.repetition, u.reason) for u in result.baseline.unmatched] == [
        (f"item-{i:02d}", f"item-{i:02d}@r1", 1, "revision_differs") for i in range(10)]
    assert [(u.item_id, u.revision_id, u.repetition, u.reason) for u in result.candidate.unmatched] == [
        (f"item-{i:02d}", f"item-{i:02d}@r2", 1, "revision_differs") for i in range(10)]
    assert result.candidate.unmatched_items == tuple((f"item-{i:02d}", f"item-{i:02d}@r2") for i in range(10))
    q = metric(result)
    assert (q.paired, q.paired_cases, q.withheld) == (40, 40, None)
    expected = sum(0.1 + (i % 3) / 100 for i in range(10, 50)) / 40
    assert q.mean_delta == pytest.approx(expected)  # the ±100 of the revised items never entered
    assert q.interval is not None and 0.1 <= q.interval.lower <= q.interval.upper <= 0.12
    assert q.reading == "candidate_ahead"
    # Full-run figures stay full-run: every attempt, matched or not, on its own side.
    assert result.baseline.generation.value == result.candidate.generation.value == 1.0
    assert result.baseline.spend == result.candidate.spend == Cost(50_000, "complete")
    assert [c.coverage.numerator for c in result.baseline.coverage] == [50]


def test_repetitions_pair_only_with_the_same_repetition() -> None:
    baseline = side("b", [attempt(f"i{i}", rep, scores=[num(0.5)]) for i in range(25) for rep in (1, 2, 3)])
    candidate = side("c", [attempt(f"i{i}", rep, arm="arm-b", scores=[num(0.75)])
                           for i in range(25) for rep in (1, 2)]
                     + [attempt("new-item", 1, arm="arm-b", scores=[num(0.0)])])
    result = compare_evidence(baseline, candidate)
    assert result.matched_pairs == 50
    assert {(u.repetition, u.reason) for u in result.baseline.unmatched} == {(3, "repetition_missing")}
    assert len(result.baseline.unmatched) == 25
    assert [(u.item_id, u.reason) for u in result.candidate.unmatched] == [("new-item", "item_missing")]
    q = metric(result)
    assert (q.paired, q.paired_cases, q.mean_delta) == (50, 25, 0.25)


def test_repetitions_are_averaged_within_their_case_before_cases_are_averaged() -> None:
    # Case x: 3 repetitions with delta 1.0; case y: 1 repetition with delta 0.0. Mean of cases: 0.5.
    baseline = side("b", [attempt("x", r, scores=[num(0.0)]) for r in (1, 2, 3)] + [attempt("y", scores=[num(0.0)])])
    candidate = side("c", [attempt("x", r, arm="z", scores=[num(1.0)]) for r in (1, 2, 3)]
                     + [attempt("y", arm="z", scores=[num(0.0)])])
    q = metric(compare_evidence(baseline, candidate))
    assert (q.paired, q.paired_cases, q.mean_delta, q.withheld) == (4, 2, 0.5, "small_sample")


# --- denominators ----------------------------------------------------------------------------


def test_denominators_are_per_side_and_never_merged() -> None:
    exact = "exact"
    baseline = side("b", planned=10, attempts=[
        *[attempt(f"i{i}", scores=[num(1.0), num(1.0, exact)]) for i in range(5)],
        attempt("i5", scores=[num(1.0), num(None, exact, not_applicable=True)]),
        attempt("i6", scores=[num(None), num(0.0, exact)]),  # the judge did not score it
        attempt("i7", scores=[num(1.0)]),  # the exact grader never ran on it
        attempt("i8", status="failed", scores=[num(0.0)]),  # scores on a failed attempt are not eligible
        attempt("i9", status="invocation_indeterminate", cost=Cost.unknown()),
    ])
    candidate = side("c", planned=10, attempts=[
        *[attempt(f"i{i}", arm="b", scores=[num(1.0), num(None, exact, not_applicable=True)]) for i in range(4)],
        *[attempt(f"i{i}", arm="b", scores=[num(0.0), num(1.0, exact)]) for i in range(4, 7)],
    ])  # 3 planned generations never attempted
    result = compare_evidence(baseline, candidate)
    b, c = result.baseline, result.candidate

    assert (b.generation.numerator, b.generation.denominator, b.failed, b.indeterminate) == (8, 10, 1, 1)
    assert (c.generation.numerator, c.generation.denominator, c.failed, c.indeterminate) == (7, 10, 0, 0)
    assert (b.grading.numerator, b.grading.denominator) == (6, 8)  # i6 unscored, i7 missing a metric
    assert (c.grading.numerator, c.grading.denominator) == (7, 7)
    b_cov = {g.metric_id: g for g in b.coverage}
    c_cov = {g.metric_id: g for g in c.coverage}
    assert (b_cov[exact].scored, b_cov[exact].eligible, b_cov[exact].not_applicable, b_cov[exact].not_scored) == (
        6, 8, 1, 1)
    assert (b_cov[exact].coverage.numerator, b_cov[exact].coverage.denominator) == (6, 7)
    assert (b_cov["quality"].coverage.numerator, b_cov["quality"].coverage.denominator) == (7, 8)
    # Not applicable leaves the denominator: 3 scored of 7 eligible, 4 not applicable -> 3/3.
    assert (c_cov[exact].coverage.numerator, c_cov[exact].coverage.denominator) == (3, 3)
    assert c_cov[exact].coverage.value == 1.0
    assert result.matched_pairs == 7 and result.completed_pairs == 7
    # Paired quality has its own denominator: pairs both scored (i6's baseline is not).
    assert metric(result).paired == 6
    assert metric(result, exact).paired == 2  # i4 and i6; i5 is not applicable on the baseline
    assert b.spend == Cost(9_000, "partial") and c.spend == Cost(7_000, "complete")


def test_a_metric_with_every_grade_not_applicable_has_no_coverage_ratio() -> None:
    result = compare_evidence(side("b", [attempt("i", scores=[num(None, not_applicable=True)])]),
                              side("c", [attempt("i", arm="z", scores=[num(None, not_applicable=True)])]))
    (cov,) = result.baseline.coverage
    assert (cov.coverage.numerator, cov.coverage.denominator, cov.coverage.value) == (0, 0, None)
    assert metric(result).withheld == "no_paired_scores" and metric(result).mean_delta is None


def test_an_indeterminate_attempt_is_not_completed_and_keeps_its_cost() -> None:
    pairs = [(attempt(f"i{i}", scores=[num(0.5)]), attempt(f"i{i}", arm="z", scores=[num(0.7)])) for i in range(3)]
    known = attempt("k", status="invocation_indeterminate", cost=Cost(400, "complete"), latency=None)
    unknown = attempt("u", status="invocation_indeterminate", cost=Cost.unknown(), latency=None,
                      scores=[num(9.0)])  # a score left on it is not eligible
    result = compare_evidence(
        side("b", [a for a, _ in pairs] + [known, unknown], planned=5),
        side("c", [b for _, b in pairs] + [attempt("k", arm="z", scores=[num(0.7)]),
                                           attempt("u", arm="z", scores=[num(0.7)])]),
    )
    assert result.matched_pairs == 5 and result.completed_pairs == 3  # matched, but not a completed pair
    assert (result.baseline.generation.numerator, result.baseline.indeterminate) == (3, 2)
    assert result.baseline.spend == Cost(3_400, "partial")  # the known 400 counted, the unknown not as zero
    q = metric(result)
    assert q.paired == 3 and q.mean_delta == pytest.approx(0.2)  # never a loss for the baseline
    assert result.latency.pairs == 3


# --- spend -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("costs", "expected"), [
    ([Cost(10, "complete"), Cost(20, "complete")], Cost(30, "complete")),
    ([Cost(10, "complete"), Cost.unknown()], Cost(10, "partial")),
    ([Cost(10, "complete"), Cost(5, "partial")], Cost(15, "partial")),
    ([Cost.unknown(), Cost.unknown()], Cost.unknown()),
    ([Cost.unknown()], Cost.unknown()),
    ([Cost.zero(), Cost.unknown()], Cost(0, "partial")),  # a known zero and an unknown: not all unknown
    ([], Cost.zero()),  # nothing attempted: nothing spent
])
def test_full_run_spend_never_reads_unknown_as_zero(costs: list[Cost], expected: Cost) -> None:
    got = full_run_spend([attempt(f"i{n}", cost=c) for n, c in enumerate(costs)])
    assert got == expected
    assert got.to_dict() == {"known_micros": expected.known_micros, "coverage": expected.coverage,
                             "basis": "list_price"}


def test_spend_is_reported_per_side_never_summed() -> None:
    result = compare_evidence(side("b", [attempt("i", cost=Cost(700, "complete"))]),
                              side("c", [attempt("i", arm="z", cost=Cost.unknown())]))
    assert result.baseline.spend == Cost(700, "complete")
    assert result.candidate.spend == Cost.unknown()


# --- withheld directional results --------------------------------------------------------------


def _twenty_five(b_score: MetricScore, c_score: MetricScore) -> EvidenceComparison:
    return compare_evidence(side("b", [attempt(f"i{i}", scores=[b_score]) for i in range(25)]),
                            side("c", [attempt(f"i{i}", arm="z", scores=[c_score]) for i in range(25)]))


def test_different_grader_versions_withhold_the_directional_result() -> None:
    q = metric(_twenty_five(num(0.2, version="v1"), num(0.9, version="v2")))
    assert (q.withheld, q.mean_delta, q.interval, q.reading) == ("versions_differ", None, None, None)
    assert (q.baseline_versions, q.candidate_versions, q.paired) == (("v1",), ("v2",), 25)


def test_a_side_graded_with_two_versions_is_withheld_too() -> None:
    b = side("b", [attempt(f"i{i}", scores=[num(0.2, version="v1" if i % 2 else "v2")]) for i in range(25)])
    c = side("c", [attempt(f"i{i}", arm="z", scores=[num(0.4, version="v1")]) for i in range(25)])
    q = metric(compare_evidence(b, c))
    assert (q.withheld, q.baseline_versions, q.mean_delta) == ("versions_differ", ("v1", "v2"), None)


def test_different_directions_withhold_the_directional_result() -> None:
    q = metric(_twenty_five(num(0.2), num(0.9, direction="lower")))
    assert (q.withheld, q.mean_delta, q.interval, q.reading) == ("directions_differ", None, None, None)
    assert (q.baseline_directions, q.candidate_directions) == (("higher",), ("lower",))


def test_a_metric_on_one_side_only_is_withheld() -> None:
    result = compare_evidence(side("b", [attempt("i", scores=[num(0.2, "only-b")])]),
                              side("c", [attempt("i", arm="z")]))
    q = metric(result, "only-b")
    assert (q.withheld, q.candidate_versions, q.paired) == ("metric_missing", (), 0)


def test_a_categorical_metric_gives_distributions_and_no_winner() -> None:
    labels_b = ["refusal", "answer", "answer", "clarify"] * 6
    labels_c = ["answer", "answer", "answer", "refusal"] * 6
    b = side("b", [attempt(f"i{i}", scores=[MetricScore("kind", "v1", "categorical", lab)])
                   for i, lab in enumerate(labels_b)] + [attempt("extra", scores=[MetricScore("kind", "v1",
                                                                                    "categorical", "answer")])])
    c = side("c", [attempt(f"i{i}", arm="z", scores=[MetricScore("kind", "v1", "categorical", lab)])
                   for i, lab in enumerate(labels_c)])
    q = metric(compare_evidence(b, c), "kind")
    assert (q.withheld, q.mean_delta, q.interval, q.reading, q.paired) == ("categorical", None, None, None, 24)
    assert q.baseline_distribution == (("answer", 12), ("clarify", 6), ("refusal", 6))  # unmatched "extra" left out
    assert q.candidate_distribution == (("answer", 18), ("refusal", 6))


# --- the bootstrap -----------------------------------------------------------------------------


def _sides(cases: int, *, reps: int = 1, b_id: str = "run-b", c_id: str = "run-c",
           b_pass: str | None = None, c_pass: str | None = None, shuffle: int | None = None,
           direction: Direction = "higher") -> tuple[Side, Side]:
    b = [attempt(f"i{i}", r, scores=[num(base_score(i), direction=direction)])
         for i in range(cases) for r in range(1, reps + 1)]
    c = [attempt(f"i{i}", r, arm="z", scores=[num(base_score(i) + ((i * 31 + r) % 7) / 20, direction=direction)])
         for i in range(cases) for r in range(1, reps + 1)]
    if shuffle is not None:
        random.Random(shuffle).shuffle(b)
        random.Random(shuffle + 1).shuffle(c)
    return side(b_id, b, grading_pass=b_pass), side(c_id, c, grading_pass=c_pass)


def test_no_interval_below_twenty_distinct_paired_cases() -> None:
    q = metric(compare_evidence(*_sides(19)))
    assert (q.paired_cases, q.withheld, q.interval, q.reading) == (19, "small_sample", None, None)
    assert q.mean_delta is not None  # the point estimate is still shown
    # 30 pairs, but only 10 distinct cases (items with 3 repetitions): still a small sample.
    q = metric(compare_evidence(*_sides(10, reps=3)))
    assert (q.paired, q.paired_cases, q.withheld, q.interval) == (30, 10, "small_sample", None)
    q = metric(compare_evidence(*_sides(20)))
    assert (q.paired_cases, q.withheld) == (20, None) and q.interval is not None


def test_the_interval_is_the_projects_case_cluster_bootstrap_seeded_from_the_selection() -> None:
    b, c = _sides(30, reps=2)
    q = metric(compare_evidence(b, c))
    case_deltas = [sum(((i * 31 + r) % 7) / 20 for r in (1, 2)) / 2 for i in range(30)]
    # 2,000 resamples, percentiles expanded for the sample size (issue 23, item 7).
    direct = bootstrap_interval(case_deltas, identity=comparison_identity(b, c, "quality"),
                                alpha=expanded_alpha(30, 0.05))
    assert q.interval is not None and direct is not None
    assert q.interval.lower == pytest.approx(direct.lower) and q.interval.upper == pytest.approx(direct.upper)
    assert q.mean_delta == pytest.approx(sum(case_deltas) / 30)


def test_the_interval_is_deterministic_and_seeded_from_runs_passes_and_metric() -> None:
    first = metric(compare_evidence(*_sides(40))).interval
    again = metric(compare_evidence(*_sides(40, shuffle=3))).interval  # same selection, another order
    assert first is not None and first == again
    others = [metric(compare_evidence(*_sides(40, b_id="run-b2"))).interval,
              metric(compare_evidence(*_sides(40, c_id="run-c2"))).interval,
              metric(compare_evidence(*_sides(40, b_pass="pass-2"))).interval]
    print(f"\nsame evidence, seeded from other selections: {first} vs {others}")
    assert all(o is not None and o != first for o in others)
    b, c = _sides(40)
    ids = {comparison_identity(b, c, "quality"), comparison_identity(b, c, "other"),
           comparison_identity(*_sides(1, b_pass="p"), "quality"), comparison_identity(c, b, "quality")}
    assert len(ids) == 4 and comparison_identity(b, c, "quality") == comparison_identity(*_sides(2), "quality")


def test_two_grading_passes_of_one_run_pair_on_the_same_attempts() -> None:
    b, c = _sides(25, b_id="run-1", c_id="run-1", b_pass="pass-1", c_pass="pass-2")
    result = compare_evidence(b, c)
    assert result.matched_pairs == 25 and metric(result).interval is not None
    with pytest.raises(ValueError, match="same run and grading pass"):
        compare_evidence(b, b)


def test_the_reading_follows_the_metrics_direction() -> None:
    higher = metric(compare_evidence(*_sides(25)))
    lower = metric(compare_evidence(*_sides(25, direction="lower")))
    assert higher.mean_delta == lower.mean_delta and higher.mean_delta is not None and higher.mean_delta > 0
    assert higher.reading == "candidate_ahead"
    assert lower.reading == "baseline_ahead"  # the candidate's value is higher, and lower is better
    flat = metric(_twenty_five(num(0.5), num(0.5)))
    # Every case the same: no zero-width interval, so no reading either (issue 23, item 6).
    assert (flat.withheld, flat.interval, flat.reading, flat.mean_delta) == ("no_spread", None, None, 0.0)


# --- latency ---------------------------------------------------------------------------------


def test_paired_latency_uses_completed_pairs_only() -> None:
    b = side("b", [attempt("i1", latency=100), attempt("i2", latency=200), attempt("i3", latency=300),
                   attempt("i4", latency=50), attempt("i5", latency=10, status="failed"), attempt("only-b")])
    c = side("c", [attempt("i1", arm="z", latency=150), attempt("i2", arm="z", latency=260),
                   attempt("i3", arm="z", latency=390), attempt("i4", arm="z", latency=None),
                   attempt("i5", arm="z", latency=9_000)])
    lat = compare_evidence(b, c).latency
    assert (lat.pairs, lat.baseline_p50_ms, lat.candidate_p50_ms, lat.median_delta_ms) == (3, 200.0, 260.0, 60.0)
    assert lat.ratio == pytest.approx(1.3)
    none = compare_evidence(side("b", [attempt("x")]), side("c", [attempt("y", arm="z")])).latency
    assert (none.pairs, none.ratio, none.median_delta_ms) == (0, None, None)


# --- validation ------------------------------------------------------------------------------


def test_inputs_that_cannot_be_one_run_are_refused() -> None:
    with pytest.raises(ValueError, match="one attempt per key"):
        side("b", [attempt("i"), attempt("i")])
    with pytest.raises(ValueError, match="planned"):
        Side("b", 1, (attempt("i"), attempt("j")))
    with pytest.raises(ValueError, match="a side is one run"):
        side("b", [attempt("i"), attempt("j", arm="other")])
    with pytest.raises(ValueError, match="graded twice"):
        attempt("i", scores=[num(1.0), num(0.0)])
    with pytest.raises(ValueError, match="status"):
        attempt("i", status="cancelled")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="categorical"):
        MetricScore("m", "v1", "categorical", 1.0)
    with pytest.raises(ValueError, match="finite number"):
        MetricScore("m", "v1", "higher", "good")
    with pytest.raises(ValueError, match="finite number"):
        MetricScore("m", "v1", "lower", float("nan"))
    with pytest.raises(ValueError, match="not-applicable"):
        MetricScore("m", "v1", "higher", 1.0, not_applicable=True)


def test_the_module_is_pure() -> None:
    """Plain data in, plain data out: the standard library's pure parts and other policies only."""
    tree = ast.parse((Path(__file__).resolve().parents[2] / "policies" / "evidence.py").read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module}
    assert roots <= {"__future__", "collections", "dataclasses", "json", "math", "statistics", "typing", "policies"}


# --- properties ------------------------------------------------------------------------------

_keys = st.sets(st.tuples(st.integers(0, 6), st.integers(1, 2), st.integers(1, 3)), max_size=40)


def _attempts(keys: set[tuple[int, int, int]], arm: str) -> list[Attempt]:
    return [attempt(f"i{i}", rep, rev=f"i{i}@r{rev}", arm=arm) for i, rev, rep in sorted(keys)]


@settings(max_examples=150, deadline=None)
@given(_keys, _keys)
def test_pairs_plus_unmatched_add_up_to_each_sides_attempts(
    b_keys: set[tuple[int, int, int]], c_keys: set[tuple[int, int, int]]
) -> None:
    b, c = _attempts(b_keys, "b"), _attempts(c_keys, "c")
    m = match(b, c)
    assert len(m.pairs) + len(m.unmatched_baseline) == len(b)
    assert len(m.pairs) + len(m.unmatched_candidate) == len(c)
    assert all(x.key == y.key for x, y in m.pairs)
    c_ids, b_ids = {a.key for a in c}, {a.key for a in b}
    assert not {(u.item_id, u.revision_id, u.repetition) for u in m.unmatched_baseline} & c_ids
    assert not {(u.item_id, u.revision_id, u.repetition) for u in m.unmatched_candidate} & b_ids
    for u in m.unmatched_baseline:  # the reason is the most specific one true of the other side
        same_item = {k for k in c_ids if k[0] == u.item_id}
        same_rev = {k for k in same_item if k[1] == u.revision_id}
        assert u.reason == ("repetition_missing" if same_rev else "revision_differs" if same_item
                            else "item_missing")
    swapped = match(c, b)
    assert len(swapped.pairs) == len(m.pairs) and swapped.unmatched_baseline == m.unmatched_candidate
    result = compare_evidence(side("b", b), side("c", c))
    assert result.matched_pairs == len(m.pairs)
    assert result.baseline.attempts == len(b) and result.candidate.attempts == len(c)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(["complete", "partial", "unknown"]), max_size=12), st.data())
def test_known_micros_is_the_sum_of_what_is_known(coverages: list[str], data: st.DataObject) -> None:
    costs = [Cost.unknown() if cov == "unknown" else Cost(data.draw(st.integers(0, 10**9)), cov)  # type: ignore[arg-type]
             for cov in coverages]
    total = full_run_spend([attempt(f"i{n}", cost=c) for n, c in enumerate(costs)])
    assert total.known_micros == sum(c.known_micros for c in costs)
    if not costs or all(cov == "complete" for cov in coverages):
        assert total.coverage == "complete"
    elif all(cov == "unknown" for cov in coverages):
        assert total.coverage == "unknown" and total.known_micros == 0
    else:
        assert total.coverage == "partial"


def test_no_direction_while_a_run_is_going_and_no_zero_width_interval() -> None:
    """Issue 23, items 3 and 6: a side whose run has not ended gives no interval and no reading;
    every case with the same delta gives none either (a zero-width "95%" interval before)."""
    import dataclasses

    b, c = _sides(30, reps=2)
    going = metric(compare_evidence(b, dataclasses.replace(c, complete=False)))
    assert (going.withheld, going.interval, going.reading) == ("run_in_progress", None, None)
    assert going.mean_delta is not None
    same_b = dataclasses.replace(b, attempts=tuple(
        dataclasses.replace(a, scores=tuple(dataclasses.replace(s, value=0.0) for s in a.scores)) for a in b.attempts))
    same_c = dataclasses.replace(c, attempts=tuple(
        dataclasses.replace(a, scores=tuple(dataclasses.replace(s, value=1.0) for s in a.scores)) for a in c.attempts))
    flat = metric(compare_evidence(same_b, same_c))
    assert (flat.withheld, flat.interval, flat.reading, flat.mean_delta) == ("no_spread", None, None, 1.0)
