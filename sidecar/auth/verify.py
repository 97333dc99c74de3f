"""From an ``Authorization`` header value to a :class:`~policies.roles.Principal`.

A token is accepted when its header's ``kid`` names a configured key (a token without
``kid`` is tried only against keys configured with ``allow_no_kid``), its ``alg`` is one
that key has pinned, its signature verifies, and it carries ``exp``, ``iat``, ``aud``,
``iss`` and ``sub`` with the configured audience and issuer, neither expired nor issued
(``iat``, ``nbf``) in the future beyond the leeway. ``exp``, ``iat`` and ``nbf`` are
NumericDates as RFC 7519 defines them: JSON numbers, finite (not strings, which PyJWT would
convert, nor booleans). ``roles`` and ``teams`` are lists of
strings (absent: empty) and ``content`` a boolean (absent: false). Anything else is
:class:`Unauthorized` with a stable ``reason``; no message quotes the token or its claims.
"""

from __future__ import annotations

import math
import re
import time
from typing import TYPE_CHECKING, Any

from policies.roles import Principal
from sidecar.auth.algorithms import SUPPORTED
from sidecar.auth.errors import Unauthorized
from sidecar.auth.keys import KeySet

if TYPE_CHECKING:
    import jwt  # imported by the first token checked, not with the module (start-up cost)

REQUIRED_CLAIMS = ("exp", "iat", "aud", "iss", "sub")
#: The NumericDate claims: checked here, typed strictly, rather than by PyJWT (which takes ``"1700000000"``).
DATE_CLAIMS = ("exp", "iat", "nbf")
#: Three base64url segments: anything else is refused before PyJWT sees it.
_COMPACT = re.compile(r"[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")
#: Tokens longer than this are refused unread (a JWT of roles and teams is well under 2 KiB).
MAX_TOKEN_CHARS = 8192


class Verifier:
    """``authenticate(header_value) -> Principal``; raises :class:`Unauthorized`."""

    def __init__(self, keys: KeySet, *, audience: str, issuer: str, leeway_s: float = 30.0) -> None:
        self.keys = keys
        self.audience = audience
        self.issuer = issuer
        self.leeway_s = leeway_s

    def reload(self) -> bool:
        return self.keys.reload()

    def authenticate(self, authorization: str | None) -> Principal:
        import jwt

        token = bearer_token(authorization)
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError:
            raise Unauthorized("malformed", "the bearer token is not a JWT") from None
        alg, kid = header.get("alg"), header.get("kid")
        if not isinstance(alg, str) or alg not in SUPPORTED:
            raise Unauthorized("algorithm_not_allowed", "the token's algorithm is not accepted")
        if kid is not None and not isinstance(kid, str):
            raise Unauthorized("malformed", "the token's kid is not a string")
        candidates = self.keys.candidates(kid)
        if not candidates:
            raise Unauthorized("unknown_kid", "the token's key id is not a configured key" if kid is not None
                               else "the token names no key id, and no configured key accepts one without")
        usable = [k for k in candidates if alg in k.algorithms]
        if not usable:
            raise Unauthorized("algorithm_not_allowed", "the token's algorithm is not one its key accepts")
        for key in usable:
            try:
                claims = jwt.decode(
                    token, key.key, algorithms=list(key.algorithms), audience=self.audience, issuer=self.issuer,
                    options={"require": list(REQUIRED_CLAIMS), "enforce_minimum_key_length": True,
                             "verify_exp": False, "verify_iat": False, "verify_nbf": False},
                )
            except jwt.InvalidSignatureError:
                continue  # another key of the same kid (or of none) may verify it
            except jwt.PyJWTError as exc:
                raise _translate(exc) from None
            check_dates(claims, now=time.time(), leeway_s=self.leeway_s)
            return principal_of(claims)
        raise Unauthorized("bad_signature", "the token's signature does not verify")


def bearer_token(authorization: str | None) -> str:
    if not authorization or not authorization.strip():
        raise Unauthorized("missing", "an Authorization: Bearer <token> header is required")
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        raise Unauthorized("scheme", "the Authorization scheme must be Bearer")
    token = token.strip()
    if len(token) > MAX_TOKEN_CHARS or not _COMPACT.fullmatch(token):
        raise Unauthorized("malformed", "the bearer token is not a JWT")
    return token


def check_dates(claims: dict[str, Any], *, now: float, leeway_s: float) -> None:
    """``exp``, ``iat`` and ``nbf`` (present ones) as NumericDates, then the clock against them."""
    dates: dict[str, float] = {}
    for name in DATE_CLAIMS:
        if name not in claims:
            continue
        value = claims[name]
        # bool is an int to Python; a NaN would compare false with every instant.
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            raise Unauthorized("bad_claim", f"the token's {name} must be a number of seconds since the epoch")
        dates[name] = value
    if dates["exp"] <= now - leeway_s:
        raise Unauthorized("expired", "the token has expired")
    if dates["iat"] > now + leeway_s or dates.get("nbf", now) > now + leeway_s:
        raise Unauthorized("not_yet_valid", "the token is not yet valid (iat or nbf is in the future)")


def _translate(exc: jwt.PyJWTError) -> Unauthorized:
    import jwt

    if isinstance(exc, jwt.ExpiredSignatureError):
        return Unauthorized("expired", "the token has expired")
    if isinstance(exc, jwt.ImmatureSignatureError):
        return Unauthorized("not_yet_valid", "the token is not yet valid (iat or nbf is in the future)")
    if isinstance(exc, jwt.InvalidAudienceError):
        return Unauthorized("wrong_audience", "the token is not for this audience")
    if isinstance(exc, jwt.InvalidIssuerError):
        return Unauthorized("wrong_issuer", "the token's issuer is not the configured one")
    if isinstance(exc, jwt.MissingRequiredClaimError):
        return Unauthorized("missing_claim", f"the token has no {exc.claim} claim")
    return Unauthorized("bad_claim", "the token's claims are not valid")


def principal_of(claims: dict[str, Any]) -> Principal:
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub:
        raise Unauthorized("bad_claim", "the token's sub must be a non-empty string")
    lists: dict[str, list[str]] = {}
    for name in ("roles", "teams"):
        value = claims.get(name, [])
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise Unauthorized("bad_claim", f"the token's {name} must be a list of strings")
        lists[name] = value
    content = claims.get("content", False)
    if not isinstance(content, bool):
        raise Unauthorized("bad_claim", "the token's content must be true or false")
    return Principal.of(sub, lists["roles"], lists["teams"], content=content)
