"""A group's planned worst case (``plan_worst_case``) against what the runner reserves: the
paired judge reads the *baseline's* conversation, so a long baseline system prompt must be
planned for on every paired judgment (it was planned on the other arm's conversation)."""

from __future__ import annotations

from typing import Any

from policies.money import Price
from sidecar.collector.corpus.items import Item
from sidecar.collector.corpus.plan import Arm, generation_worst_case, paired_worst_case, plan_worst_case
from sidecar.trials.create import Resolved

PRICE = Price(1_000_000, 4_000_000)
PAIRED: dict[str, Any] = {"name": "pref", "kind": "paired_judge", "version": "v", "direction": "higher",
                          "spec": {"model": "judge", "rubric_id": "pairwise-v1", "temperature": 0.0,
                                   "max_tokens": 64, "parser_version": "1"}}


def resolve(name: str) -> Resolved:
    return Resolved("local", name, PRICE)


def test_the_plan_covers_the_paired_judge_over_a_long_baseline_system_prompt() -> None:
    settings = {"max_tokens": 32}
    baseline = Arm("baseline", "m", "policy " * 3_000, settings)
    candidate = Arm("candidate", "m", None, settings)
    items = [Item(f"i{n}", f"r{n}", ({"role": "user", "content": f"question {n}"},), None, (), {}) for n in range(3)]
    planned = plan_worst_case([baseline, candidate], [PAIRED], items, 1, resolve)
    answer = "x" * (32 * 4)
    # What the runner reserves: each generation's worst case, and each judgment over the baseline's conversation.
    reserved = sum(generation_worst_case(PRICE, arm, item) for arm in (baseline, candidate) for item in items)
    reserved += sum(paired_worst_case(PRICE, PAIRED, baseline.judged_messages(item), answer, answer)
                    for item in items)
    assert planned is not None and planned >= reserved
