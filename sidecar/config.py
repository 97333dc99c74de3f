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

import base64
import binascii
import ipaddress
import math
import re
import tomllib
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import msgspec
import msgspec.inspect as mi

from policies.money import MICROS_PER_DOLLAR, Price
from sidecar.auth.algorithms import HMAC, SUPPORTED as JWT_ALGORITHMS
from sidecar.errors import ConfigError
from sidecar.prices import AliasEntry, PriceBook

__all__ = [
    "AdminConfig",
    "AuthConfig",
    "AuthKeyConfig",
    "CollectorConfig",
    "CollectorKeyConfig",
    "Config",
    "ENV_PREFIX",
    "EngineConfig",
    "JudgeConfig",
    "ModelConfig",
    "PricesConfig",
    "ProviderConfig",
    "RESERVED_ENV",
    "ResolvedModel",
    "Secrets",
    "StoreConfig",
    "TapConfig",
    "TeamConfig",
    "TelemetryConfig",
    "UplinkConfig",
    "load_config",
    "resolve_model",
    "split_listen",
]

ENV_PREFIX = "SHADOWTRIAL_"
RESERVED_ENV = frozenset({"SHADOWTRIAL_CONFIG", "SHADOWTRIAL_ADMIN_URL", "SHADOWTRIAL_TOKEN"})  # read by the CLI, not config

# Ranges an operator's numbers are held to, in this file and in the admin API alike
# (sidecar.trials uses the shared ones). Each bound is far beyond any sensible setting and
# well inside what the arithmetic and the store hold (integers fit in 64 bits, seconds in a
# timer); the README lists them.

#: Tokens one call may produce (``max_tokens``): today's largest outputs are ~10^5.
MAX_TOKENS = 1_000_000
#: A list price, US dollars per million tokens; today's dearest models cost ~10^2.
MAX_PRICE_PER_MTOK_USD = 10_000.0
#: Prices are stored as whole micro-dollars per million tokens: a non-zero price below one
#: would become a known zero, which it is not.
MIN_NONZERO_PRICE_PER_MTOK_USD = 0.000001
#: Any duration setting: one hour (a provider deadline: a day).
MAX_SECONDS = 3600.0

Tokens = Annotated[int, msgspec.Meta(ge=1, le=MAX_TOKENS)]
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
NonNegativeSeconds = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS)]
Share = Annotated[float, msgspec.Meta(ge=0, le=1)]
Temperature = Annotated[float, msgspec.Meta(ge=0, le=2)]
PricePerMtok = Annotated[float, msgspec.Meta(ge=0, le=MAX_PRICE_PER_MTOK_USD)]

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def split_listen(value: str) -> tuple[str, int]:
    """``"host:port"`` → ``(host, port)``; IPv6 hosts in brackets (``"[::1]:8790"``).

    Port 0 is accepted (the OS picks one; tests use it). Raises ``ValueError``.
    """
    host, sep, port = value.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        host = ""  # an unbracketed IPv6 address is ambiguous
    if not sep or not host or not port.isascii() or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen must be HOST:PORT (e.g. 127.0.0.1:8790, [::1]:8790), got {value!r}")
    return host, int(port)


def _check_env_name(field: str, value: str) -> None:
    # Never echo the value: a common mistake is pasting the key itself here.
    if value and not _ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{field} must be the NAME of an environment variable (letters, digits, underscores), "
            "not its value; the value given is not shown"
        )


class _Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Operator input: frozen, unknown keys refused, validated at construction."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        self._validate()

    def _validate(self) -> None:
        """Checks beyond the field types; raise ``ValueError`` naming the field."""


class TapConfig(_Section, frozen=True):
    """The tap: where gateways post served exchanges.

    ``token_env`` names an environment variable holding a shared token the tap
    then requires; empty means no token (fine on loopback).

    ``read_timeout_seconds`` bounds how long a request's body may take to arrive
    once its headers have (a stalled or trickled body gets ``408`` and the
    connection is closed). ``idle_timeout_seconds`` bounds how long a connection
    may sit without a complete request — before its first, between two, or with
    its headers unfinished — before the tap closes it.
    """

    listen: str = "127.0.0.1:8790"
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1, le=1 << 30)] = 4 * 1024 * 1024
    queue_size: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] = 10_000
    token_env: str = ""
    #: Accept gateway JWTs (role ``gateway``, the teams it may report; verified with the
    #: ``[auth]`` keys, so ``auth.mode = "jwt"``): exchanges for other teams are refused, counted.
    gateway_jwt: bool = False
    #: Seconds, positive, at most an hour.
    read_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 15.0
    idle_timeout_seconds: Annotated[float, msgspec.Meta(gt=0, le=3600)] = 15.0

    def _validate(self) -> None:
        split_listen(self.listen)
        _check_env_name("token_env", self.token_env)


