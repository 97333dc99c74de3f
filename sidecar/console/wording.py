"""A refusal's message led by the form field it is about (issue 28, item 5).

The API already says its validation errors in the product's words
(:mod:`sidecar.ingest.wording`: "must be at most 1.0", not msgspec's ``Expected `float` <=
1.0``). A person filling in a form reads them best led by the field's label: "Sample rate
(0 to 1) must be at most 1.0." :func:`product_words` adds that label to a message that is a
predicate ("must …", "is …"); any other message (a whole sentence) passes through as it is.
"""

from __future__ import annotations

from sidecar.ingest.wording import product_words as api_words

_PREDICATES = ("must ", "is ", "needs ", "takes ", "has ")


def product_words(message: str, label: str | None = None) -> str:
    """``message`` led by ``label`` when it is a predicate ("Sample rate (0 to 1) must be at
    most 1.0."); library phrasings that reach here unworded are worded first."""
    text = api_words(message.strip(), "$.value")
    if not text.startswith(_PREDICATES):
        return text
    return f"{label or 'This value'} {text.rstrip('.')}."
