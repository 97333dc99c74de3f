"""Money: integer micro-dollars, list prices, costs that know what they do not know.

A cost is never a bare number. ``Cost(known_micros, coverage)`` says how much is
known and whether that is all of it: ``complete`` (every part priced),
``partial`` (some parts priced, some not) or ``unknown`` (nothing could be
priced). An unknown cost is never read as zero; a configured price of zero is a
*known* zero and reads ``complete``.

Prices are micro-dollars per million tokens, so that list prices such as
$0.15 / 1M tokens stay integers (150_000). Token costs round *up* to the next
micro-dollar: a reservation must never be smaller than what it covers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Coverage = Literal["complete", "partial", "unknown"]

MICROS_PER_DOLLAR = 1_000_000
_PER = 1_000_000  # prices are per million tokens


@dataclass(frozen=True, slots=True)
class Price:
    """A list price in micro-dollars per million tokens."""

    input_per_mtok: int
    output_per_mtok: int

    def __post_init__(self) -> None:
        if self.input_per_mtok < 0 or self.output_per_mtok < 0:
            raise ValueError("prices cannot be negative")

    @classmethod
    def from_dollars_per_token(cls, input_cost: float, output_cost: float) -> Price:
        """Build from LiteLLM's ``input_cost_per_token`` / ``output_cost_per_token``."""
        return cls(round(input_cost * MICROS_PER_DOLLAR * _PER), round(output_cost * MICROS_PER_DOLLAR * _PER))


@dataclass(frozen=True, slots=True)
class Cost:
    """What something cost, as far as it is known. See the module docstring."""

    known_micros: int
    coverage: Coverage
    basis: str = "list_price"

    @classmethod
    def unknown(cls) -> Cost:
        return cls(0, "unknown")

    @classmethod
    def zero(cls) -> Cost:
        """Nothing was spent (no call was made): a known zero."""
        return cls(0, "complete")

    def __add__(self, other: Cost) -> Cost:
        return add_costs(self, other)

    def to_dict(self) -> dict[str, object]:
        return {"known_micros": self.known_micros, "coverage": self.coverage, "basis": self.basis}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def token_micros(tokens: int, per_mtok: int) -> int:
    """Cost of ``tokens`` at ``per_mtok`` micro-dollars per million, rounded up."""
    if tokens < 0:
        raise ValueError("token counts cannot be negative")
    return ceil_div(tokens * per_mtok, _PER)


def price_usage(price: Price | None, input_tokens: int | None, output_tokens: int | None) -> Cost:
    """Price one call's usage. Missing price or missing counts make it unknown/partial."""
    if price is None or (input_tokens is None and output_tokens is None):
        return Cost.unknown()
    known = 0
    parts_missing = 0
    if input_tokens is None:
        parts_missing += 1
    else:
        known += token_micros(input_tokens, price.input_per_mtok)
    if output_tokens is None:
        parts_missing += 1
    else:
        known += token_micros(output_tokens, price.output_per_mtok)
    return Cost(known, "complete" if parts_missing == 0 else "partial")


def add_costs(a: Cost, b: Cost) -> Cost:
    """Sum two costs; coverage is complete only if both are complete."""
    if a.coverage == "unknown" and b.coverage == "unknown":
        return Cost.unknown()
    if a.coverage == "complete" and b.coverage == "complete":
        coverage: Coverage = "complete"
    else:
        coverage = "partial"
    return Cost(a.known_micros + b.known_micros, coverage, a.basis)


def worst_case_micros(price: Price, input_tokens_bound: int, max_output_tokens: int) -> int:
    """The most one call can cost: every input token and ``max_output_tokens`` output tokens."""
    return token_micros(input_tokens_bound, price.input_per_mtok) + token_micros(max_output_tokens, price.output_per_mtok)


def input_tokens_upper_bound(*texts: str, messages: int = 1) -> int:
    """A true upper bound on the tokens of ``texts`` for any byte-level BPE tokenizer.

    A byte-level tokenizer never needs more than one token per UTF-8 byte, so the
    byte length bounds the count; each message adds a few framing tokens (role,
    separators), bounded here by 8, plus 16 for the reply primer. Deliberately
    pessimistic: this is for reservations, which are released once real usage is
    known.
    """
    return sum(len(t.encode("utf-8")) for t in texts) + 8 * max(messages, 1) + 16
