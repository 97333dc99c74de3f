"""Planned invocations, admission and arm differences (policies/experiments.py)."""

from __future__ import annotations

from policies.experiments import INVOCATION_LIMIT, ArmFacts, admit, differences, plan_arm, prompt_hash
from policies.slices import SliceFilter, keeps


def test_an_arm_plans_generations_plus_each_model_graders_allowance() -> None:
    plan = plan_arm("a", items=200, repetitions=3, model_graders=2)
    assert (plan.generations, plan.grader_allowance, plan.total) == (600, 10, 610)


def test_exactly_the_limit_is_admitted_and_one_more_is_refused() -> None:
    at = plan_arm("a", items=199, repetitions=5, model_graders=1)  # 995 + 5
    over = plan_arm("b", items=332, repetitions=3, model_graders=1)  # 996 + 5
    assert at.total == INVOCATION_LIMIT and over.total == INVOCATION_LIMIT + 1
    assert admit([at, at]).admitted
    refused = admit([at, over])
    assert not refused.admitted and refused.over == (over,) and refused.group_total == 2001


def test_differences_beyond_the_model() -> None:
    a = ArmFacts("a", "m1", None, prompt_hash("be brief"), {"max_tokens": 256, "temperature": 0.0})
    b = ArmFacts("b", "m2", None, prompt_hash("be brief"), {"max_tokens": 256, "temperature": 0.0})
    assert differences([a, b]) == []
    c = ArmFacts("c", "m2", "/chat", prompt_hash("be verbose"), {"max_tokens": 256, "top_p": 0.9})
    assert differences([a, c]) == [
        {"setting": "route", "values": [None, "/chat"]},
        {"setting": "system_prompt", "values": [a.prompt_hash, c.prompt_hash]},
        {"setting": "params.temperature", "values": [0.0, None]},
        {"setting": "params.top_p", "values": [None, 0.9]},
    ]


def test_slice_filters() -> None:
    assert keeps(SliceFilter(), [], {})
    f = SliceFilter(tags_all=("hard",), tags_any=("billing", "refunds"), metadata={"lang": "fr"})
    assert keeps(f, ["hard", "billing"], {"lang": "fr"})
    assert not keeps(f, ["billing"], {"lang": "fr"})
    assert not keeps(f, ["hard"], {"lang": "fr"})
    assert not keeps(f, ["hard", "refunds"], {"lang": "en"})
    assert keeps(SliceFilter(metadata={"x": None}), [], {})
