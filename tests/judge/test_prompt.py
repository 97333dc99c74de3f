from __future__ import annotations

import pytest

from judge.order import Order, arrange
from judge.paired import judge_input_upper_bound
from judge.prompt import RETRY_TEXT, render_conversation, render_judge_messages, render_retry_messages
from judge.rubric import get_rubric
from judge.version import JudgeSpec

RUBRIC = get_rubric("pairwise-v1").text
SPEC = JudgeSpec(name="judge", model="judge-model-xyz", max_tokens=512)
INCUMBENT_MODEL = "gpt-incumbent-4o"
CANDIDATE_MODEL = "claude-candidate-9"

CONVERSATION: list[dict[str, object]] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "What is in this picture?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}},
        ],
        "name": INCUMBENT_MODEL,  # names are never rendered
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q":"cat"}'}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "A cat on a mat. Ünïcödé ✓"},
    {"role": "user", "content": "Answer in one sentence."},
]
INCUMBENT = "The incumbent says: a cat sits on a mat."
CANDIDATE = "The candidate says: there is a cat on a mat."


def _user_text(order: Order) -> str:
    a, b = arrange(order, INCUMBENT, CANDIDATE)
    messages = render_judge_messages(RUBRIC, CONVERSATION, a, b)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == RUBRIC
    return str(messages[1]["content"])


def test_conversation_rendering() -> None:
    text = render_conversation(CONVERSATION)
    assert "[system]\nYou are a helpful assistant." in text
    assert "What is in this picture?" in text
    assert "[image_url part omitted]" in text
    assert "https://example.com/cat.png" not in text
    assert '[tool call lookup: {"q":"cat"}]' in text
    assert "[tool result]\nA cat on a mat. Ünïcödé ✓" in text
    assert text.index("What is in this picture?") < text.index("Answer in one sentence.")


def test_odd_content_never_raises() -> None:
    text = render_conversation([{"role": "user", "content": {"weird": 1}}, {"content": 3}, "junk"])  # type: ignore[list-item]
    assert '{"weird": 1}' in text and "[unknown]" in text


@pytest.mark.parametrize("order", ["incumbent_first", "candidate_first"])
def test_a_before_b_and_order_respected(order: Order) -> None:
    text = _user_text(order)
    a_start = text.index("<<<ASSISTANT A'S ANSWER>>>")
    b_start = text.index("<<<ASSISTANT B'S ANSWER>>>")
    assert text.index("<<<END OF CONVERSATION>>>") < a_start < b_start
    first, second = (INCUMBENT, CANDIDATE) if order == "incumbent_first" else (CANDIDATE, INCUMBENT)
    assert a_start < text.index(first) < b_start < text.index(second)


@pytest.mark.parametrize("order", ["incumbent_first", "candidate_first"])
def test_no_model_names(order: Order) -> None:
    a, b = arrange(order, INCUMBENT, CANDIDATE)
    everything = " ".join(str(m["content"]) for m in render_judge_messages(RUBRIC, CONVERSATION, a, b))
    for name in (INCUMBENT_MODEL, CANDIDATE_MODEL, SPEC.model, "incumbent_first", "candidate_first"):
        assert name not in everything
    assert "Assistant A" in everything and "Assistant B" in everything


def test_retry_messages_append_reply_and_label_request() -> None:
    first = render_judge_messages(RUBRIC, CONVERSATION, INCUMBENT, CANDIDATE)
    retry = render_retry_messages(first, "I think A is better.")
    assert retry[:2] == first
    assert retry[2] == {"role": "assistant", "content": "I think A is better."}
    assert retry[3] == {"role": "user", "content": RETRY_TEXT}


@pytest.mark.parametrize("order", ["incumbent_first", "candidate_first"])
def test_upper_bound_covers_rendered_bytes(order: Order) -> None:
    bound = judge_input_upper_bound(CONVERSATION, INCUMBENT, CANDIDATE, SPEC)
    a, b = arrange(order, INCUMBENT, CANDIDATE)
    first = render_judge_messages(RUBRIC, CONVERSATION, a, b)
    first_bytes = sum(len(str(m["content"]).encode("utf-8")) for m in first)
    assert bound >= first_bytes
    # The retry includes a first reply of at most max_tokens tokens; a byte-level
    # tokenizer needs at most one token per byte, so a max_tokens-byte reply is the worst.
    retry = render_retry_messages(first, "é" * (SPEC.max_tokens // 2))
    assert bound >= sum(len(str(m["content"]).encode("utf-8")) for m in retry)
    assert bound >= first_bytes + SPEC.max_tokens + len(RETRY_TEXT)


def test_upper_bound_grows_with_inputs() -> None:
    small = judge_input_upper_bound(CONVERSATION, INCUMBENT, CANDIDATE, SPEC)
    big = judge_input_upper_bound(CONVERSATION, INCUMBENT + "x" * 1000, CANDIDATE, SPEC)
    assert big >= small + 1000
