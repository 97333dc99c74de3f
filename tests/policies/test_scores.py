from __future__ import annotations

import pytest

from policies.scores import Judgment, ScoreCounts, aggregate, judgment_score, summarize


def test_judgment_scores() -> None:
    assert [judgment_score(o) for o in ("candidate", "tie", "incumbent")] == [1, 0, -1]
    assert judgment_score("error") is None and judgment_score("abstain") is None
    assert Judgment("c", "candidate", strong=True).score == 1
    with pytest.raises(ValueError):
        Judgment("c", "win")  # type: ignore[arg-type]


def test_case_score_is_mean_of_valid_judgments_and_failures_are_counted_apart() -> None:
    s = summarize(
        [
            Judgment("a", "candidate", strong=True),
            Judgment("a", "tie"),  # audited in the other order: (1 + 0) / 2
            Judgment("b", "incumbent"),
            Judgment("b", "error"),  # not a tie: b stays at -1
            Judgment("c", "abstain"),
            Judgment("c", "error"),  # no valid judgment: unscored
            Judgment("d", "tie"),
        ]
    )
    by_id = {c.case_id: c for c in s.cases}
    assert by_id["a"].score == 0.5 and by_id["a"].judgments == 2 and by_id["a"].strong == 1
    assert by_id["b"].score == -1.0 and by_id["b"].errors == 1
    assert by_id["c"].score is None and by_id["c"].abstentions == 1
    assert (s.judgments, s.errors, s.abstentions, s.unscored_cases) == (4, 2, 1, 1)
    assert s.counts == ScoreCounts((-1.0, 0.0, 0.5), (1, 1, 1))


def test_aggregate_is_order_free_and_merges_float_noise() -> None:
    a = aggregate([0.1 + 0.2, 0.3, -0.0, 0.0, 1.0])
    b = aggregate([1.0, 0.0, 0.3, 0.0, 0.30000000000000004])
    assert a == b == ScoreCounts((0.0, 0.3, 1.0), (2, 2, 1))
    assert aggregate({1.0: 3, -1.0: 2, 0.0: 0}) == ScoreCounts((-1.0, 1.0), (2, 3))
    with pytest.raises(ValueError):
        aggregate([float("nan")])
    with pytest.raises(ValueError):
        aggregate({1.0: 1.5})


def test_aggregate_array_matches_python_path() -> None:
    import numpy as np

    x = np.random.default_rng(2).choice([-1.0, -0.5, 0.0, 0.5, 1.0, 1 / 3], 5000)
    x[:3] = [-0.0, 0.1 + 0.2, 0.3]
    assert aggregate(x) == aggregate(list(x))


def test_aggregate_of_a_sequence_is_the_item_by_item_count() -> None:
    """Equal values are counted together before the per-value loop: the same counts as one item
    at a time (floats, ints, noise that rounds together, a generator), and bad items still refused."""
    import random
    from fractions import Fraction

    def item_by_item(scores: list[object]) -> ScoreCounts:
        acc: dict[float, int] = {}
        for value in scores:
            key = round(float(value), 12) + 0.0  # type: ignore[arg-type]
            acc[key] = acc.get(key, 0) + 1
        keys = sorted(acc)
        return ScoreCounts(tuple(keys), tuple(acc[k] for k in keys))

    rng = random.Random(29)
    pool: list[object] = [-1.0, -0.5, 0.0, -0.0, 0.5, 1.0, 1, 0, True, Fraction(1, 2), 0.1 + 0.2, 0.3, 1 / 3]
    for _ in range(300):
        scores = [rng.choice(pool) for _ in range(rng.randint(1, 60))]
        as_floats: list[float] = scores  # type: ignore[assignment]  # ints, bools, Fractions too
        assert aggregate(as_floats) == aggregate(tuple(as_floats)) == aggregate(iter(as_floats)) == item_by_item(scores)
    with pytest.raises(TypeError):
        aggregate([0.5, [1.0]])  # type: ignore[list-item]
    with pytest.raises(ValueError):
        aggregate([0.5, float("nan"), float("nan")])