class AdminConfig(_Section, frozen=True):
    """The admin API."""

    listen: str = "127.0.0.1:8791"
    #: An admin request that takes longer (a store that cannot answer) is ``503 store_unavailable``.
    request_timeout_seconds: Seconds = 10.0

    def _validate(self) -> None:
        split_listen(self.listen)


def is_loopback(listen: str) -> bool:
    """Whether a ``HOST:PORT`` listens on loopback only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    host, _ = split_listen(listen)
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _check_algorithms(field: str, algorithms: tuple[str, ...]) -> None:
    if not algorithms:
        raise ValueError(f"{field} must name at least one algorithm (the token's own is never trusted)")
    for alg in algorithms:
        if alg not in JWT_ALGORITHMS:
            raise ValueError(f"{field}: {alg!r} is not one of {', '.join(sorted(JWT_ALGORITHMS))}")


class AuthKeyConfig(_Section, frozen=True):
    """A verification key (``[[auth.keys]]``): ``path`` to a PEM public key or certificate,
    or to an HMAC secret file (``HS*`` only); ``algorithms`` it accepts, pinned here;
    ``kid`` the key id tokens name; ``allow_no_kid``: tokens without a ``kid`` may try it."""

    path: str
    algorithms: tuple[str, ...]
    kid: str = ""
    allow_no_kid: bool = False

    def _validate(self) -> None:
        if not self.path:
            raise ValueError("path must not be empty")
        _check_algorithms("algorithms", self.algorithms)
        if set(self.algorithms) & HMAC and set(self.algorithms) - HMAC:
            raise ValueError("algorithms: HS* (a shared secret) and public-key algorithms cannot share a key")
        if not self.kid and not self.allow_no_kid:
            raise ValueError("set kid, or allow_no_kid = true for tokens that name no key id")


class AuthConfig(_Section, frozen=True):
    """Admin API authentication (docs/security.md).

    ``mode = "jwt"``: every admin request but ``/healthz``, ``/readyz``, ``/metrics`` and
    ``/openapi.json`` carries ``Authorization: Bearer <JWT>`` verified against ``keys``
    and/or the JWKS file ``jwks`` (its keys accept ``jwks_algorithms``), with ``exp``,
    ``iat``, ``aud`` (= ``audience``), ``iss`` (= ``issuer``) and ``sub`` required and
    ``leeway_seconds`` of clock skew. ``mode = "off"`` (the default) is local development:
    every request acts as ``platform_admin``; it is accepted only while ``admin.listen`` is
    a loopback address, and says so with a WARNING at start-up.
    """

    mode: Literal["jwt", "off"] = "off"
    audience: str = ""
    issuer: str = ""
    leeway_seconds: Annotated[float, msgspec.Meta(ge=0, le=300)] = 30.0
    keys: tuple[AuthKeyConfig, ...] = ()
    jwks: str = ""
    jwks_algorithms: tuple[str, ...] = ()
    #: A file of revoked subjects (one ``sub`` per line, ``#`` comments), read again whenever it
    #: changes. A running trial whose starter is listed pauses ``starter_unauthorized`` before
    #: its next dispatch; tokens of a listed subject are refused.
    revoked_subjects_file: str = ""

    def _validate(self) -> None:
        if self.jwks:
            _check_algorithms("jwks_algorithms", self.jwks_algorithms)
        if self.mode != "jwt":
            return
        if not self.audience:
            raise ValueError('audience must be set when mode = "jwt"')
        if not self.issuer:
            raise ValueError('issuer must be set when mode = "jwt"')
        if not self.keys and not self.jwks:
            raise ValueError('mode = "jwt" needs keys ([[auth.keys]]) or a jwks file')


class StoreConfig(_Section, frozen=True):
    """Where trials, cases and the outbox live.

    ``path``: a SQLite file (relative to the working directory), the embedded
    default for one sidecar. ``url``: ``postgresql://user@host:port/db`` for a
    fleet of sidecars sharing trials, caps and the case ledger; when set it
    wins over ``path``. Put a password in the URL only through the
    ``SHADOWTRIAL_STORE__URL`` environment override, never in the file.
    """

    path: str = "shadowtrial.db"
    url: str = ""
    #: The intake journal (sampled cases not yet claimed, kept across a crash): a directory
    #: this sidecar alone uses. Default: beside the SQLite file (``<path>.intake``); with a
    #: PostgreSQL ``url`` there is no default — set one per replica, or queued cases are
    #: not kept across a crash (a warning says so at start).
    journal_dir: str = ""
    #: How long a store statement waits for a lock another connection or process holds
    #: before it fails (the admin API then answers 503; the engine retries, then counts).
    lock_timeout_seconds: Seconds = 10.0

    def _validate(self) -> None:
        if not self.path:
            raise ValueError("path must not be empty")
        if self.url and not self.url.startswith(("postgresql://", "postgres://", "sqlite://")):
            raise ValueError("url must start with postgresql:// (or sqlite:// for a file)")

    @property
    def location(self) -> str:
        """What :func:`sidecar.store.make_store` opens."""
        return self.url or self.path

    @property
    def intake_dir(self) -> str | None:
        """Where the intake journal lives, or None (a fleet store with no ``journal_dir``)."""
        if self.journal_dir:
            return self.journal_dir
        if self.url.startswith(("postgresql://", "postgres://")):
            return None
        return (self.url.removeprefix("sqlite://") or self.path) + ".intake"


class EngineConfig(_Section, frozen=True):
    """The trial loop.

    ``default_max_tokens`` caps a candidate call when the served request set
    no ``max_tokens`` (a reservation needs a bound). ``shadow_header`` tags
    candidate calls so the gateway's billing and rate limits can tell them apart.
    """

    workers: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 16
    drain_seconds: NonNegativeSeconds = 10.0
    default_max_tokens: Tokens = 1024
    shadow_header: str = "X-Shadowtrial-Shadow"
    #: How long this process's claim on its in-flight cases outlives its last
    #: heartbeat; after that a peer (or this host restarted) marks them indeterminate.
    lease_seconds: Seconds = 15.0
    #: How often running trials are re-read from the store (trials created on peers).
    refresh_seconds: Seconds = 1.0
    #: How long a case waits for room under the cap that other cases' reservations hold.
    reserve_wait_seconds: NonNegativeSeconds = 30.0
    #: ``process``: the engine runs in a process of its own, so a tap flood cannot take its
    #: CPU (one GIL each); ``thread``: on a thread of the sidecar's process (tests, tiny hosts).
    isolation: Literal["process", "thread"] = "process"

    def _validate(self) -> None:
        if not _HEADER_NAME.fullmatch(self.shadow_header):
            raise ValueError(f"shadow_header must be an HTTP header name, got {self.shadow_header!r}")


class JudgeConfig(_Section, frozen=True):
    """Judge defaults; ``model`` is an alias (or a name the single provider serves), empty = none set."""

    model: str = ""
    rubric: str = "pairwise-v1"
    temperature: Temperature = 0.0
    max_tokens: Tokens = 512
    audit_share: Share = 0.10

    def _validate(self) -> None:
        if not self.rubric:
            raise ValueError("rubric must not be empty")


class PricesConfig(_Section, frozen=True):
    """``map_file``: a LiteLLM ``model_prices_and_context_window.json``; empty = none."""

    map_file: str = ""


class ProviderConfig(_Section, frozen=True):
    """One upstream (``[providers.NAME]``).

    ``timeout_s`` bounds one attempt, ``deadline_s`` the whole call with its
    retries. ``api_key_env`` names the variable holding the key; empty = no key
    (a local Ollama or vLLM).
    """

    kind: Literal["openai", "anthropic"]
    base_url: str
    api_key_env: str = ""
    timeout_s: Seconds = 60.0
    connect_timeout_s: Seconds = 5.0
    max_connections: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 32
    deadline_s: Annotated[float, msgspec.Meta(gt=0, le=24 * MAX_SECONDS)] = 120.0
    max_retries: Annotated[int, msgspec.Meta(ge=0, le=100)] = 3

    def _validate(self) -> None:
        parts = urlsplit(self.base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http:// or https:// URL with a host, got {self.base_url!r}")
        _check_env_name("api_key_env", self.api_key_env)


class ModelConfig(_Section, frozen=True):
    """A model alias (``[models.ALIAS]``).

    ``model`` is the upstream name (empty = the alias itself; the loader fills
    it in). Prices are list prices in dollars per million tokens, both or
    neither; a configured zero is a known zero.
    """

    provider: str
    model: str = ""
    input_price_per_mtok: PricePerMtok | None = None
    output_price_per_mtok: PricePerMtok | None = None

    def _validate(self) -> None:
        if (self.input_price_per_mtok is None) != (self.output_price_per_mtok is None):
            raise ValueError("set both input_price_per_mtok and output_price_per_mtok, or neither")
        for name in ("input_price_per_mtok", "output_price_per_mtok"):
            value = getattr(self, name)
            if value is not None and 0 < value < MIN_NONZERO_PRICE_PER_MTOK_USD:
                raise ValueError(
                    f"{name} is 0 (a known zero) or at least {MIN_NONZERO_PRICE_PER_MTOK_USD:f} (one micro-dollar "
                    f"per million tokens), got {value!r}"
                )

    @property
    def price(self) -> Price | None:
        """The configured list price in micro-dollars per million tokens, or ``None``."""
        if self.input_price_per_mtok is None or self.output_price_per_mtok is None:
            return None
        return Price(
            round(self.input_price_per_mtok * MICROS_PER_DOLLAR),
            round(self.output_price_per_mtok * MICROS_PER_DOLLAR),
        )


class TeamConfig(_Section, frozen=True):
    """A team's posture (``[teams.NAME]``). It *seeds* the team's stored posture: at start the
    sidecar stores it for a team the store holds no posture of; from then on the stored one
    (``PUT /v1/teams/{team}/posture``) is what counts (docs/posture.md)."""

    prompt_retention: bool = True


class RetentionConfig(_Section, frozen=True):
    """``[retention]``: the window of served exchanges kept for replay trials (docs: README,
    "Retention window"), for teams whose prompt retention is on. Off while ``key_env`` is
    empty: nothing is kept and replay answers ``409 retention_unavailable``.

    ``key_env`` names the environment variable holding the AES-256-GCM key (32 bytes,
    URL-safe base64) every retained body is sealed with. An exchange is evicted once older
    than ``window_seconds`` or when keeping it would pass ``max_count`` exchanges or
    ``max_bytes`` sealed bytes (oldest first, each eviction counted). ``buffer_size`` bounds
    the exchanges waiting to be written, off the serving path; a full buffer sheds the newest
    and counts them."""

    key_env: str = ""
    window_seconds: Annotated[float, msgspec.Meta(gt=0, le=86_400 * 366)] = 7 * 86_400.0
    max_count: Annotated[int, msgspec.Meta(ge=1, le=100_000_000)] = 1_000_000
    max_bytes: Annotated[int, msgspec.Meta(ge=1, le=1 << 44)] = 4 << 30
    buffer_size: Annotated[int, msgspec.Meta(ge=1, le=10_000_000)] = 10_000
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 500

    @property
    def enabled(self) -> bool:
        return bool(self.key_env)

    def _validate(self) -> None:
        if self.key_env:
            _check_env_name("key_env", self.key_env)


class SidecarConfig(_Section, frozen=True):
    """This sidecar itself (``[sidecar]``). ``gateway``: the name of the gateway it serves;
    with it, the sidecar reports that gateway's content-uplink setting (``[uplink] content``)
    for every team of ``[teams]``, at start and on each engine heartbeat. Empty: it reports
    nothing, and its gateway does not count towards any team's posture."""

    gateway: str = ""

    def _validate(self) -> None:
        if len(self.gateway) > 256 or not self.gateway.isprintable() or self.gateway != self.gateway.strip():
            raise ValueError("gateway must be up to 256 printable characters, no whitespace at either end")


