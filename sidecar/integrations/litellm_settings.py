"""The LiteLLM plugin's settings: ``LITELLM_SHADOWTRIAL_*``, read once and each one checked.

A setting the plugin cannot work with (``TIMEOUT_S=0``, ``BATCH=0``, ``BUFFER=lots``, a tap
URL that is not http(s)) is a :class:`SettingError` naming every bad variable, as the
operator wrote it, in one line; never a message about the plugin's internal parameters,
and never a value (a URL may carry credentials, a misplaced token may land in any
variable). :func:`sidecar.integrations.litellm.build_from_env` turns it into one log line
and a disabled plugin: a bad setting of ours must never stop the gateway.

Standard library only: this runs in the gateway's process.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

ENV_PREFIX = "LITELLM_SHADOWTRIAL_"


class SettingError(ValueError):
    """One or more ``LITELLM_SHADOWTRIAL_*`` variables cannot be used; ``variables`` names them."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.variables = tuple(name for name, _ in problems)
        super().__init__("; ".join(f"{name} {why}" for name, why in problems))


@dataclass(frozen=True)
class Settings:
    """What the plugin is built with (the keyword arguments of ``TapPlugin``)."""

    tap_url: str = "http://127.0.0.1:8790/v1/exchanges"
    tap_token: str | None = None
    gateway: str = "litellm"
    default_team: str = "default"
    timeout_s: float = 0.5
    batch_size: int = 100
    batch_bytes: int = 1 << 20
    tap_max_bytes: int = 4 << 20
    flush_s: float = 1.0
    max_buffer: int = 5000
    buffer_bytes: int = 64 << 20
    stats_every_s: float = 5.0
    admin_url: str | None = None
    admin_token: str | None = None

    def as_kwargs(self) -> dict[str, Any]:
        return asdict(self)


def _whole(least: int) -> tuple[Callable[[str], float], Callable[[float], bool], str]:
    return int, lambda v: v >= least, f"must be a whole number of at least {least}"


def _seconds(*, zero_ok: bool) -> tuple[Callable[[str], float], Callable[[float], bool], str]:
    if zero_ok:
        return float, lambda v: math.isfinite(v) and v >= 0, "must be a number of seconds, 0 or more"
    return float, lambda v: math.isfinite(v) and v > 0, "must be a number of seconds above 0"


#: variable (after the prefix) -> (Settings field, parse, accept, what it must be)
_NUMBERS: dict[str, tuple[str, tuple[Callable[[str], float], Callable[[float], bool], str]]] = {
    "TIMEOUT_S": ("timeout_s", _seconds(zero_ok=False)),
    "BATCH": ("batch_size", _whole(1)),
    "BATCH_BYTES": ("batch_bytes", _whole(1)),
    "TAP_MAX_BYTES": ("tap_max_bytes", _whole(1)),
    "FLUSH_S": ("flush_s", _seconds(zero_ok=True)),
    "BUFFER": ("max_buffer", _whole(1)),
    "BUFFER_BYTES": ("buffer_bytes", _whole(1)),
    "STATS_EVERY_S": ("stats_every_s", _seconds(zero_ok=False)),
}
_URLS = {"TAP_URL": "tap_url", "ADMIN_URL": "admin_url"}
_TEXTS = {"TAP_TOKEN": "tap_token", "GATEWAY": "gateway", "DEFAULT_TEAM": "default_team", "ADMIN_TOKEN": "admin_token"}


def read_settings(environ: Mapping[str, str]) -> Settings:
    """The settings ``environ`` gives (defaults for what is unset or empty); raises
    :class:`SettingError` naming every variable that cannot be used."""
    values: dict[str, Any] = {}
    problems: list[tuple[str, str]] = []
    for name, field in _TEXTS.items():
        raw = environ.get(ENV_PREFIX + name, "").strip()
        if raw:
            values[field] = raw
    for name, field in _URLS.items():
        raw = environ.get(ENV_PREFIX + name, "").strip()
        if not raw:
            continue
        try:
            parts = urlsplit(raw)
            ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        except ValueError:
            ok = False
        if ok:
            values[field] = raw
        else:
            problems.append((ENV_PREFIX + name, "must be an http(s) URL with a host"))
    for name, (field, (parse, accept, must)) in _NUMBERS.items():
        raw = environ.get(ENV_PREFIX + name, "").strip()
        if not raw:
            continue
        try:
            value = parse(raw)
        except (ValueError, OverflowError):
            problems.append((ENV_PREFIX + name, must))
            continue
        if accept(value):
            values[field] = value
        else:
            problems.append((ENV_PREFIX + name, must))
    if problems:
        raise SettingError(problems)
    return Settings(**values)
