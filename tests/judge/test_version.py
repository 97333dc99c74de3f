from __future__ import annotations

import dataclasses

import pytest

from judge.errors import InvalidJudgeSpec, UnknownRubric
from judge.rubric import RUBRICS, Rubric, get_rubric
from judge.version import JudgeSpec, judge_version

BASE = JudgeSpec(name="default judge", model="judge-model-1")


def test_equal_specs_equal_ids() -> None:
    assert judge_version(BASE).id == judge_version(JudgeSpec(name="default judge", model="judge-model-1")).id


def test_name_is_not_content() -> None:
    assert judge_version(BASE).id == judge_version(dataclasses.replace(BASE, name="renamed")).id


def test_integer_and_float_temperature_are_one_judge() -> None:
    assert judge_version(dataclasses.replace(BASE, temperature=0)).id == judge_version(BASE).id
    assert judge_version(dataclasses.replace(BASE, temperature=-0.0)).id == judge_version(BASE).id


@pytest.mark.parametrize(
    "change",
    [
        {"model": "judge-model-2"},
        {"temperature": 0.2},
        {"max_tokens": 2048},
        {"parser_version": "labels-v2"},
    ],
)
def test_each_component_changes_the_id(change: dict[str, object]) -> None:
    assert judge_version(dataclasses.replace(BASE, **change)).id != judge_version(BASE).id  # type: ignore[arg-type]


def test_rubric_text_changes_the_id(monkeypatch: pytest.MonkeyPatch) -> None:
    original = judge_version(BASE).id
    edited = dict(RUBRICS)
    edited["pairwise-v1"] = Rubric("pairwise-v1", "pairwise", get_rubric("pairwise-v1").text + " ")
    monkeypatch.setattr("judge.rubric.RUBRICS", edited)
    assert judge_version(BASE).id != original


def test_version_is_readable() -> None:
    v = judge_version(BASE)
    assert (v.name, v.model, v.rubric_id, v.temperature, v.max_tokens) == (
        "default judge",
        "judge-model-1",
        "pairwise-v1",
        0.0,
        1024,
    )
    assert len(v.id) == 32 and int(v.id, 16) >= 0
    assert v.to_dict()["id"] == v.id


def test_unknown_rubric() -> None:
    with pytest.raises(UnknownRubric):
        judge_version(dataclasses.replace(BASE, rubric_id="nope"))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"name": ""},
        {"model": " "},
        {"temperature": -0.5},
        {"temperature": float("inf")},
        {"max_tokens": 0},
        {"parser_version": ""},
    ],
)
def test_invalid_specs(kwargs: dict[str, object]) -> None:
    fields: dict[str, object] = {"name": "j", "model": "m", **kwargs}
    with pytest.raises(InvalidJudgeSpec):
        JudgeSpec(**fields)  # type: ignore[arg-type]


def test_rubric_text_asks_for_exactly_one_label() -> None:
    text = get_rubric("pairwise-v1").text
    for label in ("[[A>>B]]", "[[A>B]]", "[[A=B]]", "[[B>A]]", "[[B>>A]]"):
        assert label in text
    assert "exactly one label" in text
    assert "longer" in text and "order" in text
