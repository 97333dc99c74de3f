"""A provider's usage report, read without trusting its types.

A readable answer must never be lost to its meter: an upstream that reports
``"prompt_tokens": 50.0``, ``1e30``, ``NaN``, ``-3`` or ``"lots"`` still
answered, and the answer is judged. What the report says is read here:

- a whole number from 0 to :data:`MAX_TOKEN_COUNT` is a count, whether the JSON
  wrote it ``50`` or ``50.0`` (JSON has one number type; some servers print
  every number as a float);
- anything else present — a fraction, a negative, a count beyond any context
  window, NaN or an infinity, a string, ``true``, an object, a ``usage`` that
  is not an object — is *disputed*: the count is dropped (None) and
  :attr:`Usage.disputed` set, so the spend ledger charges the call's worst
  case, never less, and the cost's coverage is not complete
  (:func:`policies.spend.charge_usage`);
- an absent field (or ``null``) is simply not reported: None, not disputed.
"""

from __future__ import annotations

import json
import math
from typing import Any, NamedTuple, TypeVar

import msgspec

#: Largest token count read from a provider (ten times the largest context window offered;
#: the tap's ``MAX_TOKEN_FIGURE`` for gateway usage is the same bound).
MAX_TOKEN_COUNT = 10**8

T = TypeVar("T")


class Usage(NamedTuple):
    """Token counts as far as they could be read; ``disputed`` when a present figure could not."""

    input_tokens: int | None
    output_tokens: int | None
    disputed: bool = False


def token_count(value: Any) -> tuple[int | None, bool]:
    """``(count, disputed)`` for one reported figure (see the module docstring)."""
    if value is None:
        return None, False
    if type(value) is int:
        return (value, False) if 0 <= value <= MAX_TOKEN_COUNT else (None, True)
    if type(value) is float and math.isfinite(value) and value.is_integer() and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value), False
    return None, True


def read_usage(usage: Any, input_key: str, output_key: str) -> Usage:
    """The counts under ``input_key``/``output_key`` of a decoded ``usage`` value (any JSON)."""
    if usage is None:
        return Usage(None, None)
    if not isinstance(usage, dict):
        return Usage(None, None, True)
    inputs, bad_in = token_count(usage.get(input_key))
    outputs, bad_out = token_count(usage.get(output_key))
    return Usage(inputs, outputs, bad_in or bad_out)


def decode_leniently(body: bytes, decoder: msgspec.json.Decoder[T]) -> T | None:
    """``body`` decoded by ``decoder``, else read again by Python's ``json`` (which takes the
    ``NaN``, ``Infinity`` and ``1e400`` a strict decoder refuses) and converted to the same
    type; None when neither reads it. The second reading runs only for bodies the first
    refused, so a well-formed answer costs one decode."""
    try:
        return decoder.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    try:
        loose = json.loads(body)
    except (ValueError, RecursionError):
        return None
    try:
        converted: T = msgspec.convert(loose, decoder.type)
    except (msgspec.ValidationError, RecursionError):
        return None
    return converted
