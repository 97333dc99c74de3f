"""Render the paired judge's messages.

The judge sees: a system message with the rubric text, and one user message
holding the user's conversation followed by the two answers, labelled only
"Assistant A" and "Assistant B" (A always before B). No model name, provider or
trial detail is ever rendered: this module is not even given them.

The conversation is in the OpenAI chat shape. Each message is rendered as a
``[role]`` header and its content; content may be a string or a list of parts,
whose text parts are rendered and whose other parts (images, audio, files) are
replaced by a placeholder such as ``[image_url part omitted]``. Assistant tool
calls and tool results are rendered as text. ``name`` fields are not rendered
(they may name a model or a person and do not bear on quality).

Rendering never raises on odd content: anything unexpected is rendered as JSON
text, so a malformed exchange costs a worse prompt, not a crashed case.
"""

from __future__ import annotations

import json
import re
from typing import Mapping, Sequence

Message = dict[str, object]
Conversation = Sequence[Mapping[str, object]]

RETRY_TEXT = (
    "Your reply did not end with a verdict label. Reply now with exactly one label and "
    "nothing else, chosen from: [[A>>B]], [[A>B]], [[A=B]], [[B>A]], [[B>>A]]."
)

_INTRO = (
    "Below is a conversation between a user and an assistant, then two answers to the "
    "conversation's final turn. Evaluate the answers as the instructions say."
)
_OUTRO = (
    "Compare Assistant A's answer and Assistant B's answer following the instructions. "
    "End your reply with exactly one label: [[A>>B]], [[A>B]], [[A=B]], [[B>A]] or [[B>>A]]."
)
_PART_TYPE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,40}$")


def _as_text(value: object) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _render_part(part: object) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return _as_text(part)
    kind = part.get("type")
    if kind == "text":
        return _as_text(part.get("text", ""))
    if kind == "refusal":
        return _as_text(part.get("refusal", ""))
    label = kind if isinstance(kind, str) and _PART_TYPE_RE.match(kind) else "non-text"
    return f"[{label} part omitted]"


def render_content(content: object) -> str:
    """Render one message's ``content``: a string, a list of parts, or None."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "\n".join(_render_part(p) for p in content)
    return _as_text(content)


def _render_tool_calls(calls: object) -> list[str]:
    if not isinstance(calls, (list, tuple)):
        return [f"[tool call: {_as_text(calls)}]"]
    out = []
    for call in calls:
        fn = call.get("function") if isinstance(call, Mapping) else None
        if isinstance(fn, Mapping):
            out.append(f"[tool call {_as_text(fn.get('name', ''))}: {_as_text(fn.get('arguments', ''))}]")
        else:
            out.append(f"[tool call: {_as_text(call)}]")
    return out


def render_message(message: Mapping[str, object]) -> str:
    """Render one chat message as ``[role]`` followed by its content and any tool calls."""
    role = message.get("role")
    role_text = role if isinstance(role, str) and role else "unknown"
    header = f"[{role_text}]"
    if role_text in ("tool", "function"):
        header = "[tool result]"
    lines = [header]
    body = render_content(message.get("content"))
    if body:
        lines.append(body)
    if "tool_calls" in message and message["tool_calls"]:
        lines.extend(_render_tool_calls(message["tool_calls"]))
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        lines.extend(_render_tool_calls([{"function": legacy}]))
    if len(lines) == 1:
        lines.append("(no content)")
    return "\n".join(lines)


def render_conversation(conversation: Conversation) -> str:
    """Render the whole conversation, one message after another, blank line between."""
    rendered = []
    for message in conversation:
        if isinstance(message, Mapping):
            rendered.append(render_message(message))
        else:
            rendered.append(f"[unknown]\n{_as_text(message)}")
    return "\n\n".join(rendered)


def render_user_text(conversation: Conversation, answer_a: str, answer_b: str, *, rendered: str | None = None) -> str:
    """The judge's user message: conversation, then answer A, then answer B. ``rendered``: the
    conversation as :func:`render_conversation` renders it, when the caller has it already."""
    return (
        f"{_INTRO}\n\n"
        "<<<CONVERSATION>>>\n"
        f"{render_conversation(conversation) if rendered is None else rendered}\n"
        "<<<END OF CONVERSATION>>>\n\n"
        "<<<ASSISTANT A'S ANSWER>>>\n"
        f"{answer_a}\n"
        "<<<END OF ASSISTANT A'S ANSWER>>>\n\n"
        "<<<ASSISTANT B'S ANSWER>>>\n"
        f"{answer_b}\n"
        "<<<END OF ASSISTANT B'S ANSWER>>>\n\n"
        f"{_OUTRO}"
    )


def render_judge_messages(
    rubric_text: str, conversation: Conversation, answer_a: str, answer_b: str, *, rendered: str | None = None,
) -> list[Message]:
    """The messages of a first judge call: ``[system: rubric, user: conversation + A + B]``
    (``rendered``: see :func:`render_user_text`)."""
    return [
        {"role": "system", "content": rubric_text},
        {"role": "user", "content": render_user_text(conversation, answer_a, answer_b, rendered=rendered)},
    ]


def render_retry_messages(prior: Sequence[Message], first_reply: str) -> list[Message]:
    """The messages of the one retry: the first call's messages, the judge's reply, and
    a short request for the label alone."""
    return [*prior, {"role": "assistant", "content": first_reply}, {"role": "user", "content": RETRY_TEXT}]