class UplinkConfig(_Section, frozen=True):
    """``[uplink]``: what this sidecar's gateway allows to leave it, and results to a
    control-plane collector (docs/uplink.md, docs/posture.md).

    ``content``: whether prompt and answer bodies may be sent to the control plane (content
    uplink); it is this gateway's setting, reported per team (see :class:`SidecarConfig`).
    ``stale_seconds``: a gateway not heard from for longer stops counting in a team's posture.
    Delivery is off while ``collector_url`` is empty. The private key is read at start, never
    logged."""

    content: bool = False
    stale_seconds: Annotated[float, msgspec.Meta(gt=0, le=86_400 * 30)] = 300.0

    collector_url: str = ""
    #: This sidecar's name in every batch (e.g. ``gw-eu-1/sidecar-7f3a``).
    sidecar_id: str = ""
    #: A PEM Ed25519 private key; the collector holds its public key under ``key_id``.
    private_key_file: str = ""
    key_id: str = ""
    audience: str = ""
    issuer: str = ""
    #: The outbox's bound, in records.
    max_outbox_records: Annotated[int, msgspec.Meta(ge=1, le=100_000_000)] = 1_000_000
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 500
    timeout_seconds: Seconds = 10.0
    token_ttl_seconds: Annotated[float, msgspec.Meta(ge=1, le=60)] = 30.0
    lease_seconds: Seconds = 60.0
    backoff_base_seconds: Seconds = 0.2
    backoff_cap_seconds: Seconds = 30.0
    idle_poll_seconds: Seconds = 0.2
    #: How often trials are read for changed states to send (``trial_state`` records).
    state_interval_seconds: Seconds = 5.0

    @property
    def enabled(self) -> bool:
        return bool(self.collector_url)

    def _validate(self) -> None:
        if not self.collector_url:
            return
        if not self.collector_url.startswith(("http://", "https://")):
            raise ValueError("collector_url must be an http:// or https:// URL")
        for name in ("sidecar_id", "private_key_file", "key_id", "audience", "issuer"):
            if not getattr(self, name):
                raise ValueError(f"{name} is required when collector_url is set")
        if self.lease_seconds <= self.timeout_seconds:
            raise ValueError("lease_seconds must be longer than timeout_seconds (a send must end inside its lease)")


