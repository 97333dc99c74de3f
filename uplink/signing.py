"""The uplink's tokens: a short-lived EdDSA JWT per request, signed with the sidecar's key.

The sender signs (:class:`Signer`); the collector verifies (:class:`Verifier`)
with the algorithm pinned to EdDSA, the key chosen by ``kid`` among those it
was configured with, and ``iss``, ``aud``, ``iat`` and ``exp`` required.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

if TYPE_CHECKING:  # PyJWT and the key types are imported on use: a sidecar without an uplink starts without them
    from cryptography.hazmat.primitives.asymmetric import ed25519

ALGORITHM = "EdDSA"
#: The longest a token may live: a stolen one is useless within a minute.
MAX_TTL_S = 60.0


class TokenRefused(Exception):
    """The collector refuses a token; ``code`` is the stable error code, ``field`` what is wrong."""

    def __init__(self, code: str, message: str, field: str) -> None:
        super().__init__(message)
        self.code = code
        self.field = field


def load_private_key(path: str) -> ed25519.Ed25519PrivateKey:
    """An unencrypted PEM Ed25519 private key. Raises ``ValueError`` naming the file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path!r} is not a readable unencrypted PEM private key") from exc
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{path!r} is not an Ed25519 key (the uplink signs with EdDSA)")
    return key


def load_public_key(path: str) -> ed25519.Ed25519PublicKey:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    try:
        key = serialization.load_pem_public_key(Path(path).read_bytes())
    except (OSError, ValueError, TypeError) as exc:
        raise ValueError(f"{path!r} is not a readable PEM public key") from exc
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise ValueError(f"{path!r} is not an Ed25519 public key (the uplink verifies EdDSA only)")
    return key


@dataclass(frozen=True)
class Signer:
    key: ed25519.Ed25519PrivateKey
    kid: str
    issuer: str
    audience: str
    ttl_s: float = 30.0
    clock: Callable[[], float] = time.time

    def token(self) -> str:
        import jwt

        now = int(self.clock())
        ttl = int(min(self.ttl_s, MAX_TTL_S))
        claims = {"iss": self.issuer, "aud": self.audience, "iat": now, "exp": now + ttl, "sub": self.issuer}
        return jwt.encode(claims, self.key, algorithm=ALGORITHM, headers={"kid": self.kid})


class Verifier:
    """Verifies uplink tokens against keys by ``kid``; raises :class:`TokenRefused`."""

    def __init__(
        self, keys: Mapping[str, ed25519.Ed25519PublicKey], *, audience: str, issuers: frozenset[str],
        leeway_s: float = 5.0, max_ttl_s: float = MAX_TTL_S,
    ) -> None:
        self._keys = dict(keys)
        self._audience = audience
        self._issuers = issuers
        self._leeway = leeway_s
        self._max_ttl = max_ttl_s

    def verify(self, authorization: str | None) -> dict[str, Any]:
        import jwt

        if not authorization or not authorization.startswith("Bearer "):
            raise TokenRefused("unauthenticated", "a bearer token is required", "Authorization")
        token = authorization[len("Bearer "):].strip()
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise TokenRefused("invalid_token", "the token is not a JWT", "Authorization") from None
        if header.get("alg") != ALGORITHM:
            raise TokenRefused("invalid_token", f"the token's algorithm must be {ALGORITHM}", "alg")
        key = self._keys.get(str(header.get("kid", "")))
        if key is None:
            raise TokenRefused("unknown_key", "the token's kid names no key this collector knows", "kid")
        try:
            claims: dict[str, Any] = jwt.decode(
                token, key, algorithms=[ALGORITHM], audience=self._audience, leeway=self._leeway,
                options={"require": ["exp", "iat", "iss", "aud"]},
            )
        except jwt.ExpiredSignatureError:
            raise TokenRefused("token_expired", "the token has expired", "exp") from None
        except jwt.InvalidAudienceError:
            raise TokenRefused("invalid_token", "the token is for another audience", "aud") from None
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused("invalid_token", f"the token lacks {exc.claim}", exc.claim) from None
        except jwt.InvalidTokenError:
            raise TokenRefused("invalid_token", "the token's signature or claims are not valid", "Authorization") from None
        if claims.get("iss") not in self._issuers:
            raise TokenRefused("invalid_token", "the token's issuer is not allowed", "iss")
        if float(claims["exp"]) - float(claims["iat"]) > self._max_ttl + self._leeway:
            raise TokenRefused("invalid_token", f"the token lives longer than {self._max_ttl:g} s", "exp")
        return claims
