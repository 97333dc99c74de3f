"""Development tokens and key pairs: ``shadowtrial token`` and ``shadowtrial keygen``.

A minted token carries what :mod:`sidecar.auth.verify` requires (``exp``, ``iat``,
``aud``, ``iss``, ``sub``) plus ``roles``, ``teams`` and ``content``. For production,
tokens come from your identity provider; these are for the demo, tests and trying things.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Iterable, Literal

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa

from sidecar.auth.algorithms import HMAC, SUPPORTED
from sidecar.auth.errors import KeyLoadError

KeyKind = Literal["ed25519", "ec", "rsa"]
#: The algorithm each kind of generated key signs with.
KIND_ALGORITHM: dict[str, str] = {"ed25519": "EdDSA", "ec": "ES256", "rsa": "RS256"}


def load_signing_key(path: str, algorithm: str) -> Any:
    """A PEM private key, or (for ``HS*``) the secret file's bytes, stripped."""
    if algorithm not in SUPPORTED:
        raise KeyLoadError(f"--alg {algorithm!r} is not one of {', '.join(sorted(SUPPORTED))}")
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise KeyLoadError(f"--key {path!r} cannot be read: {exc.strerror or exc}") from exc
    if algorithm in HMAC:
        if b"-----BEGIN" in data:
            raise KeyLoadError(f"--key {path!r} is a PEM file; {algorithm} signs with a secret file")
        return data.strip()
    try:
        return serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise KeyLoadError(f"--key {path!r} is not an unencrypted PEM private key") from exc


def mint(
    *,
    key: Any,
    algorithm: str,
    subject: str,
    audience: str,
    issuer: str,
    roles: Iterable[str] = (),
    teams: Iterable[str] = (),
    content: bool = False,
    ttl_s: float = 3600.0,
    kid: str | None = None,
    now: float | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """A signed compact JWT. ``key``: a private key object or an HMAC secret."""
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {
        "sub": subject, "aud": audience, "iss": issuer, "iat": issued, "exp": issued + int(ttl_s),
        "roles": list(roles), "teams": list(teams), "content": content,
    }
    claims.update(extra or {})
    return jwt.encode(claims, key, algorithm=algorithm, headers={"kid": kid} if kid else None)


def generate_key_pair(directory: str | os.PathLike[str], *, kind: KeyKind = "ed25519", name: str = "admin") -> tuple[Path, Path]:
    """Write ``NAME.key`` (private, mode 0600) and ``NAME.pub`` (public) PEM files; return their paths."""
    private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    if kind == "ed25519":
        private = ed25519.Ed25519PrivateKey.generate()
    elif kind == "ec":
        private = ec.generate_private_key(ec.SECP256R1())
    else:
        private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    key_path, pub_path = out / f"{name}.key", out / f"{name}.pub"
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(pem)
    pub_path.write_bytes(private.public_key().public_bytes(serialization.Encoding.PEM,
                                                           serialization.PublicFormat.SubjectPublicKeyInfo))
    return key_path, pub_path


def jwk_of(public_pem: bytes, kid: str) -> dict[str, Any]:
    """A public key's JWK with ``kid`` (for writing a JWKS file)."""
    key = serialization.load_pem_public_key(public_pem)
    if isinstance(key, rsa.RSAPublicKey):
        jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key))
    elif isinstance(key, ec.EllipticCurvePublicKey):
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key))
    else:
        jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(key))  # type: ignore[arg-type]
    jwk["kid"] = kid
    jwk["use"] = "sig"
    return jwk
