from __future__ import annotations

import dataclasses

import pytest

from judge.completer import Completion, ScriptedCompleter
from judge.errors import InvalidArgument, UnknownRubric, UnsupportedParserVersion
from judge.order import Order
from judge.paired import MAX_CALLS_PER_JUDGMENT, JudgeInputBound, PairedJudge, _messages, _texts, judge_input_upper_bound
from judge.prompt import RETRY_TEXT
from judge.version import JudgeSpec, judge_version

SPEC = JudgeSpec(name="judge", model="judge-model", max_tokens=256)
CONVERSATION: list[dict[str, object]] = [{"role": "user", "content": "Say hi."}]
INCUMBENT = "Hello from the incumbent."
CANDIDATE = "Hi from the candidate."


def ok(text: str) -> Completion:
    return Completion(ok=True, text=text, input_tokens=100, output_tokens=10)


async def run(script: list[Completion], order: Order = "incumbent_first", spec: JudgeSpec = SPEC):
    completer = ScriptedCompleter(list(script))
    judgment = await PairedJudge(completer, spec).judge(CONVERSATION, INCUMBENT, CANDIDATE, order)
    return judgment, completer


@pytest.mark.parametrize(
    ("order", "label", "score", "strong", "winner"),
    [
        ("incumbent_first", "B>>A", 1, True, "B"),
        ("incumbent_first", "A>B", -1, False, "A"),
        ("candidate_first", "A>>B", 1, True, "A"),
        ("candidate_first", "B>A", -1, False, "B"),
        ("candidate_first", "A=B", 0, False, "tie"),
    ],
)
async def test_verdict_mapped_to_candidate(order: Order, label: str, score: int, strong: bool, winner: str) -> None:
    judgment, completer = await run([ok(f"Reasoning. [[{label}]]")], order)
    assert judgment.outcome == "verdict" and judgment.error is None
    assert (judgment.score, judgment.strong, judgment.winner, judgment.label) == (score, strong, winner, label)
    assert judgment.order == order
    assert judgment.judge_version_id == judge_version(SPEC).id
    assert len(completer.calls) == 1 and not judgment.retried
    call = completer.calls[0]
    assert (call["model"], call["temperature"], call["max_tokens"]) == ("judge-model", 0.0, 256)


async def test_order_decides_which_answer_is_a() -> None:
    _, c1 = await run([ok("[[A=B]]")], "incumbent_first")
    _, c2 = await run([ok("[[A=B]]")], "candidate_first")
    text1 = str(c1.calls[0]["messages"][1]["content"])  # type: ignore[index]
    text2 = str(c2.calls[0]["messages"][1]["content"])  # type: ignore[index]
    assert text1.index(INCUMBENT) < text1.index(CANDIDATE)
    assert text2.index(CANDIDATE) < text2.index(INCUMBENT)


async def test_no_label_retries_once_then_verdict() -> None:
    judgment, completer = await run([ok("A seems better overall."), ok("[[A>B]]")])
    assert judgment.outcome == "verdict" and judgment.score == -1
    assert judgment.retried and len(judgment.completions) == 2 == len(completer.calls)
    retry_messages = completer.calls[1]["messages"]
    assert retry_messages[:2] == completer.calls[0]["messages"]  # type: ignore[index]
    assert retry_messages[2] == {"role": "assistant", "content": "A seems better overall."}  # type: ignore[index]
    assert retry_messages[3] == {"role": "user", "content": RETRY_TEXT}  # type: ignore[index]


async def test_no_label_twice_is_an_error_not_a_tie() -> None:
    judgment, completer = await run([ok("hmm"), ok("still thinking"), ok("[[A=B]]")])
    assert judgment.outcome == "error" and judgment.error == "no_label"
    assert judgment.score is None and judgment.winner is None and judgment.label is None
    assert len(completer.calls) == MAX_CALLS_PER_JUDGMENT
    assert len(completer.script) == 1  # the third scripted answer was never asked for


async def test_conflicting_labels_error_without_retry() -> None:
    judgment, completer = await run([ok("[[A>B]] no wait [[B>A]]"), ok("[[A>B]]")])
    assert judgment.outcome == "error" and judgment.error == "conflicting_labels"
    assert judgment.score is None
    assert len(completer.calls) == 1


async def test_conflicting_labels_on_retry() -> None:
    judgment, completer = await run([ok("no label"), ok("[[A>B]] [[A=B]]")])
    assert judgment.error == "conflicting_labels" and len(completer.calls) == 2


async def test_repeated_same_label_is_one_verdict() -> None:
    judgment, _ = await run([ok("[[B>A]] ... so again: [[B>A]]")])
    assert judgment.outcome == "verdict" and judgment.score == 1


