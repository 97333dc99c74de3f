"""What an engine is built from, given only the config: models resolved against the price
book, provider clients, the engine's settings. One place, used by the runtime for an engine
on a thread and by the engine's own process (:mod:`sidecar.engine.child`), which gets
nothing but the config."""

from __future__ import annotations

from typing import Callable

import httpx

from policies.money import Price
from sidecar.config import Config, resolve_model
from sidecar.engine.engine import EngineSettings
from sidecar.errors import ConfigError
from sidecar.prices import PriceBook, load_price_map
from sidecar.providers.base import Provider
from sidecar.providers.factory import make_provider
from sidecar.store.records import TrialRecord
from sidecar.trials.create import Resolved, TrialDefaults


def price_book(config: Config) -> PriceBook:
    price_map: dict[str, Price] = {}
    if config.prices.map_file:
        price_map = load_price_map(config.prices.map_file)
    return config.price_book(price_map)


def resolver(config: Config, book: PriceBook) -> Callable[[str], Resolved]:
    """``resolve(model)``: its provider, upstream name and price; ``LookupError`` when unknown."""

    def resolve(name: str) -> Resolved:
        try:
            r = resolve_model(config, name, book)
        except ConfigError as exc:
            raise LookupError(str(exc)) from exc
        return Resolved(provider=r.provider_name, upstream=r.upstream_model, price=r.price)

    return resolve


def trial_defaults(config: Config) -> TrialDefaults:
    """What a new trial (or a suite's judge metric) starts from when its request leaves it out."""
    j = config.judge
    return TrialDefaults(
        judge_model=j.model,
        judge_rubric=j.rubric,
        judge_temperature=j.temperature,
        judge_max_tokens=j.max_tokens,
        audit_share=j.audit_share,
        candidate_max_tokens=config.engine.default_max_tokens,
    )


def configured_retention(config: Config, team: str) -> bool:
    """A team's prompt retention as configured (``[teams]``; on when unlisted): the default
    its stored posture starts from."""
    team_cfg = config.teams.get(team)
    return True if team_cfg is None else team_cfg.prompt_retention


def runnable(record: TrialRecord, resolve: Callable[[str], Resolved], config: Config) -> bool:
    """Whether this sidecar can activate ``record`` (its candidate and judge resolve to providers it has)."""
    try:
        return all(resolve(m).provider in config.providers for m in (record.candidate_model, record.judge_model))
    except LookupError:
        return False


def open_providers(config: Config) -> dict[str, Provider]:
    """Provider clients; call on the loop they will belong to (the engine's)."""
    return {
        name: make_provider(
            p.kind,
            p.base_url,
            config.secrets.get(name),
            timeout=httpx.Timeout(p.timeout_s, connect=p.connect_timeout_s),
            limits=httpx.Limits(max_connections=p.max_connections, max_keepalive_connections=p.max_connections),
            deadline_s=p.deadline_s,
            max_retries=p.max_retries,
        )
        for name, p in config.providers.items()
    }


def engine_settings(config: Config, *, flush_funnel: bool = False) -> EngineSettings:
    e = config.engine
    return EngineSettings(
        workers=e.workers,
        drain_seconds=e.drain_seconds,
        shadow_header=e.shadow_header,
        lease_seconds=e.lease_seconds,
        refresh_seconds=e.refresh_seconds,
        reserve_wait_seconds=e.reserve_wait_seconds,
        flush_funnel=flush_funnel,
        gateway=config.sidecar.gateway,
        content_uplink=config.uplink.content,
        posture_teams=tuple((team, t.prompt_retention) for team, t in sorted(config.teams.items())),
        uplink_stale_seconds=config.uplink.stale_seconds,
        report_recovered=config.uplink.enabled,
        retention_key=config.secrets.retention_key,
    )
