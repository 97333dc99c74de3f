"""The config's sections, one msgspec Struct each, validated at construction (the uplink's
and the collector's are in :mod:`sidecar.config.uplink`)."""

from __future__ import annotations

import ipaddress
from typing import Annotated, Literal
from urllib.parse import urlsplit

import msgspec

from policies.money import MICROS_PER_DOLLAR, Price
from sidecar.auth.algorithms import HMAC, SUPPORTED as JWT_ALGORITHMS
from sidecar.config.fields import (
    HEADER_NAME, MAX_SECONDS, MIN_NONZERO_PRICE_PER_MTOK_USD, NonNegativeSeconds, PricePerMtok, Seconds,
    Section, Share, Temperature, Tokens, check_env_name, split_listen,
)


class TapConfig(Section, frozen=True):
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
        check_env_name("token_env", self.token_env)


class AdminConfig(Section, frozen=True):
    """The admin API (and the console it serves).

    ``read_timeout_seconds`` and ``idle_timeout_seconds`` bound its connections as the
    tap's do: a body not fully arrived that long after its headers gets ``408 read_timeout``
    and the connection is closed; a connection without a complete request for that long
    (headers unfinished included) is closed.
    """

    listen: str = "127.0.0.1:8791"
    #: An admin request that takes longer (a store that cannot answer) is ``503 store_unavailable``.
    request_timeout_seconds: Seconds = 10.0
    read_timeout_seconds: Seconds = 15.0
    idle_timeout_seconds: Seconds = 15.0

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


def check_algorithms(field: str, algorithms: tuple[str, ...]) -> None:
    if not algorithms:
        raise ValueError(f"{field} must name at least one algorithm (the token's own is never trusted)")
    for alg in algorithms:
        if alg not in JWT_ALGORITHMS:
            raise ValueError(f"{field}: {alg!r} is not one of {', '.join(sorted(JWT_ALGORITHMS))}")


class AuthKeyConfig(Section, frozen=True):
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
        check_algorithms("algorithms", self.algorithms)
        if set(self.algorithms) & HMAC and set(self.algorithms) - HMAC:
            raise ValueError("algorithms: HS* (a shared secret) and public-key algorithms cannot share a key")
        if not self.kid and not self.allow_no_kid:
            raise ValueError("set kid, or allow_no_kid = true for tokens that name no key id")


class AuthConfig(Section, frozen=True):
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
            check_algorithms("jwks_algorithms", self.jwks_algorithms)
        if self.mode != "jwt":
            return
        if not self.audience:
            raise ValueError('audience must be set when mode = "jwt"')
        if not self.issuer:
            raise ValueError('issuer must be set when mode = "jwt"')
        if not self.keys and not self.jwks:
            raise ValueError('mode = "jwt" needs keys ([[auth.keys]]) or a jwks file')


class StoreConfig(Section, frozen=True):
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


class EngineConfig(Section, frozen=True):
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
        if not HEADER_NAME.fullmatch(self.shadow_header):
            raise ValueError(f"shadow_header must be an HTTP header name, got {self.shadow_header!r}")


class JudgeConfig(Section, frozen=True):
    """Judge defaults; ``model`` is an alias (or a name the single provider serves), empty = none set."""

    model: str = ""
    rubric: str = "pairwise-v1"
    temperature: Temperature = 0.0
    max_tokens: Tokens = 512
    audit_share: Share = 0.10

    def _validate(self) -> None:
        if not self.rubric:
            raise ValueError("rubric must not be empty")


class PricesConfig(Section, frozen=True):
    """``map_file``: a LiteLLM ``model_prices_and_context_window.json``; empty = none."""

    map_file: str = ""


class ProviderConfig(Section, frozen=True):
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
        check_env_name("api_key_env", self.api_key_env)


class ModelConfig(Section, frozen=True):
    """A model alias (``[models.ALIAS]``).

    ``model`` is the upstream name (empty = the alias itself; the loader fills
    it in). Prices are list prices in dollars per million tokens, both or
    neither; a configured zero is a known zero.
    """

    provider: str
    model: str = ""
    input_price_per_mtok: PricePerMtok | None = None
    output_price_per_mtok: PricePerMtok | None = None
    #: Named versions of this alias: version -> the upstream model name serving it (same provider;
    #: the alias's list price, else the price map's for that name). An A/B side's ``version`` is one.
    versions: dict[str, str] = {}

    def _validate(self) -> None:
        if (self.input_price_per_mtok is None) != (self.output_price_per_mtok is None):
            raise ValueError("set both input_price_per_mtok and output_price_per_mtok, or neither")
        if any(not v or not upstream for v, upstream in self.versions.items()):
            raise ValueError("versions maps a non-empty version name to a non-empty upstream model name")
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


class TeamConfig(Section, frozen=True):
    """A team's posture (``[teams.NAME]``). It *seeds* the team's stored posture: at start the
    sidecar stores it for a team the store holds no posture of; from then on the stored one
    (``PUT /v1/teams/{team}/posture``) is what counts (docs/posture.md)."""

    prompt_retention: bool = True


class RetentionConfig(Section, frozen=True):
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
            check_env_name("key_env", self.key_env)


class SidecarConfig(Section, frozen=True):
    """This sidecar itself (``[sidecar]``). ``gateway``: the name of the gateway it serves;
    with it, the sidecar reports that gateway's content-uplink setting (``[uplink] content``)
    for every team of ``[teams]``, at start and on each engine heartbeat. Empty: it reports
    nothing, and its gateway does not count towards any team's posture."""

    gateway: str = ""

    def _validate(self) -> None:
        if len(self.gateway) > 256 or not self.gateway.isprintable() or self.gateway != self.gateway.strip():
            raise ValueError("gateway must be up to 256 printable characters, no whitespace at either end")


class TelemetryConfig(Section, frozen=True):
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


class AlertsConfig(Section, frozen=True):
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
        check_env_name("secret_env", self.secret_env)
        if not self.webhook_url:
            return
        if not self.webhook_url.startswith(("http://", "https://")):
            raise ValueError("webhook_url must be an http:// or https:// URL")
        if not self.secret_env:
            raise ValueError("secret_env is required when webhook_url is set (every POST is signed)")


