"""The whole :class:`Config`, model resolution, and :func:`load_config`: the file, the
``SHADOWTRIAL_*`` overrides, the secrets."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from typing import Any

import msgspec
import msgspec.inspect as mi

from policies.money import Price
from sidecar.errors import ConfigError
from sidecar.prices import AliasEntry, PriceBook
from sidecar.config.agents import AgentConfig
from sidecar.config.fields import BARE_KEY, ENV_PREFIX, RESERVED_ENV, Section, split_listen, toml_key
from sidecar.config.sections import (
    AdminConfig, AlertsConfig, AuthConfig, EngineConfig, JudgeConfig, ModelConfig, PricesConfig,
    ProviderConfig, RetentionConfig, SidecarConfig, StoreConfig, TapConfig, TeamConfig, TelemetryConfig,
    is_loopback,
)
from sidecar.config.otlp import OtlpConfig
from sidecar.config.uplink import CollectorConfig, UplinkConfig
from sidecar.config.secrets import Secrets, read_secrets, secret_names


class Config(Section, frozen=True):
    """The whole configuration. Frozen; treat the named-table dicts as read-only.

    ``secrets`` is filled by :func:`load_config` from the environment and is
    never read from the file.
    """

    tap: TapConfig = msgspec.field(default_factory=TapConfig)
    otlp: OtlpConfig = msgspec.field(default_factory=OtlpConfig)
    admin: AdminConfig = msgspec.field(default_factory=AdminConfig)
    auth: AuthConfig = msgspec.field(default_factory=AuthConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    judge: JudgeConfig = msgspec.field(default_factory=JudgeConfig)
    prices: PricesConfig = msgspec.field(default_factory=PricesConfig)
    providers: dict[str, ProviderConfig] = {}
    models: dict[str, ModelConfig] = {}
    #: Agents A/B comparisons can run (OpenAI-compatible endpoints; sidecar/config/agents.py).
    agents: dict[str, AgentConfig] = {}
    teams: dict[str, TeamConfig] = {}
    sidecar: SidecarConfig = msgspec.field(default_factory=SidecarConfig)
    retention: RetentionConfig = msgspec.field(default_factory=RetentionConfig)
    telemetry: TelemetryConfig = msgspec.field(default_factory=TelemetryConfig)
    uplink: UplinkConfig = msgspec.field(default_factory=UplinkConfig)
    alerts: AlertsConfig = msgspec.field(default_factory=AlertsConfig)
    collector: CollectorConfig = msgspec.field(default_factory=CollectorConfig)
    secrets: Secrets = msgspec.field(default_factory=Secrets)

    def _validate(self) -> None:
        configured = ", ".join(sorted(self.providers)) or "none"
        for alias, entry in self.models.items():
            if entry.provider not in self.providers:
                raise ValueError(
                    f"models.{alias}.provider: {entry.provider!r} is not a configured provider (configured: {configured})"
                )
        for name, agent in self.agents.items():
            kind = self.providers[agent.provider].kind if agent.provider in self.providers else None
            if kind != "openai":
                raise ValueError(f"agents.{name}.provider: {agent.provider!r} is not a configured provider of kind "
                                 f"\"openai\" (an agent is an OpenAI-compatible endpoint; configured: {configured})")
        tap_addr = split_listen(self.tap.listen)
        if tap_addr[1] != 0 and tap_addr == split_listen(self.admin.listen):  # port 0: each binds its own free port
            raise ValueError(f"tap.listen and admin.listen are the same address ({self.tap.listen})")
        if not is_loopback(self.tap.listen) and not (self.tap.token_env or self.tap.gateway_jwt):
            raise ValueError(
                f"tap.listen is {self.tap.listen}, beyond loopback: the tap then needs a gateway credential; "
                'set tap.token_env (a shared token) or tap.gateway_jwt = true (with auth.mode = "jwt"), '
                "or listen on 127.0.0.1"
            )
        if self.tap.gateway_jwt and self.auth.mode != "jwt":
            raise ValueError('tap.gateway_jwt = true verifies gateway tokens with the [auth] keys: set auth.mode = "jwt"')
        if self.auth.mode == "off" and not is_loopback(self.admin.listen):
            raise ValueError(
                f'auth.mode = "off" (no admin authentication) is accepted only when admin.listen is a loopback '
                f'address, and admin.listen is {self.admin.listen}; set auth.mode = "jwt" with keys '
                "(docs/security.md), or listen on 127.0.0.1"
            )
        if self.uplink.stale_seconds <= self.engine.lease_seconds / 3:
            raise ValueError(
                f"uplink.stale_seconds ({self.uplink.stale_seconds}) must be longer than the heartbeat that reports "
                f"the gateway (engine.lease_seconds / 3 = {self.engine.lease_seconds / 3})"
            )
        judge = self.judge.model
        if judge and judge not in self.models and len(self.providers) != 1:
            raise ValueError(
                f"judge.model: {judge!r} is not a configured alias, and with {len(self.providers)} providers "
                "configured it cannot be routed; add it under [models]"
            )

    def price_book(self, price_map: Mapping[str, Price] | None = None) -> PriceBook:
        """A :class:`PriceBook` over ``price_map`` (LiteLLM names) and this config's aliases."""
        aliases = {
            alias: AliasEntry(upstream=entry.model or alias, price=entry.price, provider=entry.provider)
            for alias, entry in self.models.items()
        }
        return PriceBook(price_map or {}, aliases)