async def test_failed_call_is_an_error_without_retry() -> None:
    failure = Completion(ok=False, error="timeout")
    judgment, completer = await run([failure, ok("[[A=B]]")])
    assert judgment.outcome == "error" and judgment.error == "judge_call_failed:timeout"
    assert judgment.score is None and judgment.winner is None
    assert judgment.completions == (failure,)
    assert len(completer.calls) == 1


async def test_failed_retry_is_an_error() -> None:
    judgment, _ = await run([ok("no label here"), Completion(ok=False, error="http_5xx")])
    assert judgment.outcome == "error" and judgment.error == "judge_call_failed:http_5xx"
    assert len(judgment.completions) == 2


async def test_failure_without_kind() -> None:
    judgment, _ = await run([Completion(ok=False)])
    assert judgment.error == "judge_call_failed:unknown"


async def test_spec_temperature_is_used() -> None:
    _, completer = await run([ok("[[A=B]]")], spec=dataclasses.replace(SPEC, temperature=0.3))
    assert completer.calls[0]["temperature"] == 0.3


async def test_unknown_order_raises() -> None:
    with pytest.raises(InvalidArgument):
        await PairedJudge(ScriptedCompleter([]), SPEC).judge(CONVERSATION, INCUMBENT, CANDIDATE, "random")  # type: ignore[arg-type]


def test_construction_validates_spec() -> None:
    with pytest.raises(UnknownRubric):
        PairedJudge(ScriptedCompleter([]), dataclasses.replace(SPEC, rubric_id="nope"))
    with pytest.raises(UnsupportedParserVersion):
        PairedJudge(ScriptedCompleter([]), dataclasses.replace(SPEC, parser_version="labels-v0"))
    judge = PairedJudge(ScriptedCompleter([]), SPEC)
    assert judge.version == judge_version(SPEC) and judge.spec == SPEC


async def test_upper_bound_covers_every_call_made() -> None:
    reply = "x" * SPEC.max_tokens  # a reply of max_tokens bytes is at most max_tokens tokens
    _, completer = await run([ok(reply), ok("[[A>B]]")])
    bound = judge_input_upper_bound(CONVERSATION, INCUMBENT, CANDIDATE, SPEC)
    for call in completer.calls:
        sent = sum(len(str(m["content"]).encode("utf-8")) for m in call["messages"])  # type: ignore[attr-defined]
        assert sent <= bound


@pytest.mark.parametrize("incumbent, candidate", [("", ""), (INCUMBENT, CANDIDATE), ("é ✓ 日本語", "🙂" * 7)])
def test_the_bound_rendered_once_is_the_bound_of_each_rendered_pair(incumbent: str, candidate: str) -> None:
    """The engine renders a case's conversation once (:class:`JudgeInputBound`) and bounds the
    pair before and after its candidate answers: the same figure as rendering every pair in
    either order, multi-byte answers included."""
    from judge.order import ORDERS
    from judge.prompt import render_retry_messages
    from judge.rubric import get_rubric
    from policies.money import input_tokens_upper_bound

    conversation = CONVERSATION + [{"role": "assistant", "content": "Ça va — très bien."},
                                   {"role": "user", "content": [{"type": "text", "text": "Encore ✓"}]}]
    rendered = max(
        input_tokens_upper_bound(*_texts(r), messages=len(r))
        for r in (render_retry_messages(_messages(get_rubric(SPEC.rubric_id).text, conversation, incumbent,
                                                  candidate, order), first_reply="") for order in ORDERS)
    ) + SPEC.max_tokens
    assert JudgeInputBound(conversation, SPEC).bound(incumbent, candidate) == rendered
    assert judge_input_upper_bound(conversation, incumbent, candidate, SPEC) == rendered


@pytest.mark.parametrize("order", ["incumbent_first", "candidate_first"])
async def test_a_judgment_on_the_conversation_rendered_once_sends_the_same_messages(order: Order) -> None:
    """The engine hands the judge the conversation :class:`JudgeInputBound` rendered (issue 29):
    the first call and the retry carry exactly the messages the judge renders itself."""
    conversation = CONVERSATION + [{"role": "assistant", "content": "Ça va — très bien."},
                                   {"role": "user", "content": [{"type": "text", "text": "Encore ✓"}]}]
    script = [ok("no label here"), ok("A>B")]
    own, given = ScriptedCompleter(list(script)), ScriptedCompleter(list(script))
    first = await PairedJudge(own, SPEC).judge(conversation, INCUMBENT, CANDIDATE, order)
    rendered = JudgeInputBound(conversation, SPEC).conversation_text
    second = await PairedJudge(given, SPEC).judge(conversation, INCUMBENT, CANDIDATE, order, rendered=rendered)
    assert len(own.calls) == 2 and given.calls == own.calls
    assert (second.outcome, second.score) == (first.outcome, first.score)
