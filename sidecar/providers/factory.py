"""Build a provider client from a config entry's kind."""

from __future__ import annotations

import inspect
from typing import Any, Literal

import httpx

from sidecar.providers.anthropic import AnthropicProvider
from sidecar.providers.base import Provider
from sidecar.providers.errors import ProviderConfigError
from sidecar.providers.openai import OpenAIProvider

ProviderKind = Literal["openai", "anthropic"]

_KINDS: dict[str, type[OpenAIProvider] | type[AnthropicProvider]] = {
    "openai": OpenAIProvider,
    "anthropic": AnthropicProvider,
}

DEFAULT_TIMEOUT = httpx.Timeout(connect=5.0, read=120.0, write=10.0, pool=5.0)
DEFAULT_LIMITS = httpx.Limits(max_connections=64, max_keepalive_connections=16, keepalive_expiry=30.0)
DEFAULT_DEADLINE_S = 180.0
DEFAULT_MAX_RETRIES = 3


def make_provider(kind: ProviderKind, base_url: str, api_key: str | None, **opts: Any) -> Provider:
    """A client for ``kind`` at ``base_url``; ``opts`` are the constructor's keyword options.

    ``timeout``, ``limits``, ``deadline_s`` and ``max_retries`` default to the
    module's ``DEFAULT_*`` values when not given. An unknown kind or option is a
    :class:`ProviderConfigError` raised here, not at the first call.
    """
    cls = _KINDS.get(kind)
    if cls is None:
        raise ProviderConfigError(f"unknown provider kind {kind!r}; expected one of {sorted(_KINDS)}")
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "base_url", "api_key"}
    unknown = sorted(set(opts) - accepted)
    if unknown:
        raise ProviderConfigError(f"unknown option(s) for {kind} provider: {', '.join(unknown)}")
    opts.setdefault("timeout", DEFAULT_TIMEOUT)
    opts.setdefault("limits", DEFAULT_LIMITS)
    opts.setdefault("deadline_s", DEFAULT_DEADLINE_S)
    opts.setdefault("max_retries", DEFAULT_MAX_RETRIES)
    return cls(base_url, api_key, **opts)
