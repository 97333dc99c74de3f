"""Judge specs and judge versions.

A :class:`JudgeSpec` is what an operator configures. Its :class:`JudgeVersion`
carries a content-hash id over everything that can change a score: the rubric
*text* (not just its id), the judge model, the call parameters (temperature,
max_tokens) and the label-parser version. Any change to one of them is a new
id; equal content is the same id whatever the readable name. A trial pins one
version at creation, and scores of different versions are never pooled.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

from judge.errors import InvalidJudgeSpec
from judge.labels import PARSER_VERSION
from judge.rubric import DEFAULT_PAIRWISE_RUBRIC, get_rubric

VERSION_SCHEME = "judge-version-v1"
_ID_HEX_CHARS = 32  # 128 bits of sha256: collisions are not a practical concern


@dataclass(frozen=True, slots=True)
class JudgeSpec:
    """A judge as configured.

    ``name`` is for people and does not enter the version id. ``temperature``
    defaults to 0 (the judge is meant to be deterministic); ``max_tokens``
    bounds every judge call's output and therefore its worst-case cost.
    Raises :class:`InvalidJudgeSpec` for an empty name or model, a negative or
    non-finite temperature, or ``max_tokens < 1``.
    """

    name: str
    model: str
    rubric_id: str = DEFAULT_PAIRWISE_RUBRIC
    temperature: float = 0.0
    max_tokens: int = 1024
    parser_version: str = PARSER_VERSION

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise InvalidJudgeSpec("judge name must not be empty")
        if not self.model.strip():
            raise InvalidJudgeSpec("judge model must not be empty")
        if isinstance(self.temperature, bool) or not isinstance(self.temperature, (int, float)):
            raise InvalidJudgeSpec("judge temperature must be a number")
        if not math.isfinite(self.temperature) or self.temperature < 0:
            raise InvalidJudgeSpec(f"judge temperature must be finite and >= 0, got {self.temperature!r}")
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidJudgeSpec(f"judge max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if not self.parser_version.strip():
            raise InvalidJudgeSpec("judge parser_version must not be empty")


@dataclass(frozen=True, slots=True)
class JudgeVersion:
    """A judge version: content-hash ``id`` plus the readable facts it was made from."""

    id: str
    name: str
    model: str
    rubric_id: str
    temperature: float
    max_tokens: int
    parser_version: str

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "name": self.name,
            "model": self.model,
            "rubric_id": self.rubric_id,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "parser_version": self.parser_version,
        }


def judge_version(spec: JudgeSpec) -> JudgeVersion:
    """The version of ``spec``: sha256 over (rubric text, model, parameters, parser version).

    Raises :class:`judge.errors.UnknownRubric` if the spec's rubric id is not registered.
    """
    rubric = get_rubric(spec.rubric_id)
    temperature = float(spec.temperature) + 0.0  # 0, 0.0 and -0.0 are the same judge
    content = {
        "scheme": VERSION_SCHEME,
        "rubric_text": rubric.text,
        "model": spec.model,
        "params": {"temperature": temperature, "max_tokens": spec.max_tokens},
        "parser_version": spec.parser_version,
    }
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:_ID_HEX_CHARS]
    return JudgeVersion(
        id=digest,
        name=spec.name,
        model=spec.model,
        rubric_id=spec.rubric_id,
        temperature=temperature,
        max_tokens=spec.max_tokens,
        parser_version=spec.parser_version,
    )