class CollectorKeyConfig(_Section, frozen=True):
    """``[[collector.keys]]``: a sidecar's public key (PEM Ed25519) under its ``kid``."""

    kid: str
    path: str


class CollectorConfig(_Section, frozen=True):
    """``[collector]``: the reference collector (``shadowtrial collector``, docs/uplink.md)."""

    listen: str = "127.0.0.1:8792"
    db_path: str = "collector.db"
    #: ``postgresql://...`` to keep the collector's records (and run its trials) in PostgreSQL;
    #: when set it wins over ``db_path`` (pass a password only through ``SHADOWTRIAL_COLLECTOR__STORE_URL``).
    store_url: str = ""
    audience: str = ""
    issuers: tuple[str, ...] = ()
    keys: tuple[CollectorKeyConfig, ...] = ()
    #: Teams whose posture allows content uplink; ``exchange`` records of others are refused.
    content_teams: tuple[str, ...] = ()
    max_body_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 32 * 1024 * 1024
    leeway_seconds: Annotated[float, msgspec.Meta(ge=0, le=60)] = 5.0

    def _validate(self) -> None:
        split_listen(self.listen)
        if self.store_url and not self.store_url.startswith(("postgresql://", "postgres://", "sqlite://")):
            raise ValueError("store_url must start with postgresql:// (or sqlite:// for a file)")
        kids = [k.kid for k in self.keys]
        if len(set(kids)) != len(kids):
            raise ValueError("keys: two keys share a kid")

    @property
    def location(self) -> str:
        """What :func:`sidecar.store.make_store` opens for the collector."""
        return self.store_url or self.db_path


