from __future__ import annotations

import pytest

from judge.errors import InvalidArgument
from judge.labels import LABELS, candidate_view, parse_labels, winner_slot


@pytest.mark.parametrize("label", LABELS)
def test_each_label_alone_is_a_verdict(label: str) -> None:
    parsed = parse_labels(f"Reasoning...\n[[{label}]]")
    assert parsed.status == "one"
    assert parsed.label == label


@pytest.mark.parametrize(
    ("text", "status", "labels"),
    [
        ("[[A>B]] and again at the end [[A>B]]", "one", ("A>B",)),
        ("B is clearly better. [[B>>A]]\n\nFinal: [[B>>A]]", "one", ("B>>A",)),
        ("Verdict [[A=B]] — both are fine, explained below at length.", "one", ("A=B",)),
        ("Whitespace tolerated: [[ B > A ]]", "one", ("B>A",)),
        ("First [[A>B]] then [[B>A]]", "conflicting", ("A>B", "B>A")),
        ("[[A>>B]] [[A>B]]", "conflicting", ("A>>B", "A>B")),
        ("[[A=B]][[B>>A]][[A=B]]", "conflicting", ("A=B", "B>>A")),
        ("", "none", ()),
        ("A is better.", "none", ()),
        ("A>B", "none", ()),
        ("[A>B]", "none", ()),
        ("[[A>B]", "none", ()),
        ("[[A>>>B]]", "none", ()),
        ("[[a>b]]", "none", ()),
        ("[[A<B]]", "none", ()),
        ("[[C>A]]", "none", ()),
        ("[[B=A]]", "none", ()),
        ("[[A>A]]", "none", ()),
        ("[[[A>B]]]", "none", ()),
        ("[[A≫B]]", "none", ()),
        ("malformed [[A>>>B]] then a real one [[B>A]]", "one", ("B>A",)),
    ],
)
def test_parse_table(text: str, status: str, labels: tuple[str, ...]) -> None:
    parsed = parse_labels(text)
    assert parsed.status == status
    assert parsed.labels == labels
    assert parsed.label == (labels[0] if status == "one" else None)


@pytest.mark.parametrize(
    ("label", "incumbent_first", "candidate_first", "strong", "slot"),
    [
        # (score when incumbent is A, score when candidate is A)
        ("A>>B", -1, 1, True, "A"),
        ("A>B", -1, 1, False, "A"),
        ("A=B", 0, 0, False, "tie"),
        ("B>A", 1, -1, False, "B"),
        ("B>>A", 1, -1, True, "B"),
    ],
)
def test_candidate_view_for_both_orders(
    label: str, incumbent_first: int, candidate_first: int, strong: bool, slot: str
) -> None:
    a = candidate_view(label, "incumbent_first")  # type: ignore[arg-type]
    b = candidate_view(label, "candidate_first")  # type: ignore[arg-type]
    assert (a.score, a.strong, a.winner) == (incumbent_first, strong, slot)
    assert (b.score, b.strong, b.winner) == (candidate_first, strong, slot)
    assert winner_slot(label) == slot  # type: ignore[arg-type]


def test_candidate_view_rejects_unknown_order() -> None:
    with pytest.raises(InvalidArgument):
        candidate_view("A>B", "sideways")  # type: ignore[arg-type]
