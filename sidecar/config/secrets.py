"""What the config reads from the environment by name: provider keys, the tap's token, the
retention key, the alert webhook's secret; never shown in a repr or a message."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from sidecar.config.fields import toml_key
from sidecar.config.sections import AlertsConfig, ProviderConfig, RetentionConfig, TapConfig
from sidecar.errors import ConfigError


class SecretNames(Protocol):
    """The sections of the config that name secrets (:class:`~sidecar.config.load.Config`
    has them; it is built from what this module reads, so this module does not import it)."""

    @property
    def providers(self) -> Mapping[str, ProviderConfig]: ...
    @property
    def tap(self) -> TapConfig: ...
    @property
    def retention(self) -> RetentionConfig: ...
    @property
    def alerts(self) -> AlertsConfig: ...


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


def secret_names(raw: dict[str, Any]) -> set[str]:
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


def read_secrets(config: SecretNames, environ: Mapping[str, str]) -> Secrets:
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
            key = read(provider.api_key_env, f"providers.{toml_key(name)}.api_key_env")
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