class TelemetryConfig(_Section, frozen=True):
    """OpenTelemetry traces and metrics (docs/telemetry.md).

    Nothing is exported unless ``otlp_endpoint`` is set (in the file, by
    ``SHADOWTRIAL_TELEMETRY__OTLP_ENDPOINT``, or by the standard
    ``OTEL_EXPORTER_OTLP_ENDPOINT``): then every process of the sidecar (and the
    engine's own process) sends OTLP over HTTP/protobuf to ``<otlp_endpoint>/v1/traces``
    and ``<otlp_endpoint>/v1/metrics``. Without it no exporter, reader or span
    processor exists, and the Prometheus ``/metrics`` endpoint is unaffected either way.
    """

    #: The collector's OTLP/HTTP base URL (``http://otel-collector:4318``); empty: no export.
    otlp_endpoint: str = ""
    #: ``service.name`` of the exported resource (``OTEL_SERVICE_NAME`` when the file leaves it).
    service_name: str = "shadowtrial"
    #: Export a trace per case (with ``otlp_endpoint``).
    traces: bool = True
    #: Export metrics (with ``otlp_endpoint``).
    metrics: bool = True
    #: Share of cases traced when the exchange carries no sampled gateway trace context.
    sample_ratio: Share = 1.0
    #: How often metrics are exported.
    export_interval_seconds: Seconds = 60.0
    #: How long one export may take (and the most a shutdown waits for the last one).
    export_timeout_seconds: Seconds = 10.0

    def _validate(self) -> None:
        if self.otlp_endpoint:
            parts = urlsplit(self.otlp_endpoint)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(
                    f"otlp_endpoint must be an http:// or https:// URL with a host, got {self.otlp_endpoint!r}"
                )
        if not self.service_name:
            raise ValueError("service_name must not be empty")

    @property
    def exporting(self) -> bool:
        """Whether anything is sent to a collector."""
        return bool(self.otlp_endpoint) and (self.traces or self.metrics)


