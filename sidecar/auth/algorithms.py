"""The JWS algorithms the admin API can accept, by key family (no third-party imports).

A key accepts only the algorithms pinned beside it in config, and only those of its own
family: an RSA, EC or Ed25519 public key never verifies an ``HS*`` token (whose "secret"
would then be the public key anyone may read), a secret never verifies an asymmetric one,
and ``none`` is accepted by no key.
"""

from __future__ import annotations

HMAC = frozenset(("HS256", "HS384", "HS512"))
RSA = frozenset(("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"))
EC_BY_CURVE = {
    "secp256r1": frozenset(("ES256",)),
    "secp384r1": frozenset(("ES384",)),
    "secp521r1": frozenset(("ES512", "ES521")),
    "secp256k1": frozenset(("ES256K",)),
}
EC = frozenset().union(*EC_BY_CURVE.values())
EDDSA = frozenset(("EdDSA",))

#: Every algorithm a key may be configured with; ``none`` is not one.
SUPPORTED: frozenset[str] = HMAC | RSA | EC | EDDSA
