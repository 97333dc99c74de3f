"""Deterministic graders and the versions every suite metric is pinned to (issue 13, item 2).
Pure: plain data in, plain data out; no I/O, no clock.

**Graders** score one answer against an item's expected output without a model:

- ``exact_match`` — the answer equals ``value`` (default: the item's expected output);
  ``strip`` (default true) trims both first, ``ignore_case`` folds case.
- ``contains`` — ``value`` (default: the expected output) occurs in the answer.
- ``regex`` — ``pattern`` is found in the answer (:func:`re.search`). With ``capture``,
  the first group's text is the grade: a *categorical* metric.
- ``json_schema`` — the answer parses as JSON and is valid against ``schema`` (the schema's
  own ``$schema`` dialect, else draft 2020-12). A ``$ref`` outside the schema is refused
  when the grader is defined: nothing is ever fetched.

A grade is ``True``/``False`` (or the captured category), or *not applicable*: an
``exact_match`` or ``contains`` with no ``value`` on an item that has no expected output is
not applicable for that item — never a fail, never a pass (coverage counts it apart).

**Versions** are exact content hashes. :func:`grader_version` hashes the kind, its
canonical parameters and the kind's logic revision (:data:`LOGIC`, bumped whenever a
kind's code changes what it returns), so any change — a pattern, a flag, the code — is a
new version and equal content is the same version whatever its name. The other metric
kinds are pinned the same way: the paired judge by its judge version
(:func:`judge.version.judge_version`, computed by the caller), the absolute judge by
:func:`absolute_judge_version`, latency and cost by :func:`builtin_version`.

**Families** never pool: a paired judge's preference, an absolute judge's score, a grader's
pass rate, a latency and a cost are different quantities. :func:`poolable` is the rule:
the same family *and* the same version.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Literal, Mapping

GraderKind = Literal["exact_match", "contains", "regex", "json_schema"]
GRADER_KINDS: tuple[str, ...] = ("exact_match", "contains", "regex", "json_schema")
MetricKind = Literal["paired_judge", "absolute_judge", "grader", "latency", "cost"]
METRIC_KINDS: tuple[str, ...] = ("paired_judge", "absolute_judge", "grader", "latency", "cost")
Direction = Literal["higher", "lower", "categorical"]
DIRECTIONS: tuple[str, ...] = ("higher", "lower", "categorical")
#: Metric kinds whose grading calls a model (each gets the recovery allowance of admission).
MODEL_GRADERS: frozenset[str] = frozenset(("paired_judge", "absolute_judge"))

#: Each grader kind's logic revision: part of its version, bumped when the code's answers change.
LOGIC: Mapping[str, int] = {"exact_match": 1, "contains": 1, "regex": 1, "json_schema": 1}
VERSION_SCHEME = "grader-version-v1"
_ID_HEX_CHARS = 32
#: A pattern longer than this is refused (Python's ``re`` has no time limit; keep patterns small).
MAX_PATTERN_CHARS = 1000
_ALLOWED: Mapping[str, frozenset[str]] = {
    "exact_match": frozenset(("value", "ignore_case", "strip")),
    "contains": frozenset(("value", "ignore_case")),
    "regex": frozenset(("pattern", "ignore_case", "capture")),
    "json_schema": frozenset(("schema",)),
}


class InvalidMetric(ValueError):
    """A grader or metric definition that cannot be used; ``field`` names the bad part
    relative to the metric (``params.pattern``, ``direction``)."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True, slots=True)
class Grade:
    """One grade: ``value`` is a bool (pass/fail), a str (a category) or None when not
    ``applicable``."""

    value: bool | str | None
    applicable: bool = True


