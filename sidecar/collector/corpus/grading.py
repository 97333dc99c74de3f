"""Grading one answer for the runner (:mod:`sidecar.collector.corpus.runner`): the deterministic kinds
(graders, latency, cost) as plain functions, the absolute judge's calls with a suite's own
rubric text and scale, and what a call is charged.

The absolute judge ends its reply with exactly one ``[[rating: N]]``, N in the metric's
scale; none gets one retry asking for the rating alone (:data:`judge.absolute.RETRY_TEXT`);
several distinct ratings, none after the retry, or a failed call is an error — never a
middle score.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any, Mapping, Sequence

from judge.absolute import RETRY_TEXT, render_messages
from judge.completer import Completer, Completion
from policies.graders import grade
from policies import spend
from policies.money import Cost, Price
from sidecar.collector.corpus.items import Item
from sidecar.providers.base import ProviderResult
from sidecar.collector.store.corpus_run_records import ScoreRecord

_RATING = re.compile(r"\[\[\s*rating\s*:\s*(-?\d+)\s*\]\]", re.IGNORECASE)


def charge_of(price: Price | None, result: ProviderResult, reserved: int) -> tuple[Cost, int]:
    """A generation's cost and charge, as a trial's candidate call is settled (:mod:`policies.spend`):
    nothing for a call refused before any work; the priced usage when complete; the whole
    reservation held when the cost is not fully known (never zero), never more."""
    if not (result.ok or result.may_have_billed):
        return spend.NOTHING.cost, 0
    charge = spend.charge_usage(price, result.input_tokens, result.output_tokens, reserved)
    cost = charge.cost
    if result.unknown_fate_attempts and cost.coverage == "complete":
        cost = Cost(cost.known_micros, "partial")  # an earlier attempt of this call may have been billed too
    return cost, charge.charged_micros


def judge_charge(price: Price | None, completions: Sequence[Completion], per_call_worst: int) -> tuple[Cost, int]:
    """The cost and charge of a judgment's calls, each settled like a trial's judge call."""
    charges = [spend.charge_usage(price, c.input_tokens, c.output_tokens, per_call_worst) for c in completions
               if c.ok or c.may_have_billed or c.input_tokens is not None or c.output_tokens is not None]
    charged, cost, _, _, _ = spend.total(charges)
    return cost, charged


def plain_grade(base: ScoreRecord, metric: Mapping[str, Any], item: Item, answer: str, latency_ms: float,
                cost: Cost) -> ScoreRecord | None:
    """A grader's, latency's or cost's score of one answer; None for the model graders."""
    kind = metric["kind"]
    if kind == "grader":
        spec = dict(metric["spec"])
        g = grade(spec.pop("type"), spec, answer, item.expected)
        if not g.applicable:
            return replace(base, status="not_applicable")
        if isinstance(g.value, str):
            return replace(base, category=g.value)
        return replace(base, value=1.0 if g.value else 0.0)
    if kind == "latency":
        return replace(base, value=float(latency_ms))
    if kind == "cost":
        if cost.coverage != "complete":  # unknown is never zero: no score
            return replace(base, status="error", detail=json.dumps({"error": f"cost_{cost.coverage}"}))
        return replace(base, value=float(cost.known_micros))
    return None


async def absolute_rating(completer: Completer, spec: Mapping[str, Any], conversation: list[dict[str, Any]],
                          answer: str) -> tuple[int | None, str | None, tuple[Completion, ...]]:
    """(rating, error, every call made) of one answer by an absolute judge metric's ``spec``."""
    messages: list[dict[str, object]] = [dict(m) for m in render_messages(spec["rubric_text"], conversation, answer)]
    low, high = spec["scale"]
    completions: list[Completion] = []
    error: str | None = None
    for _ in range(2):
        c = await completer.complete(spec["model"], messages, temperature=spec["temperature"],
                                     max_tokens=spec["max_tokens"])
        completions.append(c)
        if not c.ok:
            return None, f"judge_call_failed:{c.error or 'unknown'}", tuple(completions)
        found = {int(x) for x in _RATING.findall(c.text) if low <= int(x) <= high}
        if len(found) == 1:
            return found.pop(), None, tuple(completions)
        if len(found) > 1:
            return None, "conflicting_ratings", tuple(completions)
        error = "no_rating"
        messages = [*messages, {"role": "assistant", "content": c.text}, {"role": "user", "content": RETRY_TEXT}]
    return None, error, tuple(completions)
