"""Authentication's exceptions.

::

    AuthError
     ├── Unauthorized   a bearer token refused; ``reason`` is a stable code, the message
     │                  says why without quoting the token
     └── KeyLoadError   a configured key cannot be used; the message names the setting
                        (``auth.keys[0].path``) and never a key's bytes

Both translate PyJWT's and cryptography's exceptions at this package's edge.
"""

from __future__ import annotations


class AuthError(Exception):
    """Base of the authentication package's exceptions."""


class Unauthorized(AuthError):
    """A token refused. ``reason``: ``missing``, ``malformed``, ``scheme``, ``unknown_kid``,
    ``algorithm_not_allowed``, ``bad_signature``, ``expired``, ``not_yet_valid``,
    ``wrong_audience``, ``wrong_issuer``, ``missing_claim``, ``bad_claim``."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class KeyLoadError(AuthError):
    """A key file cannot be read or does not fit its pinned algorithms."""