class ResolvedModel(msgspec.Struct, frozen=True, kw_only=True):
    """Where a model name goes: which provider, under which upstream name, at what list price.

    ``price`` is ``None`` when the model is unpriced (never a zero in its place).
    """

    provider_name: str
    upstream_model: str
    price: Price | None


def resolve_model(config: Config, alias_or_name: str, prices: PriceBook | None = None) -> ResolvedModel:
    """Resolve an alias, or a bare upstream name when exactly one provider is configured.

    ``prices`` defaults to the config's own alias prices (no price map).
    Raises :class:`ConfigError` when the name cannot be routed.
    """
    book = prices if prices is not None else config.price_book()
    entry = config.models.get(alias_or_name)
    if entry is not None:
        return ResolvedModel(
            provider_name=entry.provider,
            upstream_model=entry.model or alias_or_name,
            price=book.price_for(alias_or_name),
        )
    if len(config.providers) == 1:
        (provider,) = config.providers
        return ResolvedModel(
            provider_name=provider,
            upstream_model=alias_or_name,
            price=book.price_for(alias_or_name, provider=provider),
        )
    raise ConfigError(
        f"model {alias_or_name!r} is not a configured alias and {len(config.providers)} providers are configured; "
        f"add [models.{toml_key(alias_or_name)}] with provider = \"...\""
    )


# --- loading -----------------------------------------------------------------

_NAMED_TABLES: dict[str, type[Section]] = {"providers": ProviderConfig, "models": ModelConfig, "teams": TeamConfig,
                                           "agents": AgentConfig}


def load_config(path: str | None, environ: Mapping[str, str]) -> Config:
    """Read ``path`` (``None``: defaults only), apply overrides from ``environ``, read secrets.

    Raises :class:`ConfigError`; its message names the path of the bad key and,
    for an overridden one, the environment variable. Secret values never appear.
    """
    raw = _read_toml(path) if path else {}
    if "secrets" in raw:
        raise ConfigError(
            "secrets are never read from the config file; set api_key_env / token_env to the name "
            "of an environment variable - at `$.secrets`"
        )
    origins, unknown = _apply_overrides(raw, environ)
    _standard_otel(raw, environ, origins)
    unknown = sorted(set(unknown) - secret_names(raw))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) in the environment: {', '.join(unknown)} "
            f"(overrides are {ENV_PREFIX}<SECTION>__<KEY>, e.g. {ENV_PREFIX}TAP__LISTEN)"
        )
    config = _convert(raw, origins)
    return msgspec.structs.replace(config, secrets=read_secrets(config, environ))


#: The standard OpenTelemetry variables the sidecar reads, and the ``[telemetry]`` key each
#: fills when neither the file nor a ``SHADOWTRIAL_`` override sets it. (The OTLP exporter
#: reads its own further ``OTEL_EXPORTER_OTLP_*`` variables — headers, certificates,
#: compression — as OpenTelemetry documents.)
STANDARD_OTEL_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT": "otlp_endpoint", "OTEL_SERVICE_NAME": "service_name"}


def _standard_otel(raw: dict[str, Any], environ: Mapping[str, str], origins: dict[str, str]) -> None:
    present = [var for var in STANDARD_OTEL_ENV if environ.get(var)]
    if not present:
        return
    table = raw.setdefault("telemetry", {})
    if not isinstance(table, dict):
        return  # msgspec refuses the non-table with its path
    for var in present:
        key = STANDARD_OTEL_ENV[var]
        if key not in table:
            table[key] = environ[var]
            origins[f"$.telemetry.{key}"] = var


