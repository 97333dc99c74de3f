"""A comparison group reads its tolerance exactly, as an A/B comparison does (issue 24, item 13).

One group's stored attempts and scores (20 items, one repetition, a grader scored in tenths),
read by :func:`sidecar.collector.corpus.runs.report`. Its interval's lower bound is exactly
-1/20, the tolerance of 0.05; computed in floats it is -0.05000000000000001, which compared in
floats fell outside the band, and the group read *Inconclusive* where the interval lies within
the tolerance (at it included): *Parity*. Found by searching seeded data sets for a bound at
the band; the bootstrap is seeded by the group id, so the case is fixed.
"""

from __future__ import annotations

from fractions import Fraction

from policies.exact_tolerance import exact
from sidecar.collector.corpus.items import Item
from sidecar.collector.corpus.plan import Arm, GroupPlan
from sidecar.collector.corpus.runs import report
from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.collector.store.corpus_run_records import AttemptRecord, RunRecord, ScoreRecord, attempt_id

GROUP = "cg_tol"
BASELINE = (1.0, 0.4, 0.8, 0.4, 0.1, 0.9, 0.2, 0.5, 0.8, 0.5, 1.0, 1.0, 0.6, 0.1, 1.0, 0.5, 0.4, 0.0, 0.3, 0.1)
CANDIDATE = (0.9, 0.3, 0.8, 0.3, 0.2, 0.9, 0.3, 0.4, 0.8, 0.4, 0.9, 0.9, 0.6, 0.1, 1.0, 0.4, 0.6, 0.1, 0.3, 0.2)
METRIC = {"name": "score", "kind": "grader", "version": "g1", "direction": "higher", "family": "grader"}


def _records() -> tuple[GroupPlan, RunRecord, list[AttemptRecord], list[ScoreRecord]]:
    attempts: list[AttemptRecord] = []
    scores: list[ScoreRecord] = []
    for arm, values in (("today", BASELINE), ("next", CANDIDATE)):
        for item, value in enumerate(values):
            aid = attempt_id(GROUP, arm, f"i{item}", f"r{item}", 1, 1)
            attempts.append(AttemptRecord(aid, GROUP, arm, f"i{item}", f"r{item}", 1, 1, None, "completed", None, None,
                                          0, 0.0, finished_at=1.0, latency_ms=100.0, cost_micros=1_000,
                                          cost_coverage="complete"))
            scores.append(ScoreRecord(aid, GROUP, "score", "grader", "g1", "higher", "scored", value))
    record = ComparisonRecord(GROUP, "team-a", "su_x", "{}", "{}", "tok", 0, "completed", 0.0, None)
    items = tuple(Item(f"i{n}", f"r{n}", ({"role": "user", "content": f"q{n}"},), None, (), {})
                  for n in range(len(BASELINE)))
    arms = tuple(Arm(name, name, None, {"max_tokens": 10}) for name in ("today", "next"))
    plan = GroupPlan(record, arms, (METRIC,), items, 1, "score", 0.05)
    return plan, RunRecord(GROUP, 10**9, 0, 0, "[]", 0.0, 2.0), attempts, scores


def test_a_group_interval_exactly_at_the_tolerance_reads_within_it() -> None:
    plan, run, attempts, scores = _records()
    row = next(r for r in report(plan, run, attempts, scores)["results"] if r["metric"] == "score")
    lower, upper = row["interval"]
    # The scenario: a lower bound at -1/20 in exact terms, just outside -0.05 in floats.
    assert lower < -0.05 and abs(lower + 0.05) < 1e-12, lower
    assert -0.05 <= upper <= 0.05, upper
    assert exact(row["band"]) == Fraction(1, 20)
    assert row["code"] == "equivalent", row
    assert row["wording"] == "Parity", row
