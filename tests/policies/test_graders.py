"""Deterministic graders and metric versions (policies/graders.py)."""

from __future__ import annotations

import pytest

from policies.graders import (
    InvalidMetric,
    absolute_judge_version,
    builtin_version,
    check_direction,
    check_grader,
    grade,
    grader_direction,
    grader_version,
    poolable,
)


def g(kind: str, answer: str, expected: str | None = None, **params: object) -> object:
    return grade(kind, check_grader(kind, params), answer, expected).value


def test_exact_match_strips_and_folds_case_only_when_asked() -> None:
    assert g("exact_match", " Paris\n", "Paris") is True
    assert g("exact_match", " Paris\n", "Paris", strip=False) is False
    assert g("exact_match", "paris", "Paris") is False
    assert g("exact_match", "paris", "Paris", ignore_case=True) is True
    assert g("exact_match", "Rome", None, value="Rome") is True


def test_without_an_expected_output_a_reference_grader_is_not_applicable() -> None:
    result = grade("exact_match", check_grader("exact_match", {}), "anything", None)
    assert result.value is None and not result.applicable
    assert not grade("contains", check_grader("contains", {}), "x", None).applicable


def test_contains_regex_and_categorical_capture() -> None:
    assert g("contains", "The answer is 42.", "42") is True
    assert g("contains", "The answer is 41.", "42") is False
    assert g("contains", "HELLO", None, value="hello", ignore_case=True) is True
    assert g("regex", "order #123 shipped", pattern=r"#\d+") is True
    assert g("regex", "no order", pattern=r"#\d+") is False
    assert g("regex", "label: spam", pattern=r"label: (\w+)", capture=True) == "spam"
    assert g("regex", "nothing", pattern=r"label: (\w+)", capture=True) is None
    assert grader_direction("regex", check_grader("regex", {"pattern": "(a)", "capture": True})) == "categorical"


def test_json_schema_validity() -> None:
    schema = {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}
    assert g("json_schema", '{"name": "x"}', schema=schema) is True
    assert g("json_schema", '{"name": 3}', schema=schema) is False
    assert g("json_schema", "not json", schema=schema) is False
    with pytest.raises(InvalidMetric) as bad:
        check_grader("json_schema", {"schema": {"type": "no-such-type"}})
    assert bad.value.field == "params.schema"
    with pytest.raises(InvalidMetric, match="nothing is ever fetched"):
        check_grader("json_schema", {"schema": {"$ref": "https://example.com/s.json"}})


@pytest.mark.parametrize(("kind", "params", "field"), [
    ("regex", {"pattern": "("}, "params.pattern"),
    ("regex", {"pattern": "x", "capture": True}, "params.pattern"),
    ("regex", {}, "params.pattern"),
    ("contains", {"value": ""}, "params.value"),
    ("exact_match", {"strip": "yes"}, "params.strip"),
    ("exact_match", {"typo": 1}, "params.typo"),
    ("levenshtein", {}, "grader"),
])
def test_bad_graders_name_their_field(kind: str, params: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidMetric) as bad:
        check_grader(kind, params)
    assert bad.value.field == field


def test_versions_are_exact_content_hashes() -> None:
    a = grader_version("regex", check_grader("regex", {"pattern": "x"}))
    same = grader_version("regex", check_grader("regex", {"pattern": "x", "ignore_case": False, "capture": False}))
    other = grader_version("regex", check_grader("regex", {"pattern": "y"}))
    assert a == same != other and len(a) == 32
    assert grader_version("contains", check_grader("contains", {"value": "x"})) != \
        grader_version("exact_match", check_grader("exact_match", {"value": "x"}))
    abs1 = absolute_judge_version(model="m", rubric="r", scale=(1, 10), temperature=0, max_tokens=100)
    assert abs1 == absolute_judge_version(model="m", rubric="r", scale=(1, 10), temperature=-0.0, max_tokens=100)
    assert abs1 != absolute_judge_version(model="m", rubric="r2", scale=(1, 10), temperature=0, max_tokens=100)
    assert builtin_version("latency") != builtin_version("cost")


def test_families_never_pool() -> None:
    assert poolable("paired_judge", "v1", "paired_judge", "v1")
    assert not poolable("paired_judge", "v1", "paired_judge", "v2")
    assert not poolable("paired_judge", "v1", "absolute_judge", "v1")


def test_directions_by_kind() -> None:
    assert check_direction("latency", "lower", "lower") == "lower"
    for kind, direction, natural in [("latency", "higher", "lower"), ("cost", "categorical", "lower"),
                                     ("paired_judge", "lower", "higher"), ("grader", "higher", "categorical"),
                                     ("grader", "sideways", "higher")]:
        with pytest.raises(InvalidMetric) as bad:
            check_direction(kind, direction, natural)  # type: ignore[arg-type]
        assert bad.value.field == "direction"
    assert check_direction("grader", "lower", "higher") == "lower"


def test_the_corpus_policies_import_nothing_of_ours_but_policies() -> None:
    import ast
    import pathlib

    from policies import experiments, graders, slices

    for module in (graders, experiments, slices):
        tree = ast.parse(pathlib.Path(str(module.__file__)).read_text(encoding="utf-8"))
        imported = {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        imported |= {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not imported & {"sidecar", "judge", "uplink"}, module.__name__
        assert not imported & {"time", "os", "asyncio", "socket", "httpx", "aiohttp"}, module.__name__
