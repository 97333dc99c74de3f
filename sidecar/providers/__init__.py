"""Provider clients: one connection pool per upstream, results as values.

Each client speaks httpx (requests, responses and exceptions are httpx's, and
tests inject ``httpx.MockTransport``) over an :class:`AiohttpTransport` by
default (see :mod:`sidecar.providers.transport` for why and its contract).

``make_provider(kind, base_url, api_key, **opts)`` builds an
:class:`OpenAIProvider` or :class:`AnthropicProvider`; both satisfy
:class:`Provider`. Remote failures come back as :class:`ProviderResult`
values (see :mod:`sidecar.providers.retry`); only configuration and
programming errors raise (see :mod:`sidecar.providers.errors`).
"""

from __future__ import annotations

from sidecar.providers.anthropic import AnthropicProvider
from sidecar.providers.base import ChatRequest, ErrorKind, Provider, ProviderResult
from sidecar.providers.errors import ProviderClosedError, ProviderConfigError, ProviderError
from sidecar.providers.factory import make_provider
from sidecar.providers.openai import OpenAIProvider
from sidecar.providers.transport import AiohttpTransport

__all__ = [
    "AiohttpTransport",
    "AnthropicProvider",
    "ChatRequest",
    "ErrorKind",
    "OpenAIProvider",
    "Provider",
    "ProviderClosedError",
    "ProviderConfigError",
    "ProviderError",
    "ProviderResult",
    "make_provider",
]
