"""judge: the paired judge — rubrics and their versions, prompt rendering, label
parsing, order randomization. Talks to models only through :class:`Completer`;
never imports the sidecar."""

from __future__ import annotations

from judge.completer import Completer, Completion, ScriptedCompleter
from judge.errors import (
    InvalidArgument,
    InvalidJudgeSpec,
    InvalidOrderKey,
    JudgeError,
    UnknownRubric,
    UnsupportedParserVersion,
)
from judge.labels import (
    LABELS,
    PARSER_VERSION,
    CandidateView,
    Label,
    LabelParse,
    Slot,
    candidate_view,
    parse_labels,
    winner_slot,
)
from judge.order import (
    DEFAULT_AUDIT_SHARE,
    ORDER_SCHEME,
    ORDERS,
    Order,
    arrange,
    audit_selected,
    presentation_order,
    swapped,
)
from judge.paired import MAX_CALLS_PER_JUDGMENT, PairedJudge, PairedJudgment, judge_input_upper_bound
from judge.prompt import RETRY_TEXT, render_conversation, render_judge_messages, render_retry_messages
from judge.rubric import DEFAULT_PAIRWISE_RUBRIC, RUBRICS, Rubric, get_rubric
from judge.version import JudgeSpec, JudgeVersion, judge_version

__all__ = [
    "DEFAULT_AUDIT_SHARE",
    "DEFAULT_PAIRWISE_RUBRIC",
    "LABELS",
    "MAX_CALLS_PER_JUDGMENT",
    "ORDERS",
    "ORDER_SCHEME",
    "PARSER_VERSION",
    "RETRY_TEXT",
    "RUBRICS",
    "CandidateView",
    "Completer",
    "Completion",
    "InvalidArgument",
    "InvalidJudgeSpec",
    "InvalidOrderKey",
    "JudgeError",
    "JudgeSpec",
    "JudgeVersion",
    "Label",
    "LabelParse",
    "Order",
    "PairedJudge",
    "PairedJudgment",
    "Rubric",
    "ScriptedCompleter",
    "Slot",
    "UnknownRubric",
    "UnsupportedParserVersion",
    "arrange",
    "audit_selected",
    "candidate_view",
    "get_rubric",
    "judge_input_upper_bound",
    "judge_version",
    "parse_labels",
    "presentation_order",
    "render_conversation",
    "render_judge_messages",
    "render_retry_messages",
    "swapped",
    "winner_slot",
]
