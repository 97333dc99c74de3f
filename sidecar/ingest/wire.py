"""The tap's wire schema: an exchange the gateway already served.

Gateways are newer or older than the sidecar, so unknown fields are ignored
(msgspec's default) and every field added later gets a default. Decoders are
built once at import of this module (no I/O) and reused.

The exchange's structs are not tracked by the garbage collector (``gc=False``): they
hold decoded JSON (strings, numbers, lists and dicts of them), never a reference back to
themselves, so they can be in no reference cycle; untracked, a batch's decoding makes the
collector run less often and walk less (the typed decode costs about 15% less, issue 29).

This module checks the *shape* (types, required fields, a non-empty
``exchange_id``, nesting the decoder can follow); the values the engine relies
on are checked after decoding by :mod:`sidecar.ingest.screen`.
"""

from __future__ import annotations

import codecs
import re
from typing import Annotated, Any, Callable, NamedTuple

import msgspec

from sidecar.ingest import locate
from sidecar.ingest.wording import product_words


#: An exchange's tags: string names and values; their counts and lengths are checked by
#: :mod:`sidecar.ingest.screen` (:func:`policies.segments.check_tags`), naming ``tags``.
Tags = dict[str, str]


class Usage(msgspec.Struct, frozen=True, omit_defaults=True, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    #: Cost computed by the gateway, in US dollars, when it has one.
    cost_usd: float | None = None
    # OpenAI-style aliases some gateways send as-is.
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def inputs(self) -> int | None:
        return self.input_tokens if self.input_tokens is not None else self.prompt_tokens

    def outputs(self) -> int | None:
        return self.output_tokens if self.output_tokens is not None else self.completion_tokens


class ExchangeRequest(msgspec.Struct, frozen=True, gc=False):
    messages: list[dict[str, Any]]
    #: temperature, max_tokens, tools, tool_choice, top_p, stop, ... passed through.
    params: dict[str, Any] = {}


class ExchangeResponse(msgspec.Struct, frozen=True, gc=False):
    content: str | None = None
    finish_reason: str | None = None
    usage: Usage = Usage()


class Exchange(msgspec.Struct, frozen=True, gc=False):
    """One served exchange, as the gateway hands it over."""

    #: The gateway's request id: the identity of the case, so never empty.
    exchange_id: Annotated[str, msgspec.Meta(min_length=1)]
    team: str
    model: str
    request: ExchangeRequest
    response: ExchangeResponse
    gateway: str = ""
    route: str | None = None
    served_at: str | None = None
    latency_ms: float | None = None
    redacted: bool = False
    #: The W3C ``traceparent`` of the gateway's request, when the gateway traces it: the
    #: case's trace joins the gateway's (docs/telemetry.md). Only its ids are ever used; a
    #: value that is not a valid ``traceparent`` is ignored, never refused.
    traceparent: str | None = None
    #: Gateway-supplied tags (``{"tier": "reasoning"}``), read by a trial's ``tag:NAME``
    #: segments (issue 27). Metadata, never content: at most ``MAX_TAGS`` of them, names 1 to
    #: ``MAX_TAG_KEY_CHARS`` characters, values at most ``MAX_TAG_VALUE_CHARS``; more is refused
    #: with the batch (400, naming the field), never truncated silently.
    tags: Tags = {}


class TapReply(msgspec.Struct, frozen=True, omit_defaults=True):
    accepted: int
    sampled: int
    shed: int
    #: Exchanges for a team the gateway's credential does not cover (absent when none).
    refused: int = 0


class DecodeError(ValueError):
    """The body is not an exchange, an array of exchanges, or NDJSON of them.

    ``path`` is msgspec's JSON path of the first bad field (``$[3].request``),
    prefixed with the line number for NDJSON.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


_one = msgspec.json.Decoder(Exchange)
_many = msgspec.json.Decoder(list[Exchange])

#: The bounds of the gateway's figures (:mod:`sidecar.ingest.screen` excludes what is outside,
#: :mod:`sidecar.ingest.fast_decode` decodes within): a token count (ten times the largest
#: context window offered), the cost of one exchange in US dollars, the served latency in
#: milliseconds (a day).
MAX_TOKEN_FIGURE = 10**8
MAX_COST_USD = 10_000.0
MAX_LATENCY_MS = 86_400_000.0

_PATH_MARK = " - at `"


_NAMED_FIELD = re.compile(r"(?:missing required|unknown) field `([^`]+)`")
_BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def split_path(message: str) -> tuple[str, str | None]:
    """A msgspec validation message → (message without the path, in the product's words
    (:mod:`sidecar.ingest.wording`), JSON path of the bad field).

    msgspec puts the path after the message (``Expected `str`, got `int` - at `$.team```)
    but reports a missing or unknown field at its *parent* object, and leaves the path out
    altogether at the root; the path returned always ends at the field itself
    (``$[1].response``).
    """
    head, path = message, None
    if _PATH_MARK in message:
        head, _, tail = message.partition(_PATH_MARK)
        path = tail.rstrip("`")
    named = _NAMED_FIELD.search(head)
    if named:
        name = named.group(1)
        path = (path or "$") + (f".{name}" if _BARE_NAME.fullmatch(name) else f"[{_reply_encoder.encode(name).decode()}]")
    return product_words(head, path), path


def _first_line_is_json(body: bytes) -> bool:
    first = next((line for line in body.splitlines() if line.strip()), b"")
    try:
        msgspec.json.decode(first)
    except msgspec.DecodeError:
        return False
    return True


def decode_exchanges(body: bytes, content_type: str = "") -> list[Exchange]:
    """The exchanges of :func:`decode_batch`, without their paths."""
    return [ex for _, ex in decode_batch(body, content_type)]


def decode_batch(body: bytes, content_type: str = "") -> list[tuple[str, Exchange]]:
    """Decode one exchange, a JSON array, or NDJSON (one exchange per line).

    Returns each exchange with the JSON path of where it sits in the body
    (``$``, ``$[3]``, ``line 4: $``), for errors found after decoding.
    NDJSON is recognised by its content type (``application/x-ndjson``) or,
    failing that, by a body that is neither an object nor an array as a whole.
    Raises :class:`DecodeError` naming the first bad field; a body nested deeper
    than the decoder follows (Python's recursion limit, about a thousand levels),
    or with invalid UTF-8 (:func:`check_utf8`), even inside a field that would be
    ignored, is a :class:`DecodeError` too.
    """
    decoded = decode_body(body, content_type)
    return [(decoded.where(i), ex) for i, ex in enumerate(decoded.exchanges)]


class Decoded(NamedTuple):
    """A decoded batch: its exchanges, and ``where(i)``, the JSON path of the ``i``-th in the
    body (``$``, ``$[3]``, ``line 4: $``), computed only when an error needs it.

    ``plain``: the decoder found every gateway figure within its bound, and no object or array
    in any message or parameter (:mod:`sidecar.ingest.fast_decode`), so
    :mod:`sidecar.ingest.screen` checks only what is left."""

    exchanges: list[Exchange]
    where: Callable[[int], str]
    plain: bool = False


def decode_body(body: bytes, content_type: str = "") -> Decoded:
    """:func:`decode_batch` without building every exchange's path (the tap's hot path, after
    :func:`sidecar.ingest.fast_decode.decode_fast`)."""
    try:
        check_utf8(body, content_type)
        return _decode_batch(body, content_type)
    except RecursionError:
        raise DecodeError(_TOO_DEEP, "$") from None


def root_path(_i: int) -> str:
    return "$"


def item_path(i: int) -> str:
    return f"$[{i}]"


_TOO_DEEP = "JSON nested too deeply to decode"


def check_utf8(body: bytes, content_type: str = "") -> None:
    """Raise :class:`DecodeError` naming where, when ``body`` is not UTF-8 (RFC 8259 section 8.1).

    msgspec checks the strings it keeps only: invalid UTF-8 in an ignored field, or in the
    key of a known one (a corrupted ``params`` key reads as an unknown field, and the
    parameters would silently be dropped), would otherwise pass. The path is that of the
    key or the value holding the first bad byte, its line's for NDJSON."""
    if body.isascii() or _valid_utf8(body):
        return
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.start
    else:
        return
    where, data, at = "", body, bad
    if _looks_ndjson(body, content_type):
        start = 0
        for lineno, line in enumerate(body.splitlines(keepends=True), start=1):
            if start + len(line) > bad:
                where, data, at = f"line {lineno}: ", line, bad - start
                break
            start += len(line)
    spot = locate.spot(data, at)
    what = " in an object key" if spot.in_key else ""
    raise DecodeError(f"{where}invalid UTF-8{what} (byte {bad})", f"{where}{spot.path}")


#: Bytes validated per piece by :func:`_valid_utf8`: small enough that the decoded piece stays
#: in the CPU's cache (decoding a whole 120 KB batch at once costs about three times as much).
_UTF8_PIECE = 16 * 1024
_utf8_decode = codecs.utf_8_decode


def _valid_utf8(body: bytes) -> bool:
    """Whether ``body`` is UTF-8, checked piece by piece, each piece ending before an ASCII
    byte (``"``): a multi-byte sequence never contains one, so the body is valid iff every
    piece is."""
    view = memoryview(body)
    size = len(body)
    start = 0
    try:
        while start < size:
            end = body.find(b'"', start + _UTF8_PIECE)
            if end < 0:
                end = size
            _utf8_decode(view[start:end], "strict", True)
            start = end
    except UnicodeDecodeError:
        return False
    finally:
        view.release()
    return True


def ndjson_type(content_type: str) -> bool:
    """Whether the content type names NDJSON (``application/x-ndjson``, ``application/jsonl``)."""
    return "ndjson" in content_type or "jsonl" in content_type


def _looks_ndjson(body: bytes, content_type: str) -> bool:
    """Whether :func:`decode_batch` reads ``body`` line by line (its bad bytes aside)."""
    if ndjson_type(content_type):
        return True
    stripped = body.strip()
    try:
        return b"\n" in stripped and _first_line_is_json(stripped.decode("utf-8", "replace").encode())
    except RecursionError:  # a first line nested past the decoder: not one it reads line by line
        return False


def where_decode_failed(exc: msgspec.DecodeError, data: bytes) -> tuple[str, str | None]:
    """(Also for the admin API's bodies, :mod:`sidecar.trials.create`.) A msgspec error's message and the path of the bad field, found in ``data`` when msgspec
    gives only a byte (a malformed document) or leaves an object key out (``params[...]``)."""
    message, path = split_path(str(exc))
    if path is None:
        at = locate.byte_of(message)
        if at is None:  # half a surrogate pair in an ignored field reads "Input data was truncated"
            at = locate.lone_surrogate(data)
            if at is not None:
                message = f"JSON is malformed: an unpaired UTF-16 surrogate escape (byte {at})"
        if at is not None:
            path = locate.spot(data, at).path
    elif "[...]" in path and "out of range" in message:
        path = locate.unreadable_number(data, path) or path
    return message, path


def _decode_batch(body: bytes, content_type: str) -> Decoded:
    stripped = body.lstrip()
    if not stripped:
        raise DecodeError("empty body", None)
    ndjson = ndjson_type(content_type)
    if not ndjson:
        try:
            if stripped[:1] == b"[":
                return Decoded(_many.decode(body), item_path)
            return Decoded([_one.decode(body)], root_path)
        except msgspec.ValidationError as exc:
            # NDJSON without the header whose *first* line is invalid fails here before the
            # decoder reaches the second document; read it line by line so the error names
            # the line. A pretty-printed single object does not parse line by line.
            if stripped[:1] == b"[" or b"\n" not in stripped.rstrip() or not _first_line_is_json(stripped):
                msg, path = where_decode_failed(exc, body)
                raise DecodeError(msg, path) from exc
        except msgspec.DecodeError as exc:
            if b"\n" not in stripped.rstrip():
                raise DecodeError(*where_decode_failed(exc, body)) from exc
            # Several JSON documents on several lines: NDJSON without the header.
    out: list[Exchange] = []
    paths: list[str] = []
    for lineno, line in enumerate(body.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {lineno}: "
        try:
            out.append(_one.decode(line))
            paths.append(f"{where}$")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            msg, path = where_decode_failed(exc, line)
            raise DecodeError(f"{where}{msg}", f"{where}{path or '$'}") from exc
        except RecursionError:
            raise DecodeError(f"{where}{_TOO_DEEP}", f"{where}$") from None
    if not out:
        raise DecodeError("empty body", None)
    return Decoded(out, paths.__getitem__)


_reply_encoder = msgspec.json.Encoder()


def encode(obj: Any) -> bytes:
    return _reply_encoder.encode(obj)
