"""Sealing retained exchanges: AES-256-GCM with a key from the environment.

Each exchange is sealed on its own with a fresh 96-bit random nonce, and the team and
exchange id as associated data, so a sealed body moved to another row fails to open
instead of being read as that row's. The key is ``retention.key_env``'s value, read once
by :func:`sidecar.config.load_config`; the store only ever holds ``nonce || ciphertext``.
The bodies a retention-on trial keeps with each judged case are sealed the same way
(:func:`seal_case_bodies`), under the team and the case id.
"""

from __future__ import annotations

import base64
import os

# cryptography is imported by the first Sealer (a retention key configured), not with the module:
# a sidecar and its engine's process without one start without it.

NONCE_BYTES = 12
#: The first byte of every sealed body: the sealing scheme, so a later one can be told apart.
SCHEME = b"\x01"


class UnsealError(Exception):
    """A sealed body that does not open with this key (another key, or tampered with)."""


class Sealer:
    """Seals and opens exchange bodies with one AES-256-GCM key. Thread-safe (no state)."""

    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise ValueError("the retention key must be 32 bytes (AES-256)")
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aead = AESGCM(key)

    def seal(self, plaintext: bytes, *, team: str, exchange_id: str) -> bytes:
        nonce = os.urandom(NONCE_BYTES)
        return SCHEME + nonce + self._aead.encrypt(nonce, plaintext, _aad(team, exchange_id))

    def open(self, sealed: bytes, *, team: str, exchange_id: str) -> bytes:
        if sealed[:1] != SCHEME or len(sealed) < 1 + NONCE_BYTES + 16:
            raise UnsealError("not a sealed exchange of this scheme")
        nonce, body = sealed[1 : 1 + NONCE_BYTES], sealed[1 + NONCE_BYTES :]
        from cryptography.exceptions import InvalidTag

        try:
            return self._aead.decrypt(nonce, body, _aad(team, exchange_id))
        except InvalidTag:
            raise UnsealError("the sealed exchange does not open with this key") from None


def _aad(team: str, exchange_id: str) -> bytes:
    return team.encode() + b"\x1f" + exchange_id.encode()


#: How a case's kept bodies (``cases.bodies_json``, a text column) start when sealed.
SEALED_PREFIX = "sealed:"


def seal_case_bodies(sealer: Sealer, text: str, *, team: str, case_id: str) -> str:
    """A case's kept bodies (their JSON text), sealed under the team and the case id, as text."""
    sealed = sealer.seal(text.encode(), team=team, exchange_id=f"case:{case_id}")
    return SEALED_PREFIX + base64.b64encode(sealed).decode()


def open_case_bodies(sealer: Sealer, stored: str, *, team: str, case_id: str) -> str:
    """The JSON text :func:`seal_case_bodies` sealed. Raises :class:`UnsealError`."""
    if not stored.startswith(SEALED_PREFIX):
        raise UnsealError("not a sealed case body")
    raw = base64.b64decode(stored[len(SEALED_PREFIX):])
    return sealer.open(raw, team=team, exchange_id=f"case:{case_id}").decode()
