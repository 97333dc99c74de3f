"""The webhook's signature: HMAC-SHA256 of a shared secret over ``<timestamp>.<body>``.

Headers: ``X-Shadowtrial-Timestamp`` (Unix seconds, an integer) and
``X-Shadowtrial-Signature: v1=<hex digest>``. A receiver recomputes the digest over the
timestamp header, a dot and the raw body, compares in constant time, and refuses a
timestamp further than its tolerance from its own clock (a replayed old request).
Pure: the caller passes the time.
"""

from __future__ import annotations

import hashlib
import hmac

SIGNATURE_HEADER = "X-Shadowtrial-Signature"
TIMESTAMP_HEADER = "X-Shadowtrial-Timestamp"
#: A receiver's default tolerance for the timestamp, seconds either way.
TOLERANCE_S = 300


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Shadowtrial-Signature`` value of ``body`` sent at ``timestamp``."""
    digest = hmac.new(secret, timestamp.encode("ascii") + b"." + body, hashlib.sha256).hexdigest()
    return f"v1={digest}"


def verify(secret: bytes, timestamp: str, body: bytes, sent: str, *, now: float, tolerance_s: float = TOLERANCE_S) -> bool:
    """Whether a received request is authentic and fresh (the receiver's check)."""
    try:
        at = int(timestamp)
    except ValueError:
        return False
    if abs(now - at) > tolerance_s:
        return False
    return hmac.compare_digest(signature(secret, timestamp, body), sent)
