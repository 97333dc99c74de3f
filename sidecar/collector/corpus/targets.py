"""What an A/B side or a group arm calls: a model alias (at a pinned version), or an agent.

:class:`Target` is where one generation goes (provider, upstream model name) and how its
spend is bounded: a list :class:`~policies.money.Price` (the worst case from tokens), or —
for an agent of unknown cost — a declared per-call ``ceiling_micros`` that is reserved and
charged whole. :func:`targets` builds the resolver ``target(kind, ref, version)`` from the
config; it raises :class:`TargetError` naming the part at fault (``ref``, ``version``,
``cost``), which the caller turns into a refusal naming the field.

Versions are never ignored: a version is run when the alias (``[models.ALIAS] versions``) or
the agent (``[agents.NAME] versions``) maps it to an upstream name; any other version is
refused, never run as the unversioned model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

from policies.money import Price
from sidecar.config import Config, resolve_model
from sidecar.errors import ConfigError
from sidecar.prices import PriceBook

Part = Literal["ref", "version", "cost"]


class TargetError(LookupError):
    def __init__(self, message: str, part: Part) -> None:
        super().__init__(message)
        self.message = message
        self.part = part


@dataclass(frozen=True, slots=True)
class Target:
    kind: Literal["model", "agent"]
    provider: str
    upstream: str
    price: Price | None
    #: An agent of unknown cost: the per-call reservation it declared (charged whole).
    ceiling_micros: int | None = None

    @property
    def bounded(self) -> bool:
        """Whether a call's worst case is known (a list price, or a declared ceiling)."""
        return self.price is not None or self.ceiling_micros is not None


TargetResolver = Callable[[str, str, "str | None"], Target]


def _pick(versions: dict[str, str], what: str, version: str | None) -> str | None:
    if version is None:
        return None
    if version not in versions:
        have = ", ".join(sorted(versions)) or "none configured"
        raise TargetError(f"{what} has no version {version!r} to pin (versions: {have}); configure it under "
                          f"versions, or leave version out", "version")
    return versions[version]


def targets(config: Config, book: PriceBook) -> TargetResolver:
    """``target(kind, ref, version)`` over ``config``'s models and agents (module docs)."""

    def target(kind: str, ref: str, version: str | None) -> Target:
        if kind == "agent":
            agent = config.agents.get(ref)
            if agent is None:
                have = ", ".join(sorted(config.agents)) or "none"
                raise TargetError(f"agent {ref!r} is not registered (agents: {have}); add [agents.{ref}]", "ref")
            upstream = _pick(agent.versions, f"agent {ref!r}", version) or agent.model or ref
            found = Target("agent", agent.provider, upstream, agent.price, agent.ceiling_micros)
            if not found.bounded:
                raise TargetError(f"agent {ref!r} has an unknown cost and no max_cost_per_call_usd: its spend could "
                                  "not be capped, so it is not called", "cost")
            return found
        entry = config.models.get(ref)
        if entry is None:
            if version is not None:
                raise TargetError(f"model {ref!r} is not a configured alias, so version {version!r} cannot be "
                                  f"pinned; add [models.{ref}] with versions", "version")
            try:
                r = resolve_model(config, ref, book)
            except ConfigError as exc:
                raise TargetError(str(exc), "ref") from exc
            return Target("model", r.provider_name, r.upstream_model, r.price)
        pinned = _pick(entry.versions, f"model {ref!r}", version)
        if pinned is None:
            return Target("model", entry.provider, entry.model or ref, book.price_for(ref))
        price = entry.price if entry.price is not None else book.price_for(pinned, provider=entry.provider)
        return Target("model", entry.provider, pinned, price)

    return target