class AlertsConfig(_Section, frozen=True):
    """``[alerts]``: the optional webhook every alert transition is POSTed to (docs/alerts.md).

    Off while ``webhook_url`` is empty. Each POST is signed with HMAC-SHA256 of the secret
    that ``secret_env`` names (read at start, never logged) over the timestamp and the body,
    and retried with jittered exponential backoff up to ``max_attempts`` in all."""

    webhook_url: str = ""
    secret_env: str = ""
    timeout_seconds: Seconds = 5.0
    max_attempts: Annotated[int, msgspec.Meta(ge=1, le=100)] = 8
    backoff_base_seconds: Seconds = 0.5
    backoff_cap_seconds: Seconds = 60.0
    poll_seconds: Seconds = 1.0

    @property
    def enabled(self) -> bool:
        return bool(self.webhook_url)

    def _validate(self) -> None:
        _check_env_name("secret_env", self.secret_env)
        if not self.webhook_url:
            return
        if not self.webhook_url.startswith(("http://", "https://")):
            raise ValueError("webhook_url must be an http:// or https:// URL")
        if not self.secret_env:
            raise ValueError("secret_env is required when webhook_url is set (every POST is signed)")


class Secrets(Mapping[str, str]):
    """Provider API keys by provider name, plus the tap's shared token.

    Read from the environment once by :func:`load_config`. ``repr``/``str``
    show which providers have a key, never a key.
    """

    __slots__ = ("_keys", "_tap_token", "_retention_key", "_webhook_secret")

    def __init__(
        self, provider_keys: Mapping[str, str] | None = None, *, tap_token: str | None = None,
        retention_key: bytes | None = None, webhook_secret: str | None = None,
    ) -> None:
        self._keys = dict(provider_keys or {})
        self._tap_token = tap_token
        self._retention_key = retention_key
        self._webhook_secret = webhook_secret

    @property
    def retention_key(self) -> bytes | None:
        """The retention window's AES-256-GCM key (``retention.key_env``), or ``None``."""
        return self._retention_key

    @property
    def webhook_secret(self) -> str | None:
        """The alert webhook's HMAC secret (``alerts.secret_env``), or ``None``."""
        return self._webhook_secret

    @property
    def tap_token(self) -> str | None:
        """The token the tap requires, or ``None`` when ``tap.token_env`` is empty."""
        return self._tap_token

    def __getitem__(self, provider: str) -> str:
        return self._keys[provider]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secrets):
            return NotImplemented
        return (self._keys, self._tap_token, self._retention_key, self._webhook_secret) == (
            other._keys, other._tap_token, other._retention_key, other._webhook_secret
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        token = "set" if self._tap_token is not None else "unset"
        return f"Secrets(providers={sorted(self._keys)!r}, tap_token={token})"

    __str__ = __repr__


class Config(_Section, frozen=True):
    """The whole configuration. Frozen; treat the named-table dicts as read-only.

    ``secrets`` is filled by :func:`load_config` from the environment and is
    never read from the file.
    """

    tap: TapConfig = msgspec.field(default_factory=TapConfig)
    admin: AdminConfig = msgspec.field(default_factory=AdminConfig)
    auth: AuthConfig = msgspec.field(default_factory=AuthConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    engine: EngineConfig = msgspec.field(default_factory=EngineConfig)
    judge: JudgeConfig = msgspec.field(default_factory=JudgeConfig)
    prices: PricesConfig = msgspec.field(default_factory=PricesConfig)
    providers: dict[str, ProviderConfig] = {}
    models: dict[str, ModelConfig] = {}
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
        f"add [models.{_toml_key(alias_or_name)}] with provider = \"...\""
    )


# --- loading -----------------------------------------------------------------

_NAMED_TABLES: dict[str, type[_Section]] = {"providers": ProviderConfig, "models": ModelConfig, "teams": TeamConfig}


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
    unknown = sorted(set(unknown) - _secret_names(raw))
    if unknown:
        raise ConfigError(
            f"unknown setting(s) in the environment: {', '.join(unknown)} "
            f"(overrides are {ENV_PREFIX}<SECTION>__<KEY>, e.g. {ENV_PREFIX}TAP__LISTEN)"
        )
    config = _convert(raw, origins)
    return msgspec.structs.replace(config, secrets=_read_secrets(config, environ))


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


def _toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else msgspec.json.encode(name).decode()


def _path_segment(name: str) -> str:
    return f".{name}" if _BARE_KEY.fullmatch(name) else f"[{msgspec.json.encode(name).decode()}]"


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
    root = mi.type_info(Config)
    for var in sorted(environ):
        if not var.startswith(ENV_PREFIX) or var in RESERVED_ENV:
            continue
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


def _secret_names(raw: dict[str, Any]) -> set[str]:
    """Variables named by api_key_env / token_env (they are not overrides even in our namespace)."""
    names: set[str] = set()
    tap = raw.get("tap")
    if isinstance(tap, dict) and isinstance(tap.get("token_env"), str):
        names.add(tap["token_env"])
    retention = raw.get("retention")
    if isinstance(retention, dict) and isinstance(retention.get("key_env"), str):
        names.add(retention["key_env"])
    alerts = raw.get("alerts")
    if isinstance(alerts, dict) and isinstance(alerts.get("secret_env"), str):
        names.add(alerts["secret_env"])
    providers = raw.get("providers")
    if isinstance(providers, dict):
        for entry in providers.values():
            if isinstance(entry, dict) and isinstance(entry.get("api_key_env"), str):
                names.add(entry["api_key_env"])
    return names


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


def _read_secrets(config: Config, environ: Mapping[str, str]) -> Secrets:
    problems: list[str] = []

    def read(var: str, where: str) -> str | None:
        value = environ.get(var)
        if value is None:
            problems.append(f"{where} names {var}, which is not set in the environment")
        elif not value:
            problems.append(f"{where} names {var}, which is set but empty")
        return value or None

    keys: dict[str, str] = {}
    for name, provider in config.providers.items():
        if provider.api_key_env:
            key = read(provider.api_key_env, f"providers.{_toml_key(name)}.api_key_env")
            if key is not None:
                keys[name] = key
    token = read(config.tap.token_env, "tap.token_env") if config.tap.token_env else None
    if token is not None and not re.fullmatch(r"[\x21-\x7e]+", token):
        # The tap takes "Authorization: Bearer <token>" with a token of visible ASCII only: a
        # token with a space or another character could never match. (The value is not shown.)
        problems.append(f"tap.token_env names {config.tap.token_env}, whose value is not one word of visible ASCII")
        token = None
    retention_key = None
    if config.retention.key_env:
        encoded = read(config.retention.key_env, "retention.key_env")
        if encoded is not None:
            retention_key = _aes_key(encoded)
            if retention_key is None:  # the value is never shown
                problems.append(f"retention.key_env names {config.retention.key_env}, whose value is not 32 bytes "
                                "in URL-safe base64 (make one: python -c \"import os, base64; "
                                "print(base64.urlsafe_b64encode(os.urandom(32)).decode())\")")
    webhook = None
    if config.alerts.enabled:
        webhook = read(config.alerts.secret_env, "alerts.secret_env")
    if problems:
        raise ConfigError("; ".join(problems))
    return Secrets(keys, tap_token=token, retention_key=retention_key, webhook_secret=webhook)


def _aes_key(encoded: str) -> bytes | None:
    """A 256-bit key from its URL-safe base64 text (padding optional), or None."""
    try:
        key = base64.urlsafe_b64decode(encoded.strip() + "=" * (-len(encoded.strip()) % 4))
    except (ValueError, binascii.Error):
        return None
    return key if len(key) == 32 else None
