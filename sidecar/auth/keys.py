"""The key set: public keys (and HMAC secrets) the admin API verifies tokens with.

Sources are PEM files (``[[auth.keys]]``: a public key or certificate, or an HMAC secret,
with its accepted algorithms and optional ``kid``) and a JWKS file (``auth.jwks``, several
``kid``s, accepted algorithms pinned by ``auth.jwks_algorithms``). A key's algorithms are
always the configured ones narrowed to its own family (:mod:`sidecar.auth.algorithms`);
never anything the token says.

Reload without restart: :meth:`KeySet.candidates` stats the files at most once per
``check_interval_s`` (1 s) and re-reads a source whose file changed (mtime, size or
inode); :meth:`KeySet.reload` re-reads every source (SIGHUP). At start-up a bad source is
a :class:`KeyLoadError`; afterwards a source that fails to load keeps its last good keys
and a WARNING says so (a half-written file must not lock every operator out), so remove a
key by writing a file without it, not by breaking the file.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

# PyJWT and cryptography's key types are imported where a key is loaded or checked, not with this
# module: a sidecar without authentication (and the CLI) starts without them.

from sidecar.auth.algorithms import EC_BY_CURVE, EDDSA, HMAC, RSA
from sidecar.auth.errors import KeyLoadError

log = logging.getLogger("shadowtrial.auth")

#: An HMAC secret shorter than its hash is refused (RFC 7518 3.2), as is an RSA key under 2048 bits.
MIN_SECRET_BYTES = {"HS256": 32, "HS384": 48, "HS512": 64}
MIN_RSA_BITS = 2048


def check_strength(key: Any, algorithms: Sequence[str], where: str) -> None:
    """Refuse a key too weak for its algorithms (PyJWT would otherwise warn on every token)."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    if isinstance(key, bytes):
        need = max((MIN_SECRET_BYTES.get(a, 0) for a in algorithms), default=0)
        if len(key) < need:
            raise KeyLoadError(f"{where}: an HMAC secret for {', '.join(algorithms)} must be at least {need} bytes")
    elif isinstance(key, rsa.RSAPublicKey) and key.key_size < MIN_RSA_BITS:
        raise KeyLoadError(f"{where}: an RSA key must have at least {MIN_RSA_BITS} bits, not {key.key_size}")


@dataclass(frozen=True, slots=True)
class VerificationKey:
    """One key: ``key`` is a cryptography public key or the secret's bytes; ``algorithms``
    the pinned ones of its family; ``kid`` None for a key matched only by tokens without one."""

    kid: str | None
    algorithms: tuple[str, ...]
    key: Any
    accepts_no_kid: bool
    source: str

    def __repr__(self) -> str:  # never the key's bytes
        return f"VerificationKey(kid={self.kid!r}, algorithms={self.algorithms!r}, source={self.source!r})"


