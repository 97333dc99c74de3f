"""Where in a JSON body a byte sits: the path of its field, for the refusals the decoder
gives without one.

msgspec names the field of a validation error but not where a document is malformed
(``invalid character (byte 118)``), reports a number it cannot hold inside an object as
``$.request.params[...]``, and checks the UTF-8 of what it keeps only, so invalid UTF-8 in
an ignored field, or in the key of one, passes unseen. The tap refuses all of these with
``400`` and a path (:mod:`sidecar.ingest.wire`); this module finds it. It runs on the
refusal path only, never on an accepted body, and its cost is bounded by the members of
the containers that hold the byte: every sibling before it is skipped by the standard
library's C scanner, never read token by token in Python (a 4 MiB batch is refused in
milliseconds, whatever byte is bad).

Paths read as msgspec's do: ``$.request.messages[0].content``, ``$["odd key"]``; a key
that is itself not valid UTF-8 is shown with its bad bytes escaped (``$["se\\xffed"]``).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any, NamedTuple

import msgspec

_WS = re.compile(r"[ \t\n\r]*")
#: The deepest path followed (the tap refuses nesting past 64 levels anyway).
MAX_DEPTH = 72
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BYTE = re.compile(r"\(byte (\d+)\)")
#: A ``\u`` escape of a UTF-16 surrogate (its literal prefix keeps the search fast).
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: Numbers msgspec may not hold: an exponent of three digits or more (beyond a double's
#: range when large), or an integer of more digits than Python reads.
_MAX_DIGITS = sys.get_int_max_str_digits() or 4300
_BIG_EXPONENT = re.compile(rb"[eE]\+?[0-9]{3,}")
_LONG_INT = re.compile(rb"[0-9]{%d}" % (_MAX_DIGITS + 1))
_NUMBER_CHARS = frozenset(b"0123456789.-+eE")


def _nothing(*_: Any) -> None:
    return None


#: Skips a value: lenient (NaN, Infinity, any digits), and building as little as it can.
_SKIPPER = json.JSONDecoder(
    parse_int=_nothing, parse_float=_nothing, parse_constant=_nothing, object_pairs_hook=_nothing, strict=False
)
_scanstring: Any = json.decoder.scanstring  # type: ignore[attr-defined]


class Spot(NamedTuple):
    """Where a byte sits: the JSON path, and whether the byte is in an object key."""

    path: str
    in_key: bool


def spot(data: bytes, offset: int) -> Spot:
    """The path of the value (or the key) that byte ``offset`` of one JSON document belongs to.

    Best effort on a document that is broken: the path of the deepest container read."""
    # Invalid bytes become lone surrogates (one character each): offsets stay comparable.
    text = data.decode("utf-8", "surrogateescape")
    at = len(data[:offset].decode("utf-8", "surrogateescape"))
    path = ["$"]
    pos = _WS.match(text, 0).end()  # type: ignore[union-attr]
    while pos < len(text) and pos <= at and text[pos] in "{[" and len(path) <= MAX_DEPTH:
        inner = _member_holding(text, pos, at, path)
        if isinstance(inner, Spot):
            return inner
        if inner is None:
            break
        pos = inner
    return Spot("".join(path), False)


def _member_holding(text: str, pos: int, at: int, path: list[str]) -> int | Spot | None:
    """In the object or array starting at ``pos``: the start of the member value that holds
    ``at`` (its key or index appended to ``path``), a :class:`Spot` when ``at`` is in a key,
    or None when ``at`` is in the container's own punctuation or past a break."""
    is_object = text[pos] == "{"
    index = 0
    pos = _skip_ws(text, pos + 1)
    while pos < len(text) and pos <= at and text[pos] not in "}]":
        if is_object:
            if text[pos] != '"':
                return None
            try:
                key, end = _scanstring(text, pos + 1, False)
            except ValueError:  # unterminated, or a broken escape: the key holds the byte, or nothing does
                return Spot("".join(path) + _key(text[pos + 1 : at + 1]), True)
            if at < end:
                return Spot("".join(path) + _key(key), True)
            pos = _skip_ws(text, end)
            if pos >= len(text) or text[pos] != ":":
                return None
            pos = _skip_ws(text, pos + 1)
            step = _key(key)
        else:
            step = f"[{index}]"
        if at < pos:
            return None
        try:
            _, end = _SKIPPER.raw_decode(text, pos)
        except (ValueError, RecursionError):
            end = len(text) + 1  # a broken value (or one nested too deep to skip): it may hold the byte
        if at < end:
            path.append(step)
            return pos if text[pos] in "{[" else Spot("".join(path), False)
        pos = _skip_ws(text, end)
        if pos < len(text) and text[pos] == ",":
            pos = _skip_ws(text, pos + 1)
        index += 1
    return None


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]


