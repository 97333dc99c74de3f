"""The codec of the pipe between the tap's process and the engine's process.

Both ends import it (:mod:`sidecar.engine.process` writes, :mod:`sidecar.engine.child`
reads), so neither imports the other.
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from sidecar.ingest import wide_ints
from sidecar.ingest.claims import Claim
from sidecar.ingest.wire import Exchange

ENCODER = msgspec.msgpack.Encoder()
DECODER = msgspec.msgpack.Decoder(list[tuple[int, str, Exchange, bool]], ext_hook=wide_ints.ext_hook)
#: The forwarder's last message: everything queued has been sent.
END = b""


def encode_claims(claims: Sequence[Claim]) -> bytes:
    """The claims as one pipe message. An integer wider than msgpack's 64 bits (JSON has no
    bound; ``"seed": 2**64`` is valid) travels as an extension value (:mod:`sidecar.ingest.wide_ints`).
    A packed exchange (:class:`~sidecar.ingest.claims.Packed`) goes as its bytes, not encoded again."""
    return wide_ints.encode(ENCODER.encode, [(c.seq, c.trial_id, c.wire(), c.content_kept) for c in claims], 2)


def decode_claims(data: bytes) -> list[Claim]:
    return [Claim(t, ex, seq, kept) for seq, t, ex, kept in DECODER.decode(data)]
