"""Deterministic sampling: is this exchange in this trial's sample?

The decision is a pure function of (trial id, exchange id, rate), so the
sidecar, a gateway plugin deciding whether to send a body at all, and an
auditor re-checking a trial afterwards all agree without talking to each
other. This module imports nothing but the standard library so that a plugin
can copy it as it is.

The algorithm, stable across versions (changing it would change every trial's
sample; a new algorithm gets a new personalisation string):

1. Encode each id as UTF-8 and prefix it with its byte length as an 8-byte
   big-endian unsigned integer. Concatenate trial id then exchange id. The
   length prefixes make the encoding injective: ``("ab", "c")`` and
   ``("a", "bc")`` hash differently, whatever characters the ids contain.
2. Hash with BLAKE2b, 8-byte digest, key ``b"shadowtrial"``, personalisation
   ``b"st-sample-v1"``. The key is not a secret; it only separates this hash
   from any other use of BLAKE2b over the same ids.
3. Read the digest as a big-endian unsigned 64-bit integer and keep its top
   53 bits ``n``; the sample point is ``n / 2**53``, exactly representable and
   always in ``[0, 1)``.
4. An exchange is sampled at rate ``r`` iff its point is ``< r``. Rate 0 never
   samples, rate 1 always does, and a case sampled at some rate is sampled at
   every higher rate (raising a trial's rate only adds cases).

Known answer: ``sample_point("trial-1", "exchange-1")`` is
``0.16599654055679747``.
"""

from __future__ import annotations

import hashlib
import math
from typing import Callable

__all__ = ["HASH_KEY", "HASH_PERSON", "is_sampled", "sample_point", "sampler"]

HASH_KEY = b"shadowtrial"
HASH_PERSON = b"st-sample-v1"
_MANTISSA_BITS = 53


def _length_prefixed(value: str) -> bytes:
    data = value.encode("utf-8")
    return len(data).to_bytes(8, "big") + data


def sample_point(trial_id: str, exchange_id: str) -> float:
    """The exchange's position in ``[0, 1)`` for this trial (see the module docstring)."""
    if not isinstance(trial_id, str) or not isinstance(exchange_id, str):
        raise TypeError("trial_id and exchange_id must be str")
    digest = hashlib.blake2b(
        _length_prefixed(trial_id) + _length_prefixed(exchange_id),
        digest_size=8,
        key=HASH_KEY,
        person=HASH_PERSON,
    ).digest()
    top = int.from_bytes(digest, "big") >> (64 - _MANTISSA_BITS)
    return top / (1 << _MANTISSA_BITS)


def is_sampled(trial_id: str, exchange_id: str, rate: float) -> bool:
    """True iff the exchange falls in the trial's sample at ``rate`` (0 ≤ rate ≤ 1).

    Raises ``ValueError`` for a rate outside ``[0, 1]`` or NaN, ``TypeError`` for
    a non-number (``bool`` included: ``True`` is not a rate).
    """
    _check_rate(rate)
    return sample_point(trial_id, exchange_id) < rate


def sampler(trial_id: str, rate: float) -> Callable[[str], bool]:
    """``is_sampled(trial_id, ·, rate)`` as a function of the exchange id, for deciding many
    exchanges of one trial: the same answers, at a fraction of the cost.

    Rate 0 and rate 1 decide without hashing (every point is in ``[0, 1)``); between them,
    the keyed hash state after the trial id is computed once and copied per exchange, and
    the top 53 bits are compared with ``rate * 2**53`` (exact: a power of two scales a float
    exactly, and Python compares an int with a float exactly). Raises as :func:`is_sampled`."""
    _check_rate(rate)
    if rate == 0.0:
        return _never
    if rate == 1.0:
        return _always
    copy = hashlib.blake2b(_length_prefixed(trial_id), digest_size=8, key=HASH_KEY, person=HASH_PERSON).copy
    # top < rate * 2**53 (top the digest's top 53 bits, an integer) iff top < ceil(rate * 2**53)
    # iff digest < ceil(rate * 2**53) << 11 as 64-bit integers, which for two 8-byte big-endian
    # strings is their order as bytes: no integer is built per exchange (issue 29). For a rate
    # below 1 the bound is below 2**64 (the largest float below 1 gives 2**53 - 1).
    bound = (math.ceil(rate * float(1 << _MANTISSA_BITS)) << (64 - _MANTISSA_BITS)).to_bytes(8, "big")
    prefixes = _LENGTH_PREFIXES

    def sampled(exchange_id: str) -> bool:
        data = exchange_id.encode("utf-8")
        h = copy()
        size = len(data)
        h.update((prefixes[size] if size < _SHORT else size.to_bytes(8, "big")) + data)
        return h.digest() < bound

    return sampled


#: The 8-byte length prefixes of ids shorter than ``_SHORT`` bytes, built once.
_SHORT = 256
_LENGTH_PREFIXES = tuple(n.to_bytes(8, "big") for n in range(_SHORT))


def _never(_exchange_id: str) -> bool:
    return False


def _always(_exchange_id: str) -> bool:
    return True


def _check_rate(rate: float) -> None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)):
        raise TypeError(f"rate must be a number, got {type(rate).__name__}")
    if math.isnan(rate) or not 0.0 <= rate <= 1.0:
        raise ValueError(f"rate must be between 0 and 1, got {rate!r}")
