"""The tap's common batch decoded and checked in one pass of msgspec (issue 29).

:func:`sidecar.ingest.wire.decode_body` checks the body's UTF-8 in a pass of its own, then
decodes it; :mod:`sidecar.ingest.screen` then checks the values in Python, exchange by
exchange. For the batch a gateway usually sends, :func:`decode_fast` does all of that in the
decoder, with the same schema made strict:

- **no unknown field anywhere.** msgspec validates the UTF-8 of every string it keeps (with
  Python's own decoder), a struct key it matches is one of its ASCII field names, and outside
  strings any byte that is not ASCII is malformed JSON. With no unknown field every string is
  kept, so a body the strict decoder takes is one :func:`~sidecar.ingest.wire.check_utf8`
  passes;
- **the gateway's figures within their bounds** (latency, cost, token counts), so none needs
  excluding;
- first, **messages and parameters of plain values** (a string, a number, a boolean, null):
  then nothing in the request can nest, and the screen checks only the token parameters'
  range and the tags (``Decoded.plain``). A batch with an object or an array inside a message
  or a parameter (tool calls, images) is decoded again with those values as they come, and
  screened exchange by exchange.

Whatever the strict decoders refuse — an unknown field, a figure out of range, invalid UTF-8,
a wrong type, NDJSON — :func:`decode_fast` returns None and the body takes the full path,
which names the error and its path, and excludes figures, as it always did. The structs are
subclasses of the schema's (:class:`~sidecar.ingest.wire.Exchange` and its parts), decoded
as their own type; the engine's pipe re-encodes them as the schema's.
"""

from __future__ import annotations

from typing import Annotated, cast

import msgspec

from sidecar.ingest.wire import (
    MAX_COST_USD,
    MAX_LATENCY_MS,
    MAX_TOKEN_FIGURE,
    Decoded,
    Exchange,
    ExchangeRequest,
    ExchangeResponse,
    Usage,
    item_path,
    ndjson_type,
    root_path,
)

#: A gateway's token count within its bound (never a bool: msgspec takes no bool for an int).
_Tokens = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKEN_FIGURE)] | None
#: A value that cannot nest.
_Plain = str | int | float | bool | None


class _Usage(Usage, forbid_unknown_fields=True, frozen=True, omit_defaults=True, gc=False):
    input_tokens: _Tokens = None
    output_tokens: _Tokens = None
    cost_usd: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_COST_USD)] | None = None
    prompt_tokens: _Tokens = None
    completion_tokens: _Tokens = None


class _Response(ExchangeResponse, forbid_unknown_fields=True, frozen=True, gc=False):
    usage: _Usage = _Usage()


class _Request(ExchangeRequest, forbid_unknown_fields=True, frozen=True, gc=False):
    pass


class _PlainRequest(ExchangeRequest, forbid_unknown_fields=True, frozen=True, gc=False):
    messages: list[dict[str, _Plain]]
    params: dict[str, _Plain] = {}


class _Exchange(Exchange, forbid_unknown_fields=True, frozen=True, gc=False):
    request: _Request
    response: _Response
    latency_ms: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_LATENCY_MS)] | None = None


class _PlainExchange(_Exchange, forbid_unknown_fields=True, frozen=True, gc=False):
    request: _PlainRequest  # type: ignore[assignment]  # a narrower request


_plain_one = msgspec.json.Decoder(_PlainExchange)
_plain_many = msgspec.json.Decoder(list[_PlainExchange])
_strict_one = msgspec.json.Decoder(_Exchange)
_strict_many = msgspec.json.Decoder(list[_Exchange])

#: Bytes JSON allows before a document (RFC 8259 whitespace).
_WHITESPACE = b" \t\n\r"
#: The end of the plain decoder's message for an object or an array where it wants a plain value.
_NOT_PLAIN = ("got `object`", "got `array`")


def decode_fast(body: bytes, content_type: str = "") -> Decoded | None:
    """``body`` decoded and checked by the strict decoders, or None: then
    :func:`~sidecar.ingest.wire.decode_body` decodes it (or names what is wrong)."""
    if ndjson_type(content_type):
        return None
    many = body.lstrip(_WHITESPACE)[:1] == b"["
    try:
        try:
            if many:
                return Decoded(cast("list[Exchange]", _plain_many.decode(body)), item_path, plain=True)
            return Decoded([_plain_one.decode(body)], root_path, plain=True)
        except msgspec.ValidationError as exc:
            if not str(exc).partition(" - at `")[0].endswith(_NOT_PLAIN):
                return None
        # An object or an array where the plain decoder wants a plain value: a request that
        # holds one, most likely (anywhere else, the strict decoder refuses it too).
        if many:
            return Decoded(cast("list[Exchange]", _strict_many.decode(body)), item_path)
        return Decoded([_strict_one.decode(body)], root_path)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None

