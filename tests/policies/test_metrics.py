from __future__ import annotations

import numpy as np
import pytest

from policies.metrics import MetricResult, MetricSpec, combine, compare_metric, from_evaluation
from policies.verdict import evaluate


def _r(code: str | None, *, missing: bool = False, kind: str = "numeric") -> MetricResult:
    return MetricResult("m", kind, "higher", code, 100, missing)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("codes", "want"),
    [
        (["regression", "candidate_better"], "regression"),
        (["candidate_better", "equivalent"], "candidate_better"),
        (["equivalent", "equivalent"], "equivalent"),
        (["candidate_better", "inconclusive"], "inconclusive"),
        (["equivalent", "inconclusive"], "inconclusive"),
        ([], "inconclusive"),
    ],
)
def test_combine_rules(codes: list[str], want: str) -> None:
    assert combine([_r(c) for c in codes]) == want


def test_missing_side_is_inconclusive_but_regression_still_wins() -> None:
    assert combine([_r("candidate_better"), _r("inconclusive", missing=True)]) == "inconclusive"
    assert combine([_r("regression"), _r("inconclusive", missing=True)]) == "regression"


def test_categorical_metrics_have_distributions_and_no_verdict() -> None:
    spec = MetricSpec("tone", kind="categorical")
    res = compare_metric(spec, ["formal", "casual", "formal", None], ["casual", "casual", "formal", "formal"])
    assert res.verdict is None
    assert res.candidate_distribution == (("casual", 1), ("formal", 2))
    assert res.incumbent_distribution == (("casual", 2), ("formal", 2))
    assert combine([res, _r("equivalent")]) == "equivalent"
    assert combine([res]) == "inconclusive"


def test_direction_orients_the_difference() -> None:
    rng = np.random.default_rng(4)
    n = 400
    inc = rng.normal(1000, 100, n)
    cand = inc - 120 + rng.normal(0, 50, n)  # candidate is ~120 ms faster
    latency = compare_metric(MetricSpec("latency_ms", "lower", tolerance=20, design_sd=100), list(cand), list(inc))
    assert latency.verdict == "candidate_better" and latency.difference == pytest.approx(120, abs=10)
    as_score = compare_metric(MetricSpec("score", "higher", tolerance=20, design_sd=100), list(cand), list(inc))
    assert as_score.verdict == "regression"
    same = compare_metric(MetricSpec("score", "higher", tolerance=30, design_sd=100), list(inc + rng.normal(0, 20, n)), list(inc))
    assert same.verdict == "equivalent"
    assert combine([latency, as_score]) == "regression"


def test_one_side_without_scores() -> None:
    res = compare_metric(MetricSpec("faithfulness"), [None] * 50, [0.8] * 50)
    assert res.verdict == "inconclusive" and res.missing_side
    pref = from_evaluation("preference", evaluate({1.0: 700, -1.0: 300}, identity="t"))
    assert pref.verdict == "candidate_better" and pref.sequence is not None and pref.sequence.lower > 0
    assert combine([pref, res]) == "inconclusive"