def _read_toml(path: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {path!r} not found") from exc
    except OSError as exc:
        raise ConfigError(f"config file {path!r} cannot be read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path!r} is not valid TOML: {exc}") from exc


def _path_segment(name: str) -> str:
    return f".{name}" if BARE_KEY.fullmatch(name) else f"[{msgspec.json.encode(name).decode()}]"


def _env_form(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def _is_scalar(t: mi.Type) -> bool:
    if isinstance(t, mi.UnionType):
        return all(_is_scalar(member) for member in t.types)
    return isinstance(t, (mi.StrType, mi.IntType, mi.FloatType, mi.BoolType, mi.LiteralType, mi.NoneType))


def _is_textual(t: mi.Type) -> bool:
    if isinstance(t, mi.LiteralType):
        return all(isinstance(v, str) for v in t.values)
    return isinstance(t, mi.StrType)


def _parse_value(text: str, t: mi.Type) -> Any:
    """A string setting takes the text verbatim; any other is read as a TOML scalar if it is one."""
    if _is_textual(t):
        return text
    try:
        value = tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # msgspec then refuses it with the path and the expected type
    return value if isinstance(value, (bool, int, float, str)) else text


def _apply_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Write ``SHADOWTRIAL_*`` values into ``raw``. Returns (path → variable, unknown variables)."""
    origins: dict[str, str] = {}
    unknown: list[str] = []
    root: mi.Type | None = None  # the config's type tree: built for the first override only (start-up cost)
    for var in sorted(environ):
        if not var.startswith(ENV_PREFIX) or var in RESERVED_ENV:
            continue
        if root is None:
            root = mi.type_info(Config)
        segments = var[len(ENV_PREFIX):].split("__")
        target = _locate(raw, root, segments, var)
        if target is None:
            unknown.append(var)
            continue
        container, key, leaf, path = target
        if path in origins:
            raise ConfigError(f"{origins[path]} and {var} both set `{path}`")
        container[key] = _parse_value(environ[var], leaf)
        origins[path] = var
    return origins, unknown


def _locate(
    raw: dict[str, Any], node: mi.Type, segments: list[str], var: str
) -> tuple[dict[str, Any], str, mi.Type, str] | None:
    """Find the table and key an override sets, creating tables on the way; None if it names no setting."""
    container = raw
    path = "$"
    for i, segment in enumerate(segments):
        last = i == len(segments) - 1
        if not segment:
            return None
        if isinstance(node, mi.StructType):
            field = next((f for f in node.fields if f.encode_name == segment.lower()), None)
            if field is None:
                return None
            key, child_type = field.encode_name, field.type
        elif isinstance(node, mi.DictType):
            matches = [k for k in container if _env_form(k) == segment.upper()]
            if len(matches) > 1:
                raise ConfigError(f"{var} matches several names in the file ({', '.join(sorted(matches))})")
            key, child_type = (matches[0] if matches else segment.lower()), node.value_type
        else:
            return None
        path += _path_segment(key)
        if last:
            return (container, key, child_type, path) if _is_scalar(child_type) else None
        if not isinstance(child_type, (mi.StructType, mi.DictType)):
            return None
        child = container.setdefault(key, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{var} cannot be applied: the file sets {path[2:]} to a value, not a table")
        container, node = child, child_type
    return None


def _config_error(exc: msgspec.ValidationError, prefix: str, origins: Mapping[str, str]) -> ConfigError:
    message = str(exc)
    match = re.search(r" - at `\$([^`]*)`$", message)
    if match:
        message, path = message[: match.start()], prefix + match.group(1)
    else:
        path = prefix
    text = f"{message} - at `{path}`"
    if path != "$":
        related = sorted(var for p, var in origins.items() if p == path or p.startswith((path + ".", path + "[")))
        if related:
            text += f" (set by {', '.join(related)})"
    return ConfigError(text)


def _convert(raw: dict[str, Any], origins: Mapping[str, str]) -> Config:
    data = dict(raw)
    # Named tables are converted one entry at a time so that errors carry the
    # entry's name; msgspec alone reports dict values as `$.providers[...]`.
    for section, struct in _NAMED_TABLES.items():
        entries = data.get(section)
        if not isinstance(entries, dict):
            continue
        converted: dict[str, Any] = {}
        for name, entry in entries.items():
            prefix = f"$.{section}{_path_segment(name)}"
            try:
                value = msgspec.convert(entry, struct, strict=True)
            except msgspec.ValidationError as exc:
                raise _config_error(exc, prefix, origins) from None
            if isinstance(value, ModelConfig) and not value.model:
                value = msgspec.structs.replace(value, model=name)
            converted[name] = value
        data[section] = converted
    try:
        return msgspec.convert(data, Config, strict=True)
    except msgspec.ValidationError as exc:
        raise _config_error(exc, "$", origins) from None