def byte_of(message: str) -> int | None:
    """The byte offset a msgspec ``DecodeError`` message names (``... (byte 12)``), if any."""
    m = _BYTE.search(message)
    return int(m.group(1)) if m else None


def lone_surrogate(data: bytes) -> int | None:
    """The offset of the first ``\\u`` escape of half a UTF-16 surrogate pair (``"\\ud800"``):
    JSON text that names no character, which msgspec refuses without saying where when it
    sits in an ignored field."""
    paired_to = -1
    for m in _SURROGATE.finditer(data):
        at = m.start()
        if at < paired_to:
            continue  # the low half of a pair already read
        before = at
        while before > 0 and data[before - 1] == 0x5C:  # the backslashes before this one
            before -= 1
        if (at - before) % 2:
            continue  # an escaped backslash followed by the letters "ud800": plain text
        unit = int(m.group()[2:], 16)
        if unit >= 0xDC00:
            return at  # a low half with no high half before it
        low = _SURROGATE.match(data, m.end())
        if low is None or int(low.group()[2:], 16) < 0xDC00:
            return at  # a high half with no low half after it
        paired_to = low.end()
    return None


def unreadable_number(data: bytes, reported: str) -> str | None:
    """The path of the first number in ``data`` msgspec cannot hold (a float beyond the
    double's range, an integer of more digits than Python reads) whose path fits the one
    msgspec ``reported`` (``$.request.params[...]``: ``[...]`` is an object key it leaves out)."""
    head = reported.split("[...]", 1)[0]
    starts: set[int] = set()
    for m in _BIG_EXPONENT.finditer(data):
        starts.add(_number_start(data, m.start()))
    for m in _LONG_INT.finditer(data):
        starts.add(_number_start(data, m.start()))
    for start in sorted(starts):
        end = start
        while end < len(data) and data[end] in _NUMBER_CHARS:
            end += 1
        if not _unreadable(data[start:end]):
            continue
        path = spot(data, start).path
        if path.startswith(head) and (path == reported or "[...]" in reported):
            return path
    return None


def _number_start(data: bytes, at: int) -> int:
    while at > 0 and data[at - 1] in _NUMBER_CHARS:
        at -= 1
    return at


def _unreadable(token: bytes) -> bool:
    if any(c in token for c in b".eE"):
        try:
            return float(token) in (float("inf"), float("-inf"))
        except ValueError:
            return False
    return len(token.lstrip(b"-")) > _MAX_DIGITS


def _key(name: str) -> str:
    if _BARE.fullmatch(name):
        return f".{name}"
    try:
        return f"[{msgspec.json.encode(name).decode()}]"
    except UnicodeEncodeError:  # a bad byte (kept as a lone surrogate) or half a pair: shown escaped
        shown = "".join(
            c if not 0xD800 <= ord(c) <= 0xDFFF
            else f"\\x{ord(c) - 0xDC00:02x}" if 0xDC80 <= ord(c) <= 0xDCFF
            else f"\\u{ord(c):04x}"
            for c in name
        )
        return f'["{shown}"]'
