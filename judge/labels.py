"""Parse the judge's verdict label and read it from the candidate's side.

The judge ends its reply with one of ``[[A>>B]]``, ``[[A>B]]``, ``[[A=B]]``,
``[[B>A]]``, ``[[B>>A]]``. :func:`parse_labels` collects the *distinct* labels
anywhere in the text (the same label repeated counts once):

- exactly one distinct label → ``status="one"``: a verdict;
- none → ``status="none"``: the caller asks once more for the label alone;
- two or more distinct labels → ``status="conflicting"``: a judge error.

A label is recognised only in its exact form: two opening and two closing
square brackets (not three), capital ``A``/``B``, one of the five relations.
Whitespace inside the brackets is tolerated (``[[ A > B ]]``); anything else
(``[A>B]``, ``[[A>>>B]]``, ``[[a>b]]``, ``[[A<B]]``) is not a label.

Any change to what this module accepts is a new :data:`PARSER_VERSION`, which
is part of the judge version: scores from different parsers are never pooled.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from judge.order import Order, check_order

PARSER_VERSION = "labels-v1"

Label = Literal["A>>B", "A>B", "A=B", "B>A", "B>>A"]
LABELS: tuple[Label, ...] = get_args(Label)

Slot = Literal["A", "B", "tie"]
ParseStatus = Literal["one", "none", "conflicting"]

_LABEL_RE = re.compile(r"(?<!\[)\[\[\s*([AB])\s*(>>|>|=)\s*([AB])\s*\]\](?!\])")
_BY_TEXT: dict[str, Label] = {label: label for label in LABELS}


@dataclass(frozen=True, slots=True)
class LabelParse:
    """The distinct labels found in one judge reply, in order of first appearance."""

    status: ParseStatus
    labels: tuple[Label, ...]

    @property
    def label(self) -> Label | None:
        """The verdict label when there is exactly one distinct label, else None."""
        return self.labels[0] if self.status == "one" else None


@dataclass(frozen=True, slots=True)
class CandidateView:
    """A label read from the candidate's side.

    ``score`` is +1 when the candidate won, 0 for a tie, −1 when the incumbent
    won; ``strong`` is True for ``>>``; ``winner`` is the slot that won, as the
    judge saw it (``"A"``, ``"B"`` or ``"tie"``), for position-bias statistics.
    """

    score: int
    strong: bool
    winner: Slot


def parse_labels(text: str) -> LabelParse:
    """Find the distinct verdict labels in ``text``. See the module docstring."""
    found: list[Label] = []
    for match in _LABEL_RE.finditer(text):
        left, rel, right = match.groups()
        label = _BY_TEXT.get(f"{left}{rel}{right}")
        if label is None:  # e.g. [[A>A]], [[B>B]], [[A>>A]], [[B=A]]: well-formed but not a label
            continue
        if label not in found:
            found.append(label)
    if not found:
        return LabelParse("none", ())
    return LabelParse("one" if len(found) == 1 else "conflicting", tuple(found))


def winner_slot(label: Label) -> Slot:
    """Which slot the label says won: ``"A"``, ``"B"`` or ``"tie"``."""
    if label == "A=B":
        return "tie"
    return "A" if label.startswith("A") else "B"


def candidate_view(label: Label, order: Order) -> CandidateView:
    """Map a label to the candidate's side, given which answer was shown as A."""
    slot = winner_slot(label)
    strong = ">>" in label
    if slot == "tie":
        return CandidateView(0, False, "tie")
    candidate_slot = "B" if check_order(order) == "incumbent_first" else "A"
    return CandidateView(1 if slot == candidate_slot else -1, strong, slot)
