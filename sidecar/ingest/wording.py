"""msgspec's validation messages in the product's words.

msgspec says ``Expected `float` <= 1.0`` and ``Expected `array` of length >= 2``; an operator
reads "must be at most 1.0" and "must list at least 2 models". :func:`product_words` turns
one message (its path already split off by :func:`sidecar.ingest.wire.split_path`, which
calls it, so every 400 the API builds from a validation error says it the same way) into
those words; the field path stays in the error's ``field``. A message it does not know is
returned as it came.
"""

from __future__ import annotations

import re

#: msgspec's type names → what a reader of the API calls them.
_TYPES = {
    "float": "a number",
    "int": "an integer",
    "str": "a string",
    "bool": "true or false",
    "array": "a list",
    "object": "a JSON object",
    "null": "null",
    "datetime": "a date-time",
}
_BOUND = {"<=": "at most", ">=": "at least", "<": "less than", ">": "greater than"}

_GOT = re.compile(r"Expected `([^`]+)`, got `([^`]+)`")
_LIMIT = re.compile(r"Expected `([^`]+)` (<=|>=|<|>) (\S+)")
_LENGTH = re.compile(r"Expected `(str|array|object)` of length (<=|>=) (\d+)")
_PATTERN = re.compile(r"Expected `str` matching regex ('.*')")
_MULTIPLE = re.compile(r"Expected `[^`]+` that's a multiple of (\S+)")
_MISSING = re.compile(r"Object missing required field `([^`]+)`")
_UNKNOWN = re.compile(r"Object contains unknown field `([^`]+)`")
_ENUM = re.compile(r"Invalid enum value (.+)")
_LAST_NAME = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)$")

#: The start of the words :func:`product_words` gives a ``pattern`` refusal; a caller that
#: knows the rule behind the pattern (:data:`sidecar.trials.create.NAME_RULE`) says it instead.
PATTERN_WORDS = "must match the pattern"


def type_words(names: str) -> str:
    """``float | null`` → ``a number or null``."""
    return " or ".join(_TYPES.get(n.strip(), f"a {n.strip()}") for n in names.split("|"))


def _noun(path: str | None, count: int) -> str:
    """What a list at ``path`` holds, for "must list at least 2 models": its field's name when
    that is a plural (``models``, ``messages``), else items."""
    named = _LAST_NAME.search(path or "")
    noun = named.group(1) if named and named.group(1).endswith("s") else "items"
    return noun[:-1] if count == 1 else noun


def product_words(message: str, path: str | None = None) -> str:
    """``message`` (msgspec's, without its `` - at `$...``` path) in the product's words."""
    words = _words(message, path)
    if words.startswith("must") and path in (None, "$"):
        return f"the body {words}"
    return words


def _words(message: str, path: str | None) -> str:
    if m := _LENGTH.fullmatch(message):
        kind, op, n = m.group(1), m.group(2), int(m.group(3))
        bound = _BOUND[op]
        if kind == "str":
            return "must not be empty" if op == ">=" and n == 1 else f"must be {bound} {n} characters"
        if kind == "array":
            return f"must list {bound} {n} {_noun(path, n)}"
        return f"must have {bound} {n} entr{'y' if n == 1 else 'ies'}"
    if m := _PATTERN.fullmatch(message):
        return f"{PATTERN_WORDS} {m.group(1)}"
    if m := _MULTIPLE.fullmatch(message):
        return f"must be a multiple of {m.group(1)}"
    if m := _GOT.fullmatch(message):
        return f"must be {type_words(m.group(1))}, got {type_words(m.group(2))}"
    if m := _LIMIT.fullmatch(message):
        return f"must be {_BOUND[m.group(2)]} {m.group(3)}"
    if m := _MISSING.fullmatch(message):
        return f"{m.group(1)} is required"
    if m := _UNKNOWN.fullmatch(message):
        return f"unknown field {m.group(1)!r}: this request does not take it (check its spelling)"
    if m := _ENUM.fullmatch(message):
        return f"{m.group(1)} is not one of the accepted values"
    if message == "Invalid RFC3339 encoded datetime":
        return "must be an RFC 3339 date-time, such as 2026-11-01T00:00:00Z"
    if message == "Input data was truncated":
        return "JSON is malformed: it ends before the document does (truncated)"
    if message == "Number out of range":
        return "the number is out of range"
    return message
