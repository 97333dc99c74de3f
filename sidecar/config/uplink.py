"""``[uplink]`` and ``[collector]``: results to a control-plane collector, and the collector's own
settings (docs/uplink.md)."""

from __future__ import annotations

from typing import Annotated

import msgspec
from sidecar.config.fields import Seconds, Section, split_listen


class UplinkConfig(Section, frozen=True):
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
    #: The control plane's console (e.g. ``https://control.example/console/``): the sidecar's
    #: console links to it and ``GET /v1/results`` names it for corpus evidence. Empty: none.
    console_url: str = ""

    @property
    def enabled(self) -> bool:
        return bool(self.collector_url)

    def _validate(self) -> None:
        if self.console_url and not self.console_url.startswith(("http://", "https://")):
            raise ValueError("console_url must be an http:// or https:// URL")
        if not self.collector_url:
            return
        if not self.collector_url.startswith(("http://", "https://")):
            raise ValueError("collector_url must be an http:// or https:// URL")
        for name in ("sidecar_id", "private_key_file", "key_id", "audience", "issuer"):
            if not getattr(self, name):
                raise ValueError(f"{name} is required when collector_url is set")
        if self.lease_seconds <= self.timeout_seconds:
            raise ValueError("lease_seconds must be longer than timeout_seconds (a send must end inside its lease)")


class CollectorKeyConfig(Section, frozen=True):
    """``[[collector.keys]]``: a sidecar's public key (PEM Ed25519) under its ``kid``."""

    kid: str
    path: str


class CollectorConfig(Section, frozen=True):
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
    #: A body (a batch, a dataset upload) not fully arrived this long after its headers gets
    #: ``408 read_timeout`` and its connection is closed; longer than the tap's 15 s because
    #: a batch or a dataset may be 32 MiB.
    read_timeout_seconds: Seconds = 30.0
    #: A connection without a complete request this long (headers unfinished included) is closed.
    idle_timeout_seconds: Seconds = 15.0

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