def canonical(data: Any) -> str:
    """The canonical JSON text of ``data`` (sorted keys, no spaces): what versions hash."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def content_hash(data: Any, *, chars: int = _ID_HEX_CHARS) -> str:
    return hashlib.sha256(canonical(data).encode("utf-8")).hexdigest()[:chars]


def _flag(params: Mapping[str, Any], name: str, default: bool) -> bool:
    value = params.get(name, default)
    if not isinstance(value, bool):
        raise InvalidMetric(f"{name} must be true or false", f"params.{name}")
    return value


def check_grader(kind: str, params: Mapping[str, Any]) -> dict[str, Any]:
    """The grader's parameters, checked and with defaults filled in (so that equal graders
    written differently hash alike); :class:`InvalidMetric` names the bad one."""
    if kind not in _ALLOWED:
        raise InvalidMetric(f"grader must be one of {', '.join(GRADER_KINDS)}, got {kind!r}", "grader")
    unknown = sorted(set(params) - _ALLOWED[kind])
    if unknown:
        raise InvalidMetric(f"{kind} takes {', '.join(sorted(_ALLOWED[kind]))}; {unknown[0]!r} is unknown",
                            f"params.{unknown[0]}")
    out: dict[str, Any] = {}
    if kind in ("exact_match", "contains"):
        value = params.get("value")
        if value is not None and not isinstance(value, str):
            raise InvalidMetric("value must be a string (or absent: the item's expected output)", "params.value")
        if kind == "contains" and value == "":
            raise InvalidMetric("value must not be empty: every answer contains the empty string", "params.value")
        out["value"] = value
        out["ignore_case"] = _flag(params, "ignore_case", False)
        if kind == "exact_match":
            out["strip"] = _flag(params, "strip", True)
    elif kind == "regex":
        pattern = params.get("pattern")
        if not isinstance(pattern, str) or not pattern:
            raise InvalidMetric("pattern must be a non-empty string", "params.pattern")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise InvalidMetric(f"pattern must be at most {MAX_PATTERN_CHARS} characters", "params.pattern")
        out["pattern"] = pattern
        out["ignore_case"] = _flag(params, "ignore_case", False)
        out["capture"] = _flag(params, "capture", False)
        try:
            compiled = re.compile(pattern, re.IGNORECASE if out["ignore_case"] else 0)
        except re.error as exc:
            raise InvalidMetric(f"pattern is not a regular expression: {exc}", "params.pattern") from exc
        if out["capture"] and compiled.groups < 1:
            raise InvalidMetric("capture needs a group in the pattern, e.g. 'label: (\\w+)'", "params.pattern")
    else:
        import jsonschema  # here, not at the top: it takes ~0.15 s to import, and the CLI imports this module

        schema = params.get("schema")
        if not isinstance(schema, (dict, bool)):
            raise InvalidMetric("schema must be a JSON Schema (an object)", "params.schema")
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise InvalidMetric(f"schema is not a valid JSON Schema: {exc.message}", "params.schema") from exc
        remote = _remote_ref(schema)
        if remote is not None:
            raise InvalidMetric(f"schema refers to {remote!r}: only local references ('#/...') are "
                                "resolved; nothing is ever fetched", "params.schema")
        out["schema"] = schema
    return out


def _remote_ref(node: Any) -> str | None:
    """The first ``$ref`` of ``node`` that does not point inside the schema itself."""
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and not ref.startswith("#"):
            return ref
        children: Any = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _remote_ref(child)
        if found is not None:
            return found
    return None


def grader_direction(kind: str, params: Mapping[str, Any]) -> Direction:
    """The direction a grader's metric has unless told otherwise: a captured category is
    ``categorical``, a pass ``higher``."""
    return "categorical" if kind == "regex" and params.get("capture") else "higher"


def grader_version(kind: str, params: Mapping[str, Any]) -> str:
    """The exact version of a grader: a content hash of (scheme, kind, logic revision,
    canonical parameters). Call with :func:`check_grader`'s output."""
    return content_hash({"scheme": VERSION_SCHEME, "kind": kind, "logic": LOGIC[kind], "params": dict(params)})


def absolute_judge_version(*, model: str, rubric: str, scale: tuple[int, int], temperature: float,
                           max_tokens: int) -> str:
    """The version of an absolute judge (one answer scored alone on ``scale``): a content hash
    over its rubric text, model and parameters, in its own scheme, so it can never equal a
    paired judge's version."""
    return content_hash({"scheme": "absolute-judge-v1", "model": model, "rubric_text": rubric,
                         "scale": list(scale), "params": {"temperature": float(temperature) + 0.0,
                                                          "max_tokens": max_tokens}})


def builtin_version(kind: str) -> str:
    """Latency and cost are measured, not graded: their version names the measurement."""
    return content_hash({"scheme": "measure-v1", "kind": kind})


def check_direction(kind: str, direction: str, natural: Direction) -> Direction:
    """The metric's direction, refusing one its kind cannot have; :class:`InvalidMetric`."""
    if direction not in DIRECTIONS:
        raise InvalidMetric(f"direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}", "direction")
    if natural == "categorical" and direction != "categorical":
        raise InvalidMetric("a captured category has no order: its direction is categorical", "direction")
    if natural != "categorical" and direction == "categorical" and kind != "grader":
        raise InvalidMetric(f"a {kind} metric is numeric: higher or lower", "direction")
    if kind in ("latency", "cost") and direction != "lower":
        raise InvalidMetric(f"less {kind} is better: its direction is lower", "direction")
    if kind in ("paired_judge", "absolute_judge") and direction != "higher":
        raise InvalidMetric("a judge's score is better when higher", "direction")
    return direction  # type: ignore[return-value]


def family(kind: str) -> str:
    """The rubric family a metric's scores belong to; scores of two families never pool."""
    return {"paired_judge": "paired", "absolute_judge": "absolute"}.get(kind, kind)


def poolable(kind_a: str, version_a: str, kind_b: str, version_b: str) -> bool:
    """Whether two metrics' scores may be pooled or compared: same family, same exact version."""
    return family(kind_a) == family(kind_b) and version_a == version_b


def grade(kind: str, params: Mapping[str, Any], answer: str, expected: str | None) -> Grade:
    """Grade ``answer`` with a checked grader (:func:`check_grader`'s parameters)."""
    if kind in ("exact_match", "contains"):
        target = params.get("value")
        if target is None:
            target = expected
        if target is None:
            return Grade(None, applicable=False)
        got = answer
        if kind == "exact_match" and params.get("strip", True):
            got, target = got.strip(), target.strip()
        if params.get("ignore_case"):
            got, target = got.casefold(), target.casefold()
        return Grade(got == target if kind == "exact_match" else target in got)
    if kind == "regex":
        match = re.search(params["pattern"], answer, re.IGNORECASE if params.get("ignore_case") else 0)
        if params.get("capture"):
            return Grade(None if match is None else (match.group(1) or ""))
        return Grade(match is not None)
    if kind == "json_schema":
        import jsonschema
        import referencing.exceptions

        try:
            document = json.loads(answer)
        except ValueError:
            return Grade(False)
        validator = jsonschema.validators.validator_for(params["schema"])(params["schema"])
        try:
            return Grade(validator.is_valid(document))
        except referencing.exceptions.Unresolvable:  # a local $ref to nowhere (remote ones are refused)
            return Grade(False)
    raise InvalidMetric(f"grader must be one of {', '.join(GRADER_KINDS)}, got {kind!r}", "grader")
