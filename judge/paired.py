"""The paired judge: one comparative call over both answers, in a given order.

:meth:`PairedJudge.judge` renders the rubric, the conversation and the two
answers (as "Assistant A"/"Assistant B", in the order the caller drew with
:func:`judge.order.presentation_order`), asks the judge model, and parses the
label. Outcomes, all returned as values:

- one distinct label → ``outcome="verdict"`` with the score from the
  candidate's side (+1 / 0 / −1), ``strong`` for ``>>``, and the winning slot;
- no label → exactly one retry asking for the label alone; still none →
  ``error="no_label"``;
- several distinct labels (first reply or retry) → ``error="conflicting_labels"``;
- a failed call (first or retry) → ``error="judge_call_failed:<kind>"``, no
  further call. A failure is never a tie.

Every call made is returned in ``completions`` (1 or 2, never more than
:data:`MAX_CALLS_PER_JUDGMENT`), failed ones included, so the caller can price
each one. Reserve with :func:`judge_input_upper_bound` before calling.

The completer is trusted not to raise for remote failures (its Protocol); an
exception it raises anyway is a bug and propagates.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

from judge.completer import Completer, Completion
from judge.errors import InvalidJudgeSpec, UnsupportedParserVersion
from judge.labels import PARSER_VERSION, Label, Slot, candidate_view, parse_labels
from judge.order import ORDERS, Order, arrange, check_order
from judge.prompt import Conversation, Message, render_conversation, render_judge_messages, render_retry_messages
from judge.rubric import get_rubric
from judge.version import JudgeSpec, JudgeVersion, judge_version
from policies.money import input_tokens_upper_bound

MAX_CALLS_PER_JUDGMENT = 2

Outcome = Literal["verdict", "error"]


@dataclass(frozen=True, slots=True)
class PairedJudgment:
    """The result of judging one pair in one order.

    For ``outcome="verdict"``: ``score`` is +1 (candidate better), 0 (tie) or
    −1 (incumbent better), ``strong`` marks ``>>``, ``winner`` is the slot that
    won as shown (``"A"``, ``"B"``, ``"tie"``), ``label`` the raw label, and
    ``error`` is None. For ``outcome="error"``: ``error`` says why (``no_label``,
    ``conflicting_labels``, ``judge_call_failed:<kind>``), ``score``/``winner``
    /``label`` are None and ``strong`` is False; such a judgment must never be
    counted as a tie. ``completions`` holds every call made, in order.
    """

    outcome: Outcome
    order: Order
    judge_version_id: str
    completions: tuple[Completion, ...]
    error: str | None = None
    score: int | None = None
    strong: bool = False
    winner: Slot | None = None
    label: Label | None = None

    @property
    def retried(self) -> bool:
        """True when a second call asked for the label."""
        return len(self.completions) > 1


def _messages(rubric_text: str, conversation: Conversation, incumbent: str, candidate: str, order: Order,
              rendered: str | None = None) -> list[Message]:
    answer_a, answer_b = arrange(order, incumbent, candidate)
    return render_judge_messages(rubric_text, conversation, answer_a, answer_b, rendered=rendered)


def _texts(messages: Sequence[Message]) -> list[str]:
    return [str(m["content"]) for m in messages]


def judge_input_upper_bound(
    conversation: Conversation, incumbent_answer: str, candidate_answer: str, spec: JudgeSpec
) -> int:
    """An upper bound on the input tokens of the largest single judge call for this pair.

    The largest call is the retry: the first call's messages, the judge's first
    reply and the retry request. The rendered texts are bounded with
    :func:`policies.money.input_tokens_upper_bound`; the first reply is at most
    ``spec.max_tokens`` tokens (the same assumption the output side of the
    reservation makes), so that is added as is. Holds for either order. Reserve
    ``MAX_CALLS_PER_JUDGMENT`` calls of this input and ``spec.max_tokens``
    output each.
    """
    return JudgeInputBound(conversation, spec).bound(incumbent_answer, candidate_answer)


class JudgeInputBound:
    """:func:`judge_input_upper_bound` for one conversation and spec, for any pair of answers,
    with the conversation rendered once (the engine bounds a case before and after its
    candidate answers; rendering is most of the cost).

    The bound is the byte length of the rendered texts plus framing, and each answer is put
    into the judge's user message as it is, so the answers' UTF-8 bytes add to those of the
    messages rendered with empty answers — in either order: the same value as rendering
    each pair, exactly. The rendered conversation is kept (:attr:`conversation_text`), for the
    judge's calls on it (:meth:`PairedJudge.judge`'s ``rendered``)."""

    __slots__ = ("_fixed", "_max_tokens", "conversation_text")

    def __init__(self, conversation: Conversation, spec: JudgeSpec) -> None:
        rubric_text = get_rubric(spec.rubric_id).text
        #: The conversation as :func:`judge.prompt.render_conversation` renders it.
        self.conversation_text = render_conversation(conversation)
        first = _messages(rubric_text, conversation, "", "", ORDERS[0], self.conversation_text)
        retry = render_retry_messages(first, first_reply="")
        self._fixed = input_tokens_upper_bound(*_texts(retry), messages=len(retry))
        self._max_tokens = spec.max_tokens

    def bound(self, incumbent_answer: str, candidate_answer: str) -> int:
        return (self._fixed + len(incumbent_answer.encode("utf-8")) + len(candidate_answer.encode("utf-8"))
                + self._max_tokens)


def _failed(completion: Completion) -> str:
    return f"judge_call_failed:{completion.error or 'unknown'}"


class PairedJudge:
    """Judges (conversation, incumbent answer, candidate answer) pairs with one :class:`JudgeSpec`.

    Construction validates the spec: an unknown rubric raises
    :class:`judge.errors.UnknownRubric`, a non-pairwise rubric
    :class:`InvalidJudgeSpec`, a parser version other than
    :data:`judge.labels.PARSER_VERSION` :class:`UnsupportedParserVersion`.
    Holds no mutable state; one instance may serve concurrent cases.
    """

    def __init__(self, completer: Completer, spec: JudgeSpec) -> None:
        rubric = get_rubric(spec.rubric_id)
        if rubric.kind != "pairwise":
            raise InvalidJudgeSpec(f"rubric {spec.rubric_id!r} is not a pairwise rubric")
        if spec.parser_version != PARSER_VERSION:
            raise UnsupportedParserVersion(
                f"spec pins parser {spec.parser_version!r}; this judge implements {PARSER_VERSION!r}"
            )
        self._completer = completer
        self._spec = spec
        self._rubric_text = rubric.text  # the text the version id was computed over
        self._version = judge_version(spec)

    @property
    def spec(self) -> JudgeSpec:
        return self._spec

    @property
    def version(self) -> JudgeVersion:
        return self._version

    async def _call(self, messages: Sequence[Message]) -> Completion:
        return await self._completer.complete(
            self._spec.model,
            messages,
            temperature=self._spec.temperature,
            max_tokens=self._spec.max_tokens,
        )

    async def judge(
        self, conversation: Conversation, incumbent_answer: str, candidate_answer: str, order: Order, *,
        rendered: str | None = None,
    ) -> PairedJudgment:
        """Judge one pair in ``order``. See the module docstring for the outcomes. ``rendered``:
        the conversation as :func:`judge.prompt.render_conversation` renders it, when the caller
        has it already (:attr:`JudgeInputBound.conversation_text`); the messages are the same.

        Raises :class:`judge.errors.InvalidArgument` only for an unknown ``order``.
        """
        order = check_order(order)
        vid = self._version.id
        messages = _messages(self._rubric_text, conversation, incumbent_answer, candidate_answer, order, rendered)
        first = await self._call(messages)
        if not first.ok:
            return PairedJudgment("error", order, vid, (first,), error=_failed(first))
        completions: tuple[Completion, ...] = (first,)
        parsed = parse_labels(first.text)
        if parsed.status == "none":
            retry = await self._call(render_retry_messages(messages, first.text))
            completions = (first, retry)
            if not retry.ok:
                return PairedJudgment("error", order, vid, completions, error=_failed(retry))
            parsed = parse_labels(retry.text)
        if parsed.status == "none":
            return PairedJudgment("error", order, vid, completions, error="no_label")
        if parsed.status == "conflicting" or parsed.label is None:
            return PairedJudgment("error", order, vid, completions, error="conflicting_labels")
        view = candidate_view(parsed.label, order)
        return PairedJudgment(
            "verdict",
            order,
            vid,
            completions,
            score=view.score,
            strong=view.strong,
            winner=view.winner,
            label=parsed.label,
        )
