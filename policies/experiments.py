"""Comparison groups before they run: planned invocations, admission, what differs between
arms (issue 13, item 3). Pure: plain data in, plain data out; nothing here calls a model.

**Planned invocations.** Admission is decided per arm — each arm is one experiment, and
"all arms launch together after every arm passes admission" — so an arm plans

    items x repetitions                            generation executions (none for given answers)
    + RECOVERY_ATTEMPTS x judgments                each judgment's five-attempt recovery allowance

where a judgment is one model grader's grading of one of the arm's answers: every answer
(items x repetitions) once per model grader grading the arm — the absolute judge grades every
arm, the paired judge every arm but the baseline (it judges each against the baseline's answer
of the same item and repetition). Deterministic graders, latency and cost (assertions) call
nothing. So 995 planned judgments count 4,975 invocations, not 5 (issue 24, item 6: "each
model/tool grader's current five-attempt worker recovery allowance"). A group is admitted only when
every arm plans at most :data:`INVOCATION_LIMIT`; the refusal
(``comparison_invocation_limit``) names each arm over it with its count. The limit is
never raised automatically. (The group's total, reported beside, counts both arms'
generations: corpus evidence dispatches every arm.)

**Differences.** Readiness shows what differs between arms *beyond the model*: the route,
the system prompt (by hash) and each parameter, so an operator sees that an "A/B of two
models" is not also an A/B of two prompts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

INVOCATION_LIMIT = 1000
RECOVERY_ATTEMPTS = 5
MIN_ARMS, MAX_ARMS = 2, 5
MIN_REPETITIONS, MAX_REPETITIONS = 1, 5


@dataclass(frozen=True, slots=True)
class ArmPlan:
    """What one arm plans: its generations, its judgments' recovery allowance (five attempts
    each), the sum; ``judgments`` the judgments themselves."""

    arm: str
    generations: int
    grader_allowance: int
    judgments: int = 0

    @property
    def total(self) -> int:
        return self.generations + self.grader_allowance


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    limit: int
    over: tuple[ArmPlan, ...]
    group_total: int


def plan_arm(arm: str, *, items: int, repetitions: int, model_graders: int, generates: bool = True) -> ArmPlan:
    """The planned invocations of one arm (see the module's docs): ``model_graders`` grade each
    of its answers (:func:`model_graders_of`); ``generates`` False when its answers are given."""
    if items < 0 or repetitions < 1 or model_graders < 0:
        raise ValueError("items >= 0, repetitions >= 1, model_graders >= 0")
    answers = items * repetitions
    judgments = answers * model_graders
    return ArmPlan(arm, answers if generates else 0, RECOVERY_ATTEMPTS * judgments, judgments)


def model_graders_of(kinds: Sequence[str], *, baseline: bool) -> int:
    """How many model graders grade each answer of an arm, from the suite's metric kinds: every
    absolute judge; every paired judge unless the arm is the baseline (its answers are the
    reference of each pair, judged once, under the other arm)."""
    return sum(1 for k in kinds if k == "absolute_judge" or (k == "paired_judge" and not baseline))


def admit(plans: Sequence[ArmPlan], *, limit: int = INVOCATION_LIMIT) -> Admission:
    """Admit the group when every arm plans at most ``limit`` invocations (exactly ``limit``
    is admitted)."""
    over = tuple(p for p in plans if p.total > limit)
    return Admission(not over, limit, over, sum(p.total for p in plans))


def prompt_hash(system_prompt: str | None) -> str | None:
    """A system prompt's identity in readiness answers (sha256, hex); None without one."""
    if system_prompt is None:
        return None
    return hashlib.sha256(system_prompt.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class ArmFacts:
    """An arm as readiness compares it."""

    name: str
    model: str
    route: str | None
    prompt_hash: str | None
    params: Mapping[str, Any]


def differences(arms: Sequence[ArmFacts]) -> list[dict[str, Any]]:
    """Each setting beyond the model whose value is not the same on every arm, in a stable
    order (route, system prompt, then parameters by name): ``{"setting", "values"}`` with
    one value per arm (None where an arm leaves it unset)."""
    out: list[dict[str, Any]] = []

    def compare(setting: str, values: list[Any]) -> None:
        if any(v != values[0] for v in values[1:]):
            out.append({"setting": setting, "values": values})

    compare("route", [a.route for a in arms])
    compare("system_prompt", [a.prompt_hash for a in arms])
    for name in sorted({k for a in arms for k in a.params}):
        compare(f"params.{name}", [a.params.get(name) for a in arms])
    return out
