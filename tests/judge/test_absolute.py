"""The absolute judge (judge/absolute.py): its own rubric family, parser and version."""

from __future__ import annotations

import pytest

from judge.absolute import AbsoluteJudge, AbsoluteSpec, absolute_version, parse_rating
from judge.completer import Completion, ScriptedCompleter
from judge.errors import UnknownRubric
from judge.version import JudgeSpec, judge_version

CONV = [{"role": "user", "content": "What is 2 + 2?"}]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Good. [[rating: 7]]", ("one", 7)),
        ("[[rating:10]] and again [[ Rating : 10 ]]", ("one", 10)),
        ("[[rating: 3]] or [[rating: 4]]", ("conflicting", None)),
        ("no rating here", ("none", None)),
        ("[[rating: 0]] [[rating: 11]] [[[rating: 5]]]", ("none", None)),
        ("[[A>B]]", ("none", None)),
    ],
)
def test_parse_rating(text: str, expected: tuple[str, int | None]) -> None:
    assert parse_rating(text) == expected


async def test_a_rating_is_a_score_and_a_missing_one_is_asked_for_once() -> None:
    spec = AbsoluteSpec(model="judge")
    ok = await AbsoluteJudge(ScriptedCompleter([Completion(ok=True, text="Fine. [[rating: 8]]")]), spec).score(CONV, "4")
    assert ok.score == 8 and ok.error is None and len(ok.completions) == 1
    completer = ScriptedCompleter([Completion(ok=True, text="hmm"), Completion(ok=True, text="[[rating: 6]]")])
    retried = await AbsoluteJudge(completer, spec).score(CONV, "4")
    assert retried.score == 6 and len(retried.completions) == 2
    assert completer.calls[0]["temperature"] == 0.0 and completer.calls[1]["messages"][-1]["role"] == "user"
    none = await AbsoluteJudge(ScriptedCompleter([Completion(ok=True, text="a"), Completion(ok=True, text="b")]),
                               spec).score(CONV, "4")
    assert none.score is None and none.error == "no_rating"
    both = await AbsoluteJudge(ScriptedCompleter([Completion(ok=True, text="[[rating: 2]] [[rating: 9]]")]),
                               spec).score(CONV, "4")
    assert both.score is None and both.error == "conflicting_ratings"
    failed = await AbsoluteJudge(ScriptedCompleter([Completion(ok=False, error="timeout")]), spec).score(CONV, "4")
    assert failed.score is None and failed.error == "judge_call_failed:timeout"


def test_the_version_is_its_own_family_and_changes_with_what_changes_a_score() -> None:
    base = absolute_version(AbsoluteSpec(model="judge"))
    assert base.family == "absolute" and base == absolute_version(AbsoluteSpec(model="judge"))
    assert base.id != absolute_version(AbsoluteSpec(model="other")).id
    assert base.id != absolute_version(AbsoluteSpec(model="judge", max_tokens=100)).id
    assert base.id != absolute_version(AbsoluteSpec(model="judge", temperature=0.5)).id
    assert base.id != judge_version(JudgeSpec(name="x", model="judge")).id  # never pooled with paired scores
    with pytest.raises(UnknownRubric):
        absolute_version(AbsoluteSpec(model="judge", rubric_id="pairwise-v1"))
