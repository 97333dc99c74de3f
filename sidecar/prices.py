"""List prices: LiteLLM's price map, configured alias prices, and name resolution.

The price map is LiteLLM's ``model_prices_and_context_window.json``: a JSON
object of model name → ``{"input_cost_per_token": ..., "output_cost_per_token":
..., "litellm_provider": ..., "mode": ..., ...}`` in dollars per token.
Operators point at the copy they already keep; nothing here downloads it.

An entry without both costs (an image or audio model priced per second, the
``sample_spec`` documentation entry) is left out, never read as zero: a model
that is not in the book is *unpriced*, and an unpriced model's cost is
unknown, not free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from policies.money import Price
from sidecar.errors import ConfigError

__all__ = ["AliasEntry", "PriceBook", "load_price_map", "parse_price_map"]

_SAMPLE_SPEC = "sample_spec"
_COST_FIELDS = ("input_cost_per_token", "output_cost_per_token")


def _is_cost(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0


def parse_price_map(data: Any, *, source: str = "price map") -> dict[str, Price]:
    """Turn a decoded LiteLLM price map into ``{model name: Price}``.

    Entries lacking either cost are skipped. A cost that is present but not a
    finite non-negative number raises :class:`ConfigError` naming the entry:
    a hand-edited typo must not silently become a price or vanish.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object of model name → entry, got {type(data).__name__}")
    prices: dict[str, Price] = {}
    for name, entry in data.items():
        if name == _SAMPLE_SPEC or not isinstance(entry, dict):
            continue
        if not all(field in entry for field in _COST_FIELDS):
            continue
        for field in _COST_FIELDS:
            if not _is_cost(entry[field]):
                raise ConfigError(f"{source}: {field} of {name!r} must be a non-negative number, got {entry[field]!r}")
        prices[name] = Price.from_dollars_per_token(entry["input_cost_per_token"], entry["output_cost_per_token"])
    return prices


def load_price_map(path: str) -> dict[str, Price]:
    """Read and parse a LiteLLM price map file. I/O and JSON errors become :class:`ConfigError`."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise ConfigError(f"price map {path!r} cannot be read: {exc.strerror or exc}") from exc
    try:
        data = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise ConfigError(f"price map {path!r} is not valid JSON: {exc}") from exc
    return parse_price_map(data, source=f"price map {path!r}")


@dataclass(frozen=True, slots=True)
class AliasEntry:
    """What the price book knows of a configured model alias.

    ``price`` is the configured list price, if any; without one the alias is
    priced as its ``upstream`` model name, with ``provider`` (the configured
    provider's name) as the prefix hint.
    """

    upstream: str
    price: Price | None = None
    provider: str | None = None


class PriceBook:
    """Resolves a model name to its list price, or ``None`` when it has none.

    Resolution order, first hit wins:

    1. a configured alias's price (``[models.ALIAS]`` with prices); an alias
       without a price continues below with its upstream model name and its
       provider as the hint;
    2. the exact name in the price map;
    3. the name with leading ``provider/`` segments stripped, one at a time
       (``"openai/gpt-4o-mini"`` → ``"gpt-4o-mini"``);
    4. the name with a provider prefix added: ``"{provider}/{name}"`` when a
       provider hint is given, else the price shared by every ``"X/{name}"``
       entry. If those entries disagree the name is unpriced: guessing one
       provider's price for another's model would understate a reservation.

    Never returns a zero price for a name it does not know. Immutable after
    construction; safe to share between tasks.
    """

    def __init__(self, price_map: Mapping[str, Price], aliases: Mapping[str, AliasEntry] | None = None) -> None:
        self._map: dict[str, Price] = dict(price_map)
        self._aliases: dict[str, AliasEntry] = dict(aliases or {})
        self._by_unprefixed: dict[str, set[Price]] = {}
        for name, price in self._map.items():
            _, sep, rest = name.partition("/")
            if sep and rest:
                self._by_unprefixed.setdefault(rest, set()).add(price)

    def __len__(self) -> int:
        return len(self._map)

    def __repr__(self) -> str:
        return f"PriceBook({len(self._map)} priced models, {len(self._aliases)} aliases)"

    def price_for(self, name: str, *, provider: str | None = None) -> Price | None:
        """The list price of ``name`` (an alias or an upstream model name), or ``None``.

        ``provider`` is a prefix hint for step 4; an alias brings its own.
        """
        alias = self._aliases.get(name)
        if alias is not None:
            if alias.price is not None:
                return alias.price
            return self._lookup(alias.upstream, alias.provider)
        return self._lookup(name, provider)

    def _lookup(self, name: str, provider: str | None) -> Price | None:
        if name in self._map:
            return self._map[name]
        stripped = name
        while "/" in stripped:
            stripped = stripped.split("/", 1)[1]
            if stripped in self._map:
                return self._map[stripped]
        if provider:
            hinted = self._map.get(f"{provider}/{name}")
            if hinted is not None:
                return hinted
        candidates = self._by_unprefixed.get(name, set())
        if len(candidates) == 1:
            return next(iter(candidates))
        return None
