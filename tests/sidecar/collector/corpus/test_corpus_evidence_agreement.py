"""Groups and evidence agree on the same data (issue 24, items 9, 11 and 12).

One group's stored attempts and scores, read by both surfaces: the group's results
(:func:`sidecar.collector.corpus.runs.report`) and the evidence comparison of its two arms
(:func:`sidecar.collector.corpus.evidence.side_from_records` then
:func:`policies.evidence.compare_evidence`). Two repetitions; the candidate's first call failed
on 10 items, so those items have one matched repetition. Matching repetitions collapse to
per-case means before averaging, no missing repeat is averaged in, and both surfaces say so
with the same figure, the same spreads, and full-run spend that counts every judge call.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import msgspec

from policies.case_means import paired_cases
from policies.evidence import compare_evidence
from sidecar.collector.corpus.evidence import side_from_records, view
from sidecar.collector.corpus.items import Item
from sidecar.collector.corpus.plan import Arm, GroupPlan
from sidecar.collector.corpus.runs import report
from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.collector.store.corpus_run_records import AttemptRecord, RunRecord, ScoreRecord, attempt_id

GROUP = "cg_agree"
ITEMS = 30
FAILED_FIRST = range(10)  # the candidate's first call failed on these items
GEN_MICROS, FAILED_MICROS, JUDGE_MICROS = 1_000, 400, 250

METRICS = ({"name": "score", "kind": "grader", "version": "g1", "direction": "higher", "family": "grader"},
           {"name": "pref", "kind": "paired_judge", "version": "j1", "direction": "higher", "family": "paired"})


def _value(arm: str, item: int, rep: int) -> float:
    # within-case variation: the candidate's second repetition scores much higher
    base = (item * 7 % 10) / 10
    return base + (0.3 * rep if arm == "today" else 0.1 + 0.4 * (rep - 1))


def _attempt(arm: str, item: int, rep: int, attempt: int = 1, *, status: str = "completed") -> AttemptRecord:
    aid = attempt_id(GROUP, arm, f"i{item}", f"r{item}", rep, attempt)
    return AttemptRecord(aid, GROUP, arm, f"i{item}", f"r{item}", rep, attempt, None, status, None, None, 0, 0.0,
                         finished_at=1.0, latency_ms=100.0,
                         cost_micros=GEN_MICROS if status == "completed" else FAILED_MICROS, cost_coverage="complete")


def _records() -> tuple[GroupPlan, RunRecord, list[AttemptRecord], list[ScoreRecord]]:
    attempts: list[AttemptRecord] = []
    scores: list[ScoreRecord] = []
    for item in range(ITEMS):
        for rep in (1, 2):
            base = _attempt("today", item, rep)
            attempts.append(base)
            scores.append(ScoreRecord(base.id, GROUP, "score", "grader", "g1", "higher", "scored",
                                      _value("today", item, rep)))
            if rep == 1 and item in FAILED_FIRST:
                attempts.append(_attempt("next", item, rep, status="failed"))
                continue
            if rep == 1 and item == 12:  # a linked retry: the first attempt failed, the retry completed
                attempts.append(_attempt("next", item, rep, status="failed"))
                cand = replace(_attempt("next", item, rep, 2), retry_of=attempts[-1].id)
            else:
                cand = _attempt("next", item, rep)
            attempts.append(cand)
            scores.append(ScoreRecord(cand.id, GROUP, "score", "grader", "g1", "higher", "scored",
                                      _value("next", item, rep)))
            scores.append(ScoreRecord(cand.id, GROUP, "pref", "paired_judge", "j1", "higher", "scored", 0.5,
                                      paired_with=base.id, cost_micros=JUDGE_MICROS, cost_coverage="complete"))
    record = ComparisonRecord(GROUP, "team-a", "su_x", "{}", "{}", "tok", 0, "completed", 0.0, None)
    items = tuple(Item(f"i{n}", f"r{n}", ({"role": "user", "content": f"q{n}"},), None, (), {}) for n in range(ITEMS))
    arms = tuple(Arm(name, name, None, {"max_tokens": 10}) for name in ("today", "next"))
    plan = GroupPlan(record, arms, METRICS, items, 2, "score", 0.05)
    run = RunRecord(GROUP, 10**9, 0, 0, "[]", 0.0, 2.0)
    return plan, run, attempts, scores


def _evidence() -> dict[str, Any]:
    plan, _, attempts, scores = _records()
    sides = [side_from_records(GROUP, arm, plan.planned_per_arm, attempts, scores, dataset_id="ds_1", complete=True)
             for arm in ("today", "next")]
    body: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(view(compare_evidence(*sides))))
    return body


def test_group_and_evidence_give_one_estimate_from_matched_repetitions_only() -> None:
    plan, run, attempts, scores = _records()
    group = report(plan, run, attempts, scores)
    row = next(r for r in group["results"] if r["metric"] == "score")
    ev = _evidence()
    metric = next(m for m in ev["metrics"] if m["metric_id"] == "score")

    matched = [(f"i{i}", f"r{i}", rep, _value("today", i, rep), _value("next", i, rep))
               for i in range(ITEMS) for rep in (1, 2) if not (rep == 1 and i in FAILED_FIRST)]
    expected = paired_cases(matched).mean_delta
    assert expected is not None
    # what averaging every repeat gave: the missing candidate repeat's baseline was averaged in
    every_repeat = math.fsum(
        math.fsum(_value("next", i, r) for r in (1, 2) if not (r == 1 and i in FAILED_FIRST))
        / (1 if i in FAILED_FIRST else 2) - (_value("today", i, 1) + _value("today", i, 2)) / 2
        for i in range(ITEMS)) / ITEMS
    assert abs(every_repeat - expected) > 0.01, "the scenario must tell the two rules apart"

    assert row["estimate"] == metric["mean_delta"] == expected, (row["estimate"], metric["mean_delta"], expected)
    assert row["paired_items"] == metric["paired_cases"] == ITEMS
    assert metric["paired"] == ITEMS * 2 - len(FAILED_FIRST)
    print(f"\nestimate: group {row['estimate']:.6f}, evidence {metric['mean_delta']:.6f} "
          f"(averaging every repeat gave {every_repeat:.6f})")


def test_spreads_and_per_case_ranges_agree_between_group_and_evidence() -> None:
    plan, run, attempts, scores = _records()
    row = next(r for r in report(plan, run, attempts, scores)["results"] if r["metric"] == "score")
    metric = next(m for m in _evidence()["metrics"] if m["metric_id"] == "score")
    assert row["delta_spread"] == metric["delta_spread"] and metric["delta_spread"] > 0
    assert row["run_spread"] == {"today": metric["baseline_run_spread"], "next": metric["candidate_run_spread"]}
    case0 = next(c for c in metric["cases"] if c["item_id"] == "i0")  # candidate rep 1 failed: one matched repeat
    case20 = next(c for c in metric["cases"] if c["item_id"] == "i20")
    assert case0["repetitions"] == 1 and case0["candidate_range"] == [_value("next", 0, 2)] * 2
    assert case0["baseline_range"] == [_value("today", 0, 2)] * 2, "the unmatched baseline repeat is not in its case"
    assert case20["repetitions"] == 2
    assert case20["candidate_range"] == [_value("next", 20, 1), _value("next", 20, 2)]
    assert case20["delta"] == case20["candidate_mean"] - case20["baseline_mean"]
    assert math.isclose(case20["delta"],
                        (_value("next", 20, 1) + _value("next", 20, 2) - _value("today", 20, 1)
                         - _value("today", 20, 2)) / 2)


def test_full_run_spend_counts_generation_and_every_judge_call_as_the_group_does() -> None:
    plan, run, attempts, scores = _records()
    group_spend = report(plan, run, attempts, scores)["spend"]
    ev = _evidence()
    b, c = ev["baseline"], ev["candidate"]
    judge_calls = sum(1 for s in scores if s.kind == "paired_judge")
    assert c["grading_spend"]["known_micros"] == judge_calls * JUDGE_MICROS
    # the retried attempt's first (failed) call is spend too, though only its retry is paired
    assert c["generation_spend"]["known_micros"] == (ITEMS * 2 - len(FAILED_FIRST)) * GEN_MICROS \
        + (len(FAILED_FIRST) + 1) * FAILED_MICROS
    total = b["spend"]["known_micros"] + c["spend"]["known_micros"]
    assert total == group_spend["known_micros"], (total, group_spend)
    assert b["spend"]["coverage"] == c["spend"]["coverage"] == group_spend["coverage"] == "complete"


def test_revision_ids_include_the_dataset_so_two_datasets_never_pair() -> None:
    plan, _, attempts, scores = _records()
    mine = side_from_records(GROUP, "next", plan.planned_per_arm, attempts, scores, dataset_id="ds_1", complete=True)
    twin = side_from_records(GROUP + "-twin", "next", plan.planned_per_arm, attempts, scores, dataset_id="ds_2",
                             complete=True)
    assert {a.revision_id for a in mine.attempts} == {f"ds_1/r{i}" for i in range(ITEMS)}
    ev = compare_evidence(mine, twin)
    assert ev.matched_pairs == 0, "identical content hashes of two datasets are not the same revision"
    assert {u.reason for u in ev.baseline.unmatched} == {"revision_differs"}
