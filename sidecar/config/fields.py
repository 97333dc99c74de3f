"""What every config section shares: its base (:class:`Section`), the ranges operators' numbers
are held to, and the checks of names and addresses."""

from __future__ import annotations

import math
import re
from typing import Annotated

import msgspec


ENV_PREFIX = "SHADOWTRIAL_"
#: Read by the CLI, not the config (`shadowtrial send` reads the two TAP ones).
RESERVED_ENV = frozenset({"SHADOWTRIAL_CONFIG", "SHADOWTRIAL_ADMIN_URL", "SHADOWTRIAL_TOKEN",
                          "SHADOWTRIAL_TAP_URL", "SHADOWTRIAL_TAP_TOKEN"})

# Ranges an operator's numbers are held to, in this file and in the admin API alike
# (sidecar.trials.create uses the shared ones). Each bound is far beyond any sensible setting and
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

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


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


def toml_key(name: str) -> str:
    """``name`` as a TOML key: bare when it can be, quoted otherwise."""
    return name if BARE_KEY.fullmatch(name) else msgspec.json.encode(name).decode()


def check_env_name(field: str, value: str) -> None:
    # Never echo the value: a common mistake is pasting the key itself here.
    if value and not ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{field} must be the NAME of an environment variable (letters, digits, underscores), "
            "not its value; the value given is not shown"
        )


class Section(msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True):
    """Operator input: frozen, unknown keys refused, validated at construction."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        self._validate()

    def _validate(self) -> None:
        """Checks beyond the field types; raise ``ValueError`` naming the field."""


