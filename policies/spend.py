"""Spend decisions: what follows a refused reservation, and what a call is charged.

Pure: figures in, decisions out. The store applies the numbers atomically
(``spent + reserved + amount <= cap``) and decides nothing; the engine asks
here what a refusal means and how much a finished call counts against the cap.

Refusals (DESIGN.md section 6). A reservation that does not fit is one of:

* ``not_running``      — the trial stopped meanwhile; the case is shed unrun.
* ``trial_exhausted``  — even with nothing reserved, the remaining cap cannot
  cover a *typical* case's worst case: the trial ends ``cap_reached``. Spend
  only grows, so this cannot be undone by waiting.
* ``case_too_large``   — this one case's worst case exceeds what is left even
  with nothing reserved, but a typical case still fits: this case is
  ``cap_reached``; the trial keeps running.
* ``wait``             — it would fit once other cases release their
  reservations (which they mostly do: reservations are worst cases); the
  engine waits, bounded, and sheds the case as ``shed_cap_busy`` if no room
  opens in time.

Charges. A call is charged what it cost when that is known and plausible;
otherwise its worst case is *held* (unknown is never zero). A usage report
beyond what the request could have cost is a *disputed* report: the charge is
capped at the worst case, so the cap still holds, and the coverage is not
complete. So a case is never charged more than it reserved.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal, Sequence

from policies.money import Cost, Price, price_usage

Refusal = Literal["not_running", "trial_exhausted", "case_too_large", "wait"]


def typical_worst_case(recent: Sequence[int], fallback: int) -> int:
    """A typical case's worst case: the median of recent first reservations,
    or ``fallback`` (the case at hand) before there are any."""
    return int(statistics.median(recent)) if recent else fallback


def refusal(*, status: str, cap: int, spent: int, amount: int, typical: int) -> Refusal:
    """Why a reservation of ``amount`` was refused, from the figures it was refused on.

    ``reserved`` does not enter: every rule here asks what would happen with
    nothing reserved; the only thing reservations change is ``wait``."""
    if status != "running":
        return "not_running"
    left = cap - spent
    if left < typical:
        return "trial_exhausted"
    if amount > left:
        return "case_too_large"
    return "wait"


@dataclass(frozen=True, slots=True)
class Charge:
    """What one call counts against the cap, with what is known of its cost."""

    charged_micros: int
    cost: Cost
    disputed: bool = False

    @property
    def unknown(self) -> bool:
        return self.cost.coverage != "complete"


NOTHING = Charge(0, Cost.zero())


def charge_call(cost: Cost, worst_micros: int) -> Charge:
    """The charge for a call that may have been billed, whose worst case was reserved.

    * complete and within the worst case: charged what it cost;
    * known cost above the worst case: a disputed report — charged the worst
      case, coverage ``partial`` with the worst case as the known part;
    * partial or unknown: the worst case is held (never zero).
    """
    if cost.known_micros > worst_micros:
        return Charge(worst_micros, Cost(worst_micros, "partial", cost.basis), disputed=True)
    if cost.coverage == "complete":
        return Charge(cost.known_micros, cost)
    return Charge(worst_micros, cost)


def charge_usage(
    price: Price | None, input_tokens: int | None, output_tokens: int | None, worst_micros: int,
    *, disputed: bool = False,
) -> Charge:
    """:func:`charge_call` for a provider's usage report. A count no call can have (negative),
    or a report the caller could not read as counts (``disputed``: a fraction, NaN, a string,
    ...), is a disputed report too: charged the worst case, never less, never more."""
    if disputed or (input_tokens is not None and input_tokens < 0) or (output_tokens is not None and output_tokens < 0):
        return Charge(worst_micros, Cost(worst_micros, "partial"), disputed=True)
    return charge_call(price_usage(price, input_tokens, output_tokens), worst_micros)


def total(charges: Sequence[Charge]) -> tuple[int, Cost, int, int, int]:
    """Sum charges: (charged, cost, unknown calls, priced calls, disputed reports).

    A call is *priced* when any of its cost is known."""
    charged = 0
    cost: Cost | None = None
    unknown = priced = disputed = 0
    for c in charges:
        charged += c.charged_micros
        cost = c.cost if cost is None else cost + c.cost
        unknown += int(c.unknown)
        priced += int(c.cost.coverage != "unknown")
        disputed += int(c.disputed)
    return charged, cost or Cost.zero(), unknown, priced, disputed
