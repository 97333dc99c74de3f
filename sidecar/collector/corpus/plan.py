"""A started comparison group as the runner and the results read it: its arms, metrics,
items and repetitions, decoded once from the stored group, its suite and its dataset
version (or slice). Also the worst-case arithmetic a group's spend is reserved with
(:mod:`policies.money`): nothing here calls a model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import msgspec

from judge.absolute import MAX_CALLS as ABSOLUTE_CALLS
from judge.absolute import RETRY_TEXT, render_messages
from judge.paired import MAX_CALLS_PER_JUDGMENT, judge_input_upper_bound
from judge.version import JudgeSpec
from policies.money import Price, input_tokens_upper_bound, worst_case_micros
from policies.prompt_templates import render
from policies.reservation import BYTES_PER_TOKEN_ESTIMATE
from sidecar.collector.corpus.datasets import slice_rows
from sidecar.collector.corpus.items import Item, decode_row
from sidecar.collector.corpus.targets import Target, TargetResolver
from sidecar.collector.store.base import CorpusStore
from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.trials.create import Resolved


@dataclass(frozen=True, slots=True)
class Arm:
    name: str
    model: str
    system_prompt: str | None
    settings: Mapping[str, Any]
    #: Given answers by item id (an A/B comparison's ``outputs``): scored, the target never called.
    outputs: Mapping[str, str] | None = None
    #: What ``model`` names (:mod:`sidecar.collector.corpus.targets`): a model alias or an agent.
    target_kind: str = "model"
    #: The pinned version of ``model`` (None: the alias itself).
    version: str | None = None
    #: A prompt side's template (:mod:`policies.prompt_templates`), rendered over each item.
    template: Mapping[str, str] | None = None

    @property
    def max_tokens(self) -> int:
        return int(self.settings["max_tokens"])

    def messages(self, item: Item) -> list[dict[str, Any]]:
        if self.template is not None:
            return render(self.template, item.messages, item.metadata)
        head = [] if self.system_prompt is None else [{"role": "system", "content": self.system_prompt}]
        return [*head, *(dict(m) for m in item.messages)]

    def judged_messages(self, item: Item) -> list[dict[str, Any]]:
        """The conversation the judges read beside this arm's answer: what was sent, except that a
        prompt side's template is left out — the judges grade the answer to the item's own
        question, never against one side's instructions."""
        if self.template is not None:
            return [dict(m) for m in item.messages]
        return self.messages(item)


@dataclass(frozen=True, slots=True)
class GroupPlan:
    comparison: ComparisonRecord
    arms: tuple[Arm, ...]
    metrics: tuple[Mapping[str, Any], ...]
    items: tuple[Item, ...]
    repetitions: int
    primary_metric: str
    tolerance: float

    @property
    def baseline(self) -> Arm:
        """The first arm: every other arm's paired judgment is against it."""
        return self.arms[0]

    @property
    def planned_per_arm(self) -> int:
        return len(self.items) * self.repetitions


async def suite_items(store: CorpusStore, suite_id: str) -> tuple[list[Mapping[str, Any]], list[Item]]:
    """The suite's pinned metrics and its items (the dataset version, or the slice of it)."""
    suite = await store.get_suite(suite_id)
    if suite is None:
        return [], []
    rows = await store.version_items(suite.dataset_id, suite.dataset_version)
    if suite.slice_name is not None:
        for s in await store.list_slices(suite.dataset_id):
            if s.name == suite.slice_name and s.version == suite.slice_version:
                rows = slice_rows(rows, s.filter)
    return list(msgspec.json.decode(suite.metrics)), [decode_row(r) for r in rows]


async def load_plan(store: CorpusStore, comparison: ComparisonRecord) -> GroupPlan:
    spec = msgspec.json.decode(comparison.spec)
    readiness = msgspec.json.decode(comparison.readiness)
    metrics, items = await suite_items(store, comparison.suite_id)
    arms = tuple(Arm(a["name"], a["model"], a.get("system_prompt"), r["settings"], a.get("outputs"),
                     a.get("target_kind") or a.get("kind") or "model", a.get("version"), a.get("template"))
                 for a, r in zip(spec["arms"], readiness["arms"]))
    return GroupPlan(comparison, arms, tuple(metrics), tuple(items), int(spec["repetitions"]),
                     spec["primary_metric"], float(spec.get("tolerance") or DEFAULT_TOLERANCE))


