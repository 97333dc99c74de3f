"""Planned invocations, admission and arm differences (policies/experiments.py)."""

from __future__ import annotations

from policies.experiments import (
    INVOCATION_LIMIT,
    ArmFacts,
    admit,
    differences,
    model_graders_of,
    plan_arm,
    prompt_hash,
)
from policies.slices import SliceFilter, keeps


def test_an_arm_plans_generations_plus_five_attempts_per_judgment() -> None:
    """Issue 24, item 6: each judgment of a model grader counts its five-attempt recovery
    allowance; before, a grader counted 5 whatever it judged (995 judgments counted 5)."""
    plan = plan_arm("a", items=200, repetitions=3, model_graders=2)
    assert (plan.generations, plan.judgments, plan.grader_allowance, plan.total) == (600, 1200, 6000, 6600)
    judged = plan_arm("next", items=995, repetitions=1, model_graders=1)
    assert (judged.judgments, judged.grader_allowance, judged.total) == (995, 4975, 5970)
    given = plan_arm("given", items=200, repetitions=1, model_graders=1, generates=False)  # answers given
    assert (given.generations, given.total) == (0, 1000)


def test_which_model_graders_grade_an_arm() -> None:
    kinds = ["paired_judge", "absolute_judge", "grader", "latency", "cost"]
    assert model_graders_of(kinds, baseline=True) == 1  # the absolute judge; the pair is judged under the other arm
    assert model_graders_of(kinds, baseline=False) == 2
    assert model_graders_of(["grader", "latency", "cost"], baseline=False) == 0  # assertions call nothing


def test_exactly_the_limit_is_admitted_and_one_more_is_refused() -> None:
    at = plan_arm("a", items=200, repetitions=5, model_graders=0)  # 1,000 generations
    over = plan_arm("b", items=167, repetitions=1, model_graders=1)  # 167 + 5 x 167 = 1,002
    judged_at = plan_arm("c", items=200, repetitions=1, model_graders=1, generates=False)  # 5 x 200
    assert at.total == judged_at.total == INVOCATION_LIMIT and over.total == INVOCATION_LIMIT + 2
    assert admit([at, judged_at]).admitted
    refused = admit([at, over])
    assert not refused.admitted and refused.over == (over,) and refused.group_total == 2002


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
