"""A refusal's message in the product's words, for a console page (issue 28, item 5).

The API's decoders say what the library says (``Expected `float` <= 1.0``); a person filling
in a form needs "must be at most 1". :func:`product_words` rewrites the library's phrasings
it knows and leaves any other message as it is, so a message the API already words well
passes through unchanged.
"""

from __future__ import annotations

import re
from typing import Callable

_TYPE_WORDS = {
    "float": "a number", "int": "a whole number", "str": "text", "bool": "true or false",
    "array": "a list", "object": "an object", "null": "empty",
}


def _number(text: str) -> str:
    value = float(text)
    return f"{value:g}" if value != int(value) or abs(value) >= 1e15 else str(int(value))


def _type(name: str) -> str:
    return _TYPE_WORDS.get(name, name)


_RULES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (re.compile(r"^Expected `(\w+)` <= (-?[\d.e+]+)$"), lambda m: f"must be at most {_number(m[2])}"),
    (re.compile(r"^Expected `(\w+)` < (-?[\d.e+]+)$"), lambda m: f"must be less than {_number(m[2])}"),
    (re.compile(r"^Expected `(\w+)` >= (-?[\d.e+]+)$"), lambda m: f"must be at least {_number(m[2])}"),
    (re.compile(r"^Expected `(\w+)` > (-?[\d.e+]+)$"), lambda m: f"must be more than {_number(m[2])}"),
    (re.compile(r"^Expected `array` of length >= (\d+)$"), lambda m: f"needs at least {m[1]} entries"),
    (re.compile(r"^Expected `array` of length <= (\d+)$"), lambda m: f"takes at most {m[1]} entries"),
    (re.compile(r"^Expected `str` of length >= 1$"), lambda m: "must not be empty"),
    (re.compile(r"^Expected `str` of length >= (\d+)$"), lambda m: f"needs at least {m[1]} characters"),
    (re.compile(r"^Expected `str` of length <= (\d+)$"), lambda m: f"takes at most {m[1]} characters"),
    (re.compile(r"^Expected `(\w+)`, got `(\w+)`$"), lambda m: f"must be {_type(m[1])}, not {_type(m[2])}"),
    (re.compile(r"^Expected `(\w+) \| null`, got `(\w+)`$"), lambda m: f"must be {_type(m[1])}, not {_type(m[2])}"),
    (re.compile(r"^Object missing required field `([^`]+)`$"), lambda m: "is required"),
    (re.compile(r"^Object contains unknown field `([^`]+)`$"), lambda m: "is not a setting this form knows"),
)


def product_words(message: str, label: str | None = None) -> str:
    """``message`` in the product's words, led by the field's ``label`` when a rule matched
    ("Sample rate (0 to 1) must be at most 1."); any other message unchanged."""
    text = message.strip()
    for pattern, word in _RULES:
        m = pattern.match(text)
        if m:
            phrase = word(m)
            return f"{label or 'This value'} {phrase}."
    return text