#: Parity band of a corpus result, on the win-rate scale (DESIGN.md section 8's delta).
DEFAULT_TOLERANCE = 0.05


def _texts(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(m.get("content", "")) for m in messages]


def generation_worst_case(price: Price, arm: Arm, item: Item) -> int:
    messages = arm.messages(item)
    return worst_case_micros(price, input_tokens_upper_bound(*_texts(messages), messages=len(messages)), arm.max_tokens)


def target_worst_case(target: Target, arm: Arm, item: Item) -> int | None:
    """One generation's reservation: from the list price, or an agent's declared per-call
    ceiling when its cost is unknown; None when neither bounds it."""
    if target.price is not None:
        return generation_worst_case(target.price, arm, item)
    return target.ceiling_micros


ArmTarget = Callable[[Arm], Target]


def default_target(resolve: Callable[[str], Resolved]) -> ArmTarget:
    """An arm's target through the plain model resolver (no versions, no agents)."""
    def target(arm: Arm) -> Target:
        r = resolve(arm.model)
        return Target("model", r.provider, r.upstream, r.price)
    return target


def arm_targets(targets: TargetResolver | None, resolve: Callable[[str], Resolved]) -> ArmTarget:
    """An arm's target: through ``targets`` (versions, agents) when configured, else the plain resolver.
    Raises ``LookupError`` (a :class:`~sidecar.collector.corpus.targets.TargetError` naming its part)."""
    if targets is None:
        return default_target(resolve)
    resolver = targets

    def target(arm: Arm) -> Target:
        return resolver(arm.target_kind, arm.model, arm.version)
    return target


def paired_spec(metric: Mapping[str, Any]) -> JudgeSpec:
    s = metric["spec"]
    return JudgeSpec(name=metric["name"], model=s["model"], rubric_id=s["rubric_id"], temperature=s["temperature"],
                     max_tokens=s["max_tokens"], parser_version=s["parser_version"])


def paired_worst_case(price: Price, metric: Mapping[str, Any], conversation: Sequence[Mapping[str, Any]],
                      baseline: str, candidate: str) -> int:
    spec = paired_spec(metric)
    bound = judge_input_upper_bound(conversation, baseline, candidate, spec)
    return MAX_CALLS_PER_JUDGMENT * worst_case_micros(price, bound, spec.max_tokens)


def absolute_worst_case(price: Price, metric: Mapping[str, Any], conversation: Sequence[Mapping[str, Any]],
                        answer_bytes: int) -> int:
    s = metric["spec"]
    first = render_messages(s["rubric_text"], conversation, "")
    bound = input_tokens_upper_bound(*_texts(first), RETRY_TEXT, messages=4) + answer_bytes + s["max_tokens"]
    return ABSOLUTE_CALLS * worst_case_micros(price, bound, s["max_tokens"])


def plan_worst_case(arms: Sequence[Arm], metrics: Sequence[Mapping[str, Any]], items: Sequence[Item],
                    repetitions: int, resolve: Callable[[str], Resolved],
                    target: ArmTarget | None = None) -> int | None:
    """The most the whole group can cost (every generation at ``max_tokens`` or an agent's
    declared ceiling, every model grader at its call limit, answers at a typical
    bytes-per-token); None when a model has no list price. A start's default cap. ``target``
    resolves an arm's generation target (default: ``resolve`` on its model)."""
    arm_target = target or default_target(resolve)
    total = 0
    for arm in arms:
        goes_to = None if arm.outputs is not None else arm_target(arm)
        if goes_to is not None and not goes_to.bounded:
            return None
        answer = "x" * (arm.max_tokens * BYTES_PER_TOKEN_ESTIMATE)
        for item in items:
            per_rep = 0 if goes_to is None else (target_worst_case(goes_to, arm, item) or 0)
            conversation = arm.judged_messages(item)
            for m in metrics:
                judge_price = resolve(m["spec"]["model"]).price if m["kind"] in ("paired_judge", "absolute_judge") \
                    else None
                if m["kind"] == "absolute_judge":
                    if judge_price is None:
                        return None
                    per_rep += absolute_worst_case(judge_price, m, conversation, len(answer))
                elif m["kind"] == "paired_judge" and arm is not arms[0]:
                    if judge_price is None:
                        return None
                    # The runner's paired judge reads the baseline's conversation, not this arm's.
                    per_rep += paired_worst_case(judge_price, m, arms[0].judged_messages(item), answer, answer)
            total += per_rep * repetitions
    return total
