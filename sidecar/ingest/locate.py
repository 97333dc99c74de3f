"""Where in a JSON body a byte sits: the path of its field, for the refusals the decoder
gives without one.

msgspec names the field of a validation error but not where a document is malformed
(``invalid character (byte 118)``), reports a number it cannot hold inside an object as
``$.request.params[...]``, and checks the UTF-8 of what it keeps only, so invalid UTF-8 in
an ignored field, or in the key of one, passes unseen. The tap refuses all of these with
``400`` and a path (:mod:`sidecar.ingest.wire`); this module finds it by reading the JSON
tokens up to the byte. It runs on the refusal path only, never on an accepted body.

Paths read as msgspec's do: ``$.request.messages[0].content``, ``$["odd key"]``; a key
that is itself not valid UTF-8 is shown with its bad bytes escaped (``$["se\\xffed"]``).
"""

from __future__ import annotations

import re
import sys
from typing import NamedTuple

import msgspec

# A string (to its closing quote, or to the end of the line when it has none), one of the
# structural characters, or a number. Anything else (true, false, null, garbage) is skipped.
_TOKEN = re.compile(rb'"(?:[^"\\\n]|\\.)*"?|[\[\]{},:]|-?[0-9][0-9eE+\-.]*')
_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ESCAPE = re.compile(rb"\\(?:u([0-9a-fA-F]{4})|.)")
_BYTE = re.compile(r"\(byte (\d+)\)")
#: Python's (and so msgspec's) limit on the digits of an integer read from text.
_MAX_DIGITS = sys.get_int_max_str_digits() or 4300


class Spot(NamedTuple):
    """Where a byte sits: the JSON path, and whether the byte is in an object key."""

    path: str
    in_key: bool


def spot(data: bytes, offset: int) -> Spot:
    """The path of the value (or the key) that byte ``offset`` of one JSON document belongs to."""
    # A frame per open container: [is an object, its current key or index, a key is due].
    stack: list[list[object]] = []
    for m in _TOKEN.finditer(data):
        if m.start() > offset:
            break
        token = m.group()
        first = token[:1]
        holds = offset < m.end()
        if first == b'"':
            top = stack[-1] if stack else None
            if top is not None and top[0] and top[2]:
                top[1] = token
                if holds:
                    return Spot(_render(stack), True)
            elif holds:
                break
        elif holds:
            break  # the byte is in this container's bracket or in a number: the value's own path
        elif first in b"{[":
            stack.append([first == b"{", None if first == b"{" else 0, first == b"{"])
        elif first in b"}]":
            if stack:
                stack.pop()
        elif first == b",":
            if stack:
                top = stack[-1]
                if top[0]:
                    top[1], top[2] = None, True
                else:
                    top[1] = int(top[1]) + 1  # type: ignore[call-overload]
        elif first == b":":
            if stack and stack[-1][0]:
                stack[-1][2] = False
    return Spot(_render(stack), False)


def byte_of(message: str) -> int | None:
    """The byte offset a msgspec ``DecodeError`` message names (``... (byte 12)``), if any."""
    m = _BYTE.search(message)
    return int(m.group(1)) if m else None


def unreadable_number(data: bytes, reported: str) -> str | None:
    """The path of the first number in ``data`` msgspec cannot hold (a float beyond the
    double's range, an integer of more digits than Python reads) whose path fits the one
    msgspec ``reported`` (``$.request.params[...]``: ``[...]`` is an object key it leaves out)."""
    head = reported.split("[...]", 1)[0]
    for m in _TOKEN.finditer(data):
        token = m.group()
        if token[:1] not in b"-0123456789" or not _unreadable(token):
            continue
        path = spot(data, m.start()).path
        if path.startswith(head) and (path == reported or "[...]" in reported):
            return path
    return None


def lone_surrogate(data: bytes) -> int | None:
    """The offset of the first ``\\u`` escape of half a UTF-16 surrogate pair (``"\\ud800"``):
    JSON text that names no character, which msgspec refuses without saying where when it
    sits in an ignored field."""
    for m in _TOKEN.finditer(data):
        token = m.group()
        if token[:1] != b'"' or b"\\u" not in token:
            continue
        pending: tuple[int, int] | None = None  # a high half waiting for its low half
        for e in _ESCAPE.finditer(token):
            unit = int(e.group(1), 16) if e.group(1) else -1
            if pending is not None:
                if 0xDC00 <= unit <= 0xDFFF and e.start() == pending[1]:
                    pending = None
                    continue
                return m.start() + pending[0]
            if 0xD800 <= unit <= 0xDBFF:
                pending = (e.start(), e.end())
            elif 0xDC00 <= unit <= 0xDFFF:
                return m.start() + e.start()
        if pending is not None:
            return m.start() + pending[0]
    return None


def _unreadable(token: bytes) -> bool:
    if any(c in token for c in b".eE"):
        try:
            return float(token) in (float("inf"), float("-inf"))
        except ValueError:
            return False
    return len(token.lstrip(b"-")) > _MAX_DIGITS


def _render(stack: list[list[object]]) -> str:
    parts = ["$"]
    for is_object, key, _ in stack:
        if not is_object:
            parts.append(f"[{key}]")
        elif isinstance(key, bytes):
            parts.append(_key(key))
    return "".join(parts)


def _key(token: bytes) -> str:
    raw = token[1:-1] if len(token) > 1 and token.endswith(b'"') else token[1:]
    try:
        name = msgspec.json.decode(b'"' + raw + b'"')
    except msgspec.DecodeError:  # invalid UTF-8 or a bad escape: its bytes shown escaped, once
        return f'["{raw.decode("utf-8", "backslashreplace")}"]'
    if isinstance(name, str) and _BARE.fullmatch(name):
        return f".{name}"
    return f"[{msgspec.json.encode(name).decode()}]"
