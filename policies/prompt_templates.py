"""A prompt side's template, rendered over one dataset item (pure).

The minimal shape an A/B ``prompt`` side carries inline (a store of templates with versions
is a separate piece)::

    {"system": "You answer support questions briefly.",      (optional)
     "user": "Customer question: {{input}}\\nProduct: {{metadata.product}}"}

Placeholders: ``{{input}}`` — the text of the item's last user message — and
``{{metadata.KEY}}`` — a value of the item's metadata (empty when the item has none). Any
other ``{{…}}`` is refused when the side is checked, never left in a sent prompt.

Rendering: the item's conversation with its last user message replaced by the rendered
``user`` text (appended when it has none), preceded by ``system`` when given.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Mapping, Sequence

PLACEHOLDER = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
FIELDS = ("system", "user")
MAX_CHARS = 200_000


class TemplateError(ValueError):
    def __init__(self, message: str, part: str) -> None:
        super().__init__(message)
        self.message = message
        self.part = part  # "" (the template itself), "system" or "user"


def check_template(raw: Any) -> dict[str, str]:
    """The template, checked; :class:`TemplateError` naming the part at fault."""
    if not isinstance(raw, dict):
        raise TemplateError("a template is an object {system, user}", "")
    for name in raw:
        if name not in FIELDS:
            raise TemplateError(f"a template takes {', '.join(FIELDS)}; {name!r} is unknown", str(name))
    out: dict[str, str] = {}
    for name in FIELDS:
        value = raw.get(name)
        if value is None and name == "system":
            continue
        if not isinstance(value, str) or not value.strip() or len(value) > MAX_CHARS:
            raise TemplateError(f"template.{name} must be a non-empty string of at most {MAX_CHARS:,} characters",
                                name)
        for found in PLACEHOLDER.finditer(value):
            key = found.group(1)
            if key != "input" and not (key.startswith("metadata.") and len(key) > len("metadata.")):
                raise TemplateError(f"template.{name} uses {{{{{key}}}}}; the placeholders are {{{{input}}}} and "
                                    "{{metadata.KEY}}", name)
        out[name] = value
    return out


def template_hash(template: Mapping[str, str]) -> str:
    """The template's identity: the same text is the same hash, any edit another."""
    text = json.dumps(dict(template), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return "tpl_" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:24]


def _fill(text: str, user_input: str, metadata: Mapping[str, Any]) -> str:
    def one(found: re.Match[str]) -> str:
        key = found.group(1)
        if key == "input":
            return user_input
        value = metadata.get(key[len("metadata."):])
        return "" if value is None else str(value)

    return PLACEHOLDER.sub(one, text)


def render(template: Mapping[str, str], messages: Sequence[Mapping[str, Any]],
           metadata: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The messages sent for one item (module docs)."""
    convo = [dict(m) for m in messages]
    last = max((n for n, m in enumerate(convo) if m.get("role") == "user"), default=None)
    user_input = "" if last is None else str(convo[last].get("content", ""))
    turn = {"role": "user", "content": _fill(template["user"], user_input, metadata)}
    if last is None:
        convo.append(turn)
    else:
        convo[last] = turn
    head = [] if template.get("system") is None else [
        {"role": "system", "content": _fill(template["system"], user_input, metadata)}]
    return [*head, *convo]
