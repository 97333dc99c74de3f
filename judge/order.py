"""Presentation order and position-bias audit selection, from keyed hashes.

Which answer the judge sees first is drawn per case from a keyed BLAKE2b hash
of (trial id, case id): random with respect to the answers, yet reproducible
and auditable by anyone holding the key. Whether a case is re-judged in the
swapped order for the position-bias audit is drawn the same way, but with a
different BLAKE2b personalization, so the two draws are independent.

The key is configuration passed in by the caller (never read here). Changing
the key, or :data:`ORDER_SCHEME`, changes every draw; callers that store an
order should store it, not recompute it later.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal, TypeVar, get_args

from judge.errors import InvalidArgument, InvalidOrderKey

Order = Literal["incumbent_first", "candidate_first"]
ORDERS: tuple[Order, ...] = get_args(Order)

ORDER_SCHEME = "blake2b-keyed-v1"
DEFAULT_AUDIT_SHARE = 0.10

_ORDER_PERSON = b"shadowtrial:ord1"  # BLAKE2b personalization: at most 16 bytes
_AUDIT_PERSON = b"shadowtrial:aud1"
_TWO_64 = float(2**64)

T = TypeVar("T")


def _draw(person: bytes, key: bytes, trial_id: str, case_id: str) -> int:
    """A 64-bit draw from the keyed hash of the length-prefixed ids."""
    if not isinstance(key, (bytes, bytearray)) or not 1 <= len(key) <= hashlib.blake2b.MAX_KEY_SIZE:
        raise InvalidOrderKey("the order key must be 1 to 64 bytes")
    h = hashlib.blake2b(digest_size=8, key=bytes(key), person=person)
    for part in (trial_id, case_id):
        raw = part.encode("utf-8")
        # Length prefixes keep ("ab", "c") and ("a", "bc") apart.
        h.update(len(raw).to_bytes(8, "big"))
        h.update(raw)
    return int.from_bytes(h.digest(), "big")


def presentation_order(trial_id: str, case_id: str, *, key: bytes) -> Order:
    """Which answer is shown as "Assistant A" for this case.

    Deterministic in (key, trial id, case id); over many cases each order comes
    up half of the time. Raises :class:`InvalidOrderKey` for a bad key.
    """
    return "incumbent_first" if _draw(_ORDER_PERSON, key, trial_id, case_id) >> 63 == 0 else "candidate_first"


def audit_selected(trial_id: str, case_id: str, share: float = DEFAULT_AUDIT_SHARE, *, key: bytes) -> bool:
    """Whether this case is judged a second time, in the swapped order.

    True for a ``share`` of cases (0 → never, 1 → always), independently of
    :func:`presentation_order`. Raises :class:`InvalidArgument` when ``share``
    is not a number in [0, 1], :class:`InvalidOrderKey` for a bad key.
    """
    if not isinstance(share, (int, float)) or math.isnan(share) or not 0.0 <= share <= 1.0:
        raise InvalidArgument(f"audit share must be within [0, 1], got {share!r}")
    return _draw(_AUDIT_PERSON, key, trial_id, case_id) / _TWO_64 < share


def check_order(order: str) -> Order:
    """Return ``order`` if it is a known order; raise :class:`InvalidArgument` otherwise."""
    if order == "incumbent_first":
        return "incumbent_first"
    if order == "candidate_first":
        return "candidate_first"
    raise InvalidArgument(f"unknown order {order!r} (expected one of {ORDERS})")


def swapped(order: Order) -> Order:
    """The other order: what the position-bias audit judges a second time."""
    return "candidate_first" if check_order(order) == "incumbent_first" else "incumbent_first"


def arrange(order: Order, incumbent: T, candidate: T) -> tuple[T, T]:
    """Return ``(shown as A, shown as B)`` for ``order``."""
    if check_order(order) == "incumbent_first":
        return incumbent, candidate
    return candidate, incumbent
