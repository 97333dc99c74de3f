"""Errors of the provider package.

Only programming and configuration errors are exceptions here. Everything a
remote upstream can do to us (429, 5xx, timeouts, resets, malformed bodies) is
a value, :class:`sidecar.providers.base.ProviderResult`, with an ``error``
kind; :mod:`sidecar.providers.retry` translates httpx's exceptions into those
values at the boundary and nothing httpx raises escapes ``chat``.

The tree::

    ProviderError                    base of everything this package raises
    ├── ProviderConfigError          (also ValueError) bad construction: unknown
    │                                kind, base_url that is not http(s), deadline
    │                                or retry options out of range, unknown option
    └── ProviderClosedError          (also RuntimeError) ``chat`` after ``aclose``
"""

from __future__ import annotations


class ProviderError(Exception):
    """Base of the provider package's exceptions; never a remote outcome."""


class ProviderConfigError(ProviderError, ValueError):
    """A provider was constructed with options that cannot work.

    Raised at construction, never during a call. The message names the option
    and never contains an API key.
    """


class ProviderClosedError(ProviderError, RuntimeError):
    """``chat`` was called on a provider whose client is already closed."""