def family(key: Any) -> frozenset[str]:
    """The algorithms a key of this type can verify at all."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, bytes):
        return HMAC
    if isinstance(key, rsa.RSAPublicKey):
        return RSA
    if isinstance(key, ec.EllipticCurvePublicKey):
        return EC_BY_CURVE.get(key.curve.name, frozenset())
    if isinstance(key, (ed25519.Ed25519PublicKey, ed448.Ed448PublicKey)):
        return EDDSA
    return frozenset()


@dataclass(frozen=True, slots=True)
class PemSource:
    """``[[auth.keys]]``: one file, one key."""

    path: str
    algorithms: tuple[str, ...]
    kid: str = ""
    allow_no_kid: bool = False
    setting: str = "auth.keys"

    def load(self) -> list[VerificationKey]:
        from cryptography import x509
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization

        data = _read(self.path, self.setting)
        where = f"{self.setting}.path {self.path!r}"
        if b"-----BEGIN" in data:
            if b"PRIVATE KEY" in data:
                raise KeyLoadError(f"{where} holds a private key; configure its public key "
                                   "(openssl pkey -in PRIVATE.pem -pubout -out PUBLIC.pem)")
            try:
                if b"CERTIFICATE" in data:
                    key: Any = x509.load_pem_x509_certificate(data).public_key()
                else:
                    key = serialization.load_pem_public_key(data)
            except (ValueError, UnsupportedAlgorithm) as exc:
                raise KeyLoadError(f"{where} is not a PEM public key or certificate") from exc
        else:
            key = data.strip()
        fits = family(key)
        wrong = [a for a in self.algorithms if a not in fits]
        if wrong or not fits:
            kind = "an HMAC secret" if isinstance(key, bytes) else f"a {type(key).__name__.lstrip('_')}"
            raise KeyLoadError(f"{self.setting}.algorithms: {', '.join(wrong) or 'none'} cannot be verified with "
                               f"{kind} ({where}); it accepts {', '.join(sorted(fits)) or 'nothing'}")
        check_strength(key, self.algorithms, where)
        return [VerificationKey(self.kid or None, self.algorithms, key, self.allow_no_kid, self.setting)]


@dataclass(frozen=True, slots=True)
class JwksSource:
    """``auth.jwks``: a JSON Web Key Set file; every signing key needs a unique ``kid``. A key
    that accepts none of ``algorithms`` (its family, narrowed by its own ``alg``) is skipped
    with a WARNING."""

    path: str
    algorithms: tuple[str, ...]
    setting: str = "auth.jwks"

    def load(self) -> list[VerificationKey]:
        import jwt
        from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

        where = f"{self.setting} {self.path!r}"
        try:
            document = json.loads(_read(self.path, self.setting))
            entries = document["keys"]
            if not isinstance(entries, list):
                raise TypeError("keys is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise KeyLoadError(f"{where} is not a JWKS document ({{\"keys\": [...]}})") from exc
        keys: list[VerificationKey] = []
        seen: set[str] = set()
        for i, entry in enumerate(entries):
            kid = entry.get("kid") if isinstance(entry, dict) else None
            if not isinstance(kid, str) or not kid:
                raise KeyLoadError(f"{where}: keys[{i}] has no kid")
            if kid in seen:
                raise KeyLoadError(f"{where}: kid {kid!r} appears twice")
            seen.add(kid)
            if entry.get("use", "sig") != "sig":
                continue
            try:
                key = jwt.PyJWK(entry).key
            except jwt.PyJWTError as exc:
                raise KeyLoadError(f"{where}: kid {kid!r} is not a usable key ({type(exc).__name__})") from exc
            if isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey,
                                ed448.Ed448PrivateKey)):
                raise KeyLoadError(f"{where}: kid {kid!r} is a private key; publish public keys only")
            fits = family(key)
            if isinstance(entry.get("alg"), str):
                fits &= {entry["alg"]}
            algorithms = tuple(a for a in self.algorithms if a in fits)
            if not algorithms:
                log.warning("%s: kid %r accepts none of auth.jwks_algorithms (%s); skipped",
                            where, kid, ", ".join(self.algorithms))
                continue
            check_strength(key, algorithms, f"{where}: kid {kid!r}")
            keys.append(VerificationKey(kid, algorithms, key, False, f"{self.setting} kid {kid!r}"))
        return keys


Source = PemSource | JwksSource


def _read(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise KeyLoadError(f"{setting} {path!r} cannot be read: {exc.strerror or exc}") from exc


def _stamp(path: str) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


class KeySet:
    """The keys of every source, reloaded when a file changes (checked at most once per
    ``check_interval_s``, on use) or on :meth:`reload`. Construction loads every source and
    raises :class:`KeyLoadError` on the first bad one. Not thread-safe: used from the event
    loop (a reload reads small files synchronously)."""

    def __init__(
        self, sources: Sequence[Source], *, check_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.sources = tuple(sources)
        self.check_interval_s = check_interval_s
        self._clock = clock
        self._keys: dict[Source, list[VerificationKey]] = {}
        self._stamps: dict[Source, tuple[int, int, int] | None] = {}
        for source in self.sources:
            self._stamps[source] = _stamp(source.path)
            self._keys[source] = source.load()
        self._checked = clock()

    def reload(self) -> bool:
        """Re-read every source; False if one failed (it keeps its last good keys)."""
        ok = True
        for source in self.sources:
            ok = self._load(source) and ok
        self._checked = self._clock()
        log.info("admin keys reloaded: %d key(s)", len(self.keys()))
        return ok

    def _load(self, source: Source) -> bool:
        stamp = _stamp(source.path)
        try:
            keys = source.load()
        except KeyLoadError as exc:
            log.warning("%s; keeping its previous keys", exc)
            return False
        self._keys[source], self._stamps[source] = keys, stamp
        return True

    def refresh(self) -> None:
        """Re-read the sources whose file changed, if ``check_interval_s`` has passed."""
        now = self._clock()
        if now - self._checked < self.check_interval_s:
            return
        self._checked = now
        for source in self.sources:
            if _stamp(source.path) != self._stamps[source]:
                if self._load(source):
                    log.info("%s %r changed: reloaded", source.setting, source.path)

    def keys(self) -> list[VerificationKey]:
        return [k for keys in self._keys.values() for k in keys]

    def candidates(self, kid: str | None) -> list[VerificationKey]:
        """The keys a token naming ``kid`` (None: naming none) may be verified with."""
        self.refresh()
        if kid is None:
            return [k for k in self.keys() if k.accepts_no_kid]
        return [k for k in self.keys() if k.kid == kid]
