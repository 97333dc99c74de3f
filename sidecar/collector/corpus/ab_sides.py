"""The two sides of an A/B comparison: what each one is, what it calls, and given answers.

**A side** is ``{"type", "ref", "version"}`` plus, for a prompt, ``template`` and ``model``:

* ``model`` — the model alias ``ref``; a ``version`` runs the upstream model the alias's
  ``versions`` table maps it to (``[models.ALIAS.versions]``). A version the alias does not
  map is refused (``comparison_invalid`` at ``$.<side>.version``), never run as the
  unversioned model.
* ``agent`` — a registered OpenAI-compatible endpoint ``[agents.ref]``
  (:mod:`sidecar.config.agents`): called with each item's conversation, at its ``version``
  from the agent's ``versions`` table; priced by its own list price, or — of unknown cost —
  reserved and charged its declared per-call ceiling; an agent of unknown cost without a
  ceiling is refused (``spend_unbounded``).
* ``prompt`` — a prompt template (:mod:`policies.prompt_templates`, carried inline as
  ``template: {system, user}``) rendered over each item and sent to the model alias
  ``model``. ``ref`` and ``version`` name the prompt; the template's content hash is what
  pins the version: one ``(ref, version)`` with two different templates is refused.

An empty ``version`` (``""``, the screen's default) is no version. With ``outputs`` for a
side nothing is called for it: its ``version`` is recorded as the label of the answers.

**Outputs** per side: a list (one answer per case, in the suite's item order; its length
must be the number of items) or a map ``{item id: answer}``; an empty list or map (the
screen's default ``{"baseline": [], "candidate": []}``) gives nothing, and the side runs.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from policies.prompt_templates import TemplateError, check_template, template_hash
from sidecar.collector.corpus.errors import ComparisonInvalid, Unprocessable
from sidecar.collector.corpus.items import Item
from sidecar.collector.corpus.targets import Target, TargetError, TargetResolver
from sidecar.trials.create import Resolved

SIDES = ("baseline", "candidate")
TYPES = ("model", "agent", "prompt")
SIDE_FIELDS = ("type", "ref", "version", "template", "model")
#: Given answers as sent: a list in item order, or a map by item id.
Given = list[str] | dict[str, str]


def _invalid(message: str, field: str) -> ComparisonInvalid:
    return ComparisonInvalid(message, field=field)


def check_side(body: Mapping[str, Any], side: str) -> dict[str, Any]:
    """One side, checked (module docs); ``comparison_invalid`` naming the field."""
    raw = body.get(side)
    if not isinstance(raw, dict):
        raise _invalid(f"{side} must be an object {{type, ref, version}}", f"$.{side}")
    for name in raw:
        if name not in SIDE_FIELDS:
            raise _invalid(f"{side} takes {', '.join(SIDE_FIELDS)}; {name!r} is unknown", f"$.{side}.{name}")
    kind = raw.get("type", "model")
    if kind not in TYPES:
        raise _invalid(f"{side}.type must be one of {', '.join(TYPES)}, got {kind!r}", f"$.{side}.type")
    ref = raw.get("ref")
    if not isinstance(ref, str) or not ref.strip():
        raise _invalid(f"{side} needs a ref (the model, agent or prompt it names)", f"$.{side}.ref")
    version = raw.get("version")
    if version is not None and (isinstance(version, bool) or not isinstance(version, (str, int))):
        raise _invalid(f"{side}.version must be a string", f"$.{side}.version")
    out: dict[str, Any] = {"type": kind, "ref": ref,
                           "version": None if version is None or str(version) == "" else str(version)}
    for name in ("template", "model"):
        if name in raw and kind != "prompt":
            raise _invalid(f"only a prompt side has a {name}; this side is a {kind}", f"$.{side}.{name}")
    if "template" in raw:
        try:
            out["template"] = check_template(raw["template"])
        except TemplateError as exc:
            raise _invalid(exc.message, f"$.{side}.template" + (f".{exc.part}" if exc.part else "")) from exc
        out["template_hash"] = template_hash(out["template"])
    if "model" in raw:
        model = raw["model"]
        if not isinstance(model, str) or not model.strip():
            raise _invalid(f"{side}.model names the model alias the prompt is sent to", f"$.{side}.model")
        out["model"] = model
    return out


def check_outputs(outputs: Any) -> dict[str, Given]:
    """The given answers per side (empty ones left out: that side runs)."""
    given: dict[str, Given] = {}
    if outputs is None:
        return given
    if not isinstance(outputs, dict):
        raise _invalid("outputs must be an object: {\"baseline\": [answers in item order] or {item id: answer}, "
                       "\"candidate\": …}", "$.outputs")
    for side, answers in outputs.items():
        if side not in SIDES:
            raise _invalid(f"outputs are given per side ({', '.join(SIDES)}); {side!r} is not one", f"$.outputs.{side}")
        if isinstance(answers, list):
            for n, text in enumerate(answers):
                if not isinstance(text, str):
                    raise _invalid(f"outputs.{side}[{n}] must be an answer text", f"$.outputs.{side}[{n}]")
        elif not isinstance(answers, dict) or not all(isinstance(v, str) for v in answers.values()):
            raise _invalid(f"outputs.{side} must be a list of answer texts (one per case, in order) or map item ids "
                           "to answer texts", f"$.outputs.{side}")
        if answers:
            given[side] = answers
    return given


def check_pair(sides: Mapping[str, Mapping[str, Any]], given: Mapping[str, Given]) -> None:
    """What needs both sides and the outputs: equal sides, a prompt version naming two templates,
    a side that has nothing to run."""
    if sides["baseline"] == sides["candidate"]:
        raise _invalid("baseline and candidate are the same (type, ref and version): nothing to compare",
                       "$.candidate")
    b, c = sides["baseline"], sides["candidate"]
    if b["type"] == c["type"] == "prompt" and (b["ref"], b["version"]) == (c["ref"], c["version"]) \
            and b.get("template_hash") != c.get("template_hash"):
        raise _invalid(f"prompt {c['ref']!r} version {c['version']!r} names two different templates: give each "
                       "template its own version", "$.candidate.version")
    for side in SIDES:
        s = sides[side]
        if side in given or s["type"] != "prompt":
            continue
        for name in ("template", "model"):
            if name not in s:
                raise _invalid(f"the {side} is a prompt: give its template {{system, user}} and the model it is "
                               f"sent to, or its answers in outputs.{side}", f"$.{side}.{name}")


def outputs_by_item(side: str, answers: Given, items: Sequence[Item]) -> dict[str, str]:
    """Given answers keyed by item id; a list must hold one answer per item, in item order."""
    if isinstance(answers, dict):
        return answers
    if len(answers) != len(items):
        raise _invalid(f"outputs.{side} gives {len(answers)} answers for the suite's {len(items)} items: one answer "
                       "per case, in item order", f"$.outputs.{side}")
    return {item.id: text for item, text in zip(items, answers)}


def model_targets(resolve: Callable[[str], Resolved]) -> TargetResolver:
    """Without configured targets: plain model aliases, no versions, no agents."""
    def target(kind: str, ref: str, version: str | None) -> Target:
        if kind == "agent":
            raise TargetError(f"agent {ref!r} is not registered", "ref")
        if version is not None:
            raise TargetError(f"model {ref!r} has no version {version!r} to pin", "version")
        try:
            r = resolve(ref)
        except LookupError as exc:
            raise TargetError(str(exc), "ref") from exc
        return Target("model", r.provider, r.upstream, r.price)
    return target


def side_target(side: str, s: Mapping[str, Any], targets: TargetResolver | None,
                resolve: Callable[[str], Resolved]) -> tuple[str, str, str | None, Target]:
    """What a side without outputs calls: ``(target kind, model or agent name, version, target)``.
    Refusals name the field: ``comparison_invalid`` for a version it cannot pin or an unknown
    agent, ``model_unresolved`` for an unknown model, ``spend_unbounded`` for a cost without a bound."""
    resolver = targets or model_targets(resolve)
    if s["type"] == "prompt":
        kind, name, version, field = "model", s["model"], None, f"$.{side}.model"
    else:
        kind, name, version, field = s["type"], s["ref"], s["version"], f"$.{side}.ref"
    try:
        target = resolver(kind, name, version)
    except TargetError as exc:
        if exc.part == "version":
            raise _invalid(exc.message, f"$.{side}.version") from exc
        if exc.part == "cost":
            raise Unprocessable(exc.message, field=field, code="spend_unbounded") from exc
        if kind == "agent":
            raise _invalid(exc.message, field) from exc
        raise Unprocessable(exc.message, field=field, code="model_unresolved") from exc
    if not target.bounded:
        raise Unprocessable(f"model {name!r} has no list price: the spend could not be capped", field=field,
                            code="spend_unbounded")
    return kind, name, version, target


def pinned(target: Target, s: Mapping[str, Any]) -> dict[str, Any]:
    """What a side is pinned to, as the comparison shows it."""
    out: dict[str, Any] = {"kind": target.kind, "provider": target.provider, "upstream_model": target.upstream,
                           "priced": target.price is not None}
    if target.ceiling_micros is not None and target.price is None:
        out["cost"] = "unknown"
        out["reserved_per_call_micros"] = target.ceiling_micros
    if "template_hash" in s:
        out["template_hash"] = s["template_hash"]
    return out
