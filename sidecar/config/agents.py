"""An agent the collector's A/B comparisons can run (``[agents.NAME]``).

An agent is an OpenAI-compatible chat-completions endpoint, configured like a provider: its
endpoint is a ``[providers.X]`` of ``kind = "openai"`` (base URL, key variable, timeouts,
retries), and the ``[agents.NAME]`` entry says which model name to send and what a call
costs. Its cost is either its own list price (dollars per million tokens, priced from the
usage it reports) or an explicit ``unknown_cost = true``. An agent of unknown cost can be
run only with ``max_cost_per_call_usd``: each call reserves that ceiling against the
comparison's cap and is charged the whole ceiling (its true cost is unknown, so the cap
never relies on a guess); without a ceiling a comparison that would call it is refused
(``spend_unbounded``).

``versions`` maps a version name to the model name sent for it, so an A/B side
``{"type": "agent", "ref": NAME, "version": V}`` runs exactly that version.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from policies.money import MICROS_PER_DOLLAR, Price
from sidecar.config.fields import MIN_NONZERO_PRICE_PER_MTOK_USD, PricePerMtok, Section

#: The largest declared per-call ceiling of an agent of unknown cost (dollars).
MAX_CALL_CEILING_USD = 1_000.0


class AgentConfig(Section, frozen=True):
    """``[agents.NAME]`` (module docs)."""

    provider: str
    model: str = ""
    versions: dict[str, str] = {}
    input_price_per_mtok: PricePerMtok | None = None
    output_price_per_mtok: PricePerMtok | None = None
    unknown_cost: bool = False
    max_cost_per_call_usd: Annotated[float, msgspec.Meta(gt=0, le=MAX_CALL_CEILING_USD)] | None = None

    def _validate(self) -> None:
        priced = self.input_price_per_mtok is not None
        if priced != (self.output_price_per_mtok is not None):
            raise ValueError("set both input_price_per_mtok and output_price_per_mtok, or neither")
        if priced == self.unknown_cost:
            raise ValueError("an agent has its own price (input_price_per_mtok and output_price_per_mtok) or an "
                             "explicit unknown_cost = true, exactly one of them")
        if self.max_cost_per_call_usd is not None and not self.unknown_cost:
            raise ValueError("max_cost_per_call_usd is the reservation of an agent of unknown cost: set "
                             "unknown_cost = true, or leave it out for a priced agent")
        for name in ("input_price_per_mtok", "output_price_per_mtok"):
            value = getattr(self, name)
            if value is not None and 0 < value < MIN_NONZERO_PRICE_PER_MTOK_USD:
                raise ValueError(f"{name} is 0 (a known zero) or at least {MIN_NONZERO_PRICE_PER_MTOK_USD:f}")
        for version, upstream in self.versions.items():
            if not version or not upstream:
                raise ValueError("versions maps a non-empty version name to a non-empty model name")

    @property
    def price(self) -> Price | None:
        """Its list price in micro-dollars per million tokens; None when its cost is unknown."""
        if self.input_price_per_mtok is None or self.output_price_per_mtok is None:
            return None
        return Price(round(self.input_price_per_mtok * MICROS_PER_DOLLAR),
                     round(self.output_price_per_mtok * MICROS_PER_DOLLAR))

    @property
    def ceiling_micros(self) -> int | None:
        """The per-call reservation of an agent of unknown cost (None: none declared, or priced)."""
        return None if self.max_cost_per_call_usd is None else round(self.max_cost_per_call_usd * MICROS_PER_DOLLAR)
