"""Integers wider than msgpack carries, through the sidecar's msgpack codecs of exchanges.

JSON puts no bound on an integer, and the tap's decoder keeps one whole as Python's ``int``
(``"seed": 18446744073709551616`` in ``request.params``). msgpack carries ``-2**63`` to
``2**64 - 1`` only; msgspec's encoder raises ``OverflowError`` beyond. The engine's claim
pipe (:mod:`sidecar.engine.process`) and the intake journal (:mod:`sidecar.ingest.journal`)
write exchanges as msgpack, so they call :func:`encode` here: a wider integer is written as
an extension value (code :data:`WIDE_INT`, its two's-complement bytes, big-endian) and a
decoder built with :func:`ext_hook` reads back the same ``int``. The value reaches the
candidate as the gateway sent it: not refused, not rounded, never an exception.

Only the parts of an exchange typed ``Any`` can hold one (``request.messages`` and
``request.params``); the typed figures (usage) are bounded by the tap's screen
(:mod:`sidecar.ingest.screen`), and one that is not — it never reaches a codec through the
tap — is dropped to "not reported", as the screen would. The plain encoding is tried first;
the rewrite runs only when it overflows, so ordinary traffic pays nothing for it.
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec

from sidecar.ingest.wire import Exchange

#: The msgpack extension code of an integer outside msgpack's range.
WIDE_INT = 1

_LOW = -(2**63)
_HIGH = 2**64 - 1
_USAGE_INTS = ("input_tokens", "output_tokens", "prompt_tokens", "completion_tokens")


def encode(encode_plain: Callable[[Any], bytes], rows: list[Any], exchange_at: int) -> bytes:
    """``encode_plain(rows)``, or, if an integer in them is too wide for msgpack, the rows
    with their exchange (item ``exchange_at`` of each row, a tuple) rewritten by :func:`widen`."""
    try:
        return encode_plain(rows)
    except OverflowError:
        return encode_plain([_with_exchange(row, exchange_at) for row in rows])


def ext_hook(code: int, data: memoryview) -> Any:
    """For ``msgspec.msgpack.Decoder(..., ext_hook=ext_hook)``: a wide integer back as ``int``."""
    if code == WIDE_INT:
        return int.from_bytes(data, "big", signed=True)
    return msgspec.msgpack.Ext(code, bytes(data))


def widen(ex: Exchange) -> Exchange:
    """The exchange with every integer msgpack cannot carry replaced by a :data:`WIDE_INT` extension."""
    request = msgspec.structs.replace(
        ex.request, messages=_widened(ex.request.messages), params=_widened(ex.request.params)
    )
    usage = ex.response.usage
    wide = {name: None for name in _USAGE_INTS if not _fits(getattr(usage, name))}
    response = ex.response
    if wide:
        response = msgspec.structs.replace(response, usage=msgspec.structs.replace(usage, **wide))
    return msgspec.structs.replace(ex, request=request, response=response)


def _with_exchange(row: Any, at: int) -> Any:
    ex = row[at]
    if not isinstance(ex, Exchange):  # None, or msgpack already written (its wide integers widened)
        return row
    return (*row[:at], widen(ex), *row[at + 1 :])


def _fits(value: int | None) -> bool:
    return value is None or _LOW <= value <= _HIGH


def _widened(value: Any) -> Any:
    # Exactly the types the JSON decoder builds (bool is not rewritten: it is not ``int`` here).
    kind = type(value)
    if kind is int:
        if _LOW <= value <= _HIGH:
            return value
        return msgspec.msgpack.Ext(WIDE_INT, value.to_bytes((value.bit_length() + 8) // 8, "big", signed=True))
    if kind is dict:
        return {k: _widened(v) for k, v in value.items()}
    if kind is list:
        return [_widened(v) for v in value]
    return value
