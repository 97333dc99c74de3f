"""Configuration: one TOML file plus ``SHADOWTRIAL_*`` overrides, read once at start-up.

``load_config(path, environ)`` is the only reader. It takes the environment as
a mapping from its caller (nothing here reads ``os.environ``), decodes into
frozen msgspec Structs that refuse unknown keys, validates at construction,
and reads provider API keys *by the variable name* given in ``api_key_env``
into a :class:`Secrets` mapping whose repr never shows a value. Every refusal
is a :class:`~sidecar.errors.ConfigError` whose message names the key's path
(``- at `$.providers.openai.timeout_s```) and, when an environment override
set it, the variable.

Environment overrides: ``SHADOWTRIAL_<SECTION>__<KEY>``, double underscore
between levels, matched case-insensitively; named tables take the name as a
level (``SHADOWTRIAL_PROVIDERS__OPENAI__BASE_URL``). A name is matched against
the file's names with ``-`` and ``.`` read as ``_`` (``MODELS__GPT_4O_MINI``
finds ``[models."gpt-4o-mini"]``); a name the file does not have is created
in lower case. The value is taken verbatim for a string setting and read as a
TOML scalar (``10``, ``2.5``, ``true``) for any other. An override that names
no setting is refused, except ``SHADOWTRIAL_CONFIG`` (the file path, the
CLI's business) and variables that ``api_key_env`` / ``token_env`` name.
"""

from __future__ import annotations

from sidecar.config.fields import (
    ENV_PREFIX, MAX_PRICE_PER_MTOK_USD, MAX_SECONDS, MAX_TOKENS, MIN_NONZERO_PRICE_PER_MTOK_USD,
    NonNegativeSeconds, PricePerMtok, RESERVED_ENV, Seconds, Share, Temperature, Tokens, split_listen,
)
from sidecar.config.load import Config, ResolvedModel, STANDARD_OTEL_ENV, load_config, resolve_model
from sidecar.config.secrets import Secrets
from sidecar.config.sections import (
    AdminConfig, AlertsConfig, AuthConfig, AuthKeyConfig, EngineConfig, JudgeConfig, ModelConfig,
    PricesConfig, ProviderConfig, RetentionConfig, SidecarConfig, StoreConfig, TapConfig, TeamConfig,
    TelemetryConfig, is_loopback,
)
from sidecar.config.uplink import CollectorConfig, CollectorKeyConfig, UplinkConfig

__all__ = [
    "AdminConfig",
    "AlertsConfig",
    "AuthConfig",
    "AuthKeyConfig",
    "CollectorConfig",
    "CollectorKeyConfig",
    "Config",
    "ENV_PREFIX",
    "EngineConfig",
    "JudgeConfig",
    "MAX_PRICE_PER_MTOK_USD",
    "MAX_SECONDS",
    "MAX_TOKENS",
    "MIN_NONZERO_PRICE_PER_MTOK_USD",
    "ModelConfig",
    "NonNegativeSeconds",
    "PricePerMtok",
    "PricesConfig",
    "ProviderConfig",
    "RESERVED_ENV",
    "ResolvedModel",
    "RetentionConfig",
    "STANDARD_OTEL_ENV",
    "Seconds",
    "Secrets",
    "Share",
    "SidecarConfig",
    "StoreConfig",
    "TapConfig",
    "TeamConfig",
    "TelemetryConfig",
    "Temperature",
    "Tokens",
    "UplinkConfig",
    "is_loopback",
    "load_config",
    "resolve_model",
    "split_listen",
]
