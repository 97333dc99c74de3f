"""msgspec's validation messages reach the API's 400s in the product's words (issue 28, item 5).

Each case decodes a real body with msgspec and passes its message through
:func:`sidecar.ingest.wire.split_path`, the one place every route turns a validation error
into ``(message, field)``: the words change, the field path does not.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

import msgspec
import pytest

from sidecar.ingest.wire import split_path
from sidecar.ingest.wording import product_words


class _Price(msgspec.Struct, forbid_unknown_fields=True):
    input_per_mtok_usd: float


class _Body(msgspec.Struct, forbid_unknown_fields=True):
    team: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    sample_rate: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.1
    tolerance: Annotated[float, msgspec.Meta(gt=0.0, lt=0.5)] = 0.05
    min_cases: Annotated[int, msgspec.Meta(ge=1)] = 20
    models: Annotated[list[str], msgspec.Meta(min_length=2, max_length=6)] = []
    messages: Annotated[list[dict[str, Any]], msgspec.Meta(min_length=1)] = []
    temperature: float | None = None
    on_decision: Literal["stop", "continue"] = "stop"
    content: bool = False
    since: datetime.datetime | None = None
    price: _Price | None = None


def _refusal(body: bytes) -> tuple[str, str | None]:
    with pytest.raises(msgspec.ValidationError) as info:
        msgspec.json.decode(body, type=_Body)
    return split_path(str(info.value))


@pytest.mark.parametrize(("body", "message", "field"), [
    (b'{"team": "a", "sample_rate": 1.5}', "must be at most 1.0", "$.sample_rate"),
    (b'{"team": "a", "sample_rate": -1}', "must be at least 0.0", "$.sample_rate"),
    (b'{"team": "a", "sample_rate": "half"}', "must be a number, got a string", "$.sample_rate"),
    (b'{"team": "a", "tolerance": 0}', "must be greater than 0.0", "$.tolerance"),
    (b'{"team": "a", "tolerance": 0.5}', "must be less than 0.5", "$.tolerance"),
    (b'{"team": "a", "min_cases": 2.5}', "must be an integer, got a number", "$.min_cases"),
    (b'{"team": "a", "models": ["only-one"]}', "must list at least 2 models", "$.models"),
    (b'{"team": "a", "models": ["1", "2", "3", "4", "5", "6", "7"]}', "must list at most 6 models", "$.models"),
    (b'{"team": "a", "messages": []}', "must list at least 1 message", "$.messages"),
    (b'{"team": "a", "models": [1, 2]}', "must be a string, got an integer", "$.models[0]"),
    (b'{"team": ""}', "must not be empty", "$.team"),
    (b'{"team": "' + b"t" * 201 + b'"}', "must be at most 200 characters", "$.team"),
    (b'{"team": "a", "temperature": "hot"}', "must be a number or null, got a string", "$.temperature"),
    (b'{"team": "a", "on_decision": "pause"}', "'pause' is not one of the accepted values", "$.on_decision"),
    (b'{"team": "a", "content": "yes"}', "must be true or false, got a string", "$.content"),
    (b'{"team": "a", "since": "last week"}', "must be an RFC 3339 date-time, such as 2026-11-01T00:00:00Z",
     "$.since"),
    (b'{"team": "a", "price": {}}', "input_per_mtok_usd is required", "$.price.input_per_mtok_usd"),
    (b'{}', "team is required", "$.team"),
    (b'{"team": "a", "sample_rat": 0.5}',
     "unknown field 'sample_rat': this request does not take it (check its spelling)", "$.sample_rat"),
    (b'[]', "the body must be a JSON object, got a list", None),
], ids=lambda v: v if isinstance(v, str) and v.startswith("$") else None)
def test_a_validation_error_is_said_in_product_words_with_its_field(body: bytes, message: str, field: str | None) -> None:
    said, path = _refusal(body)
    assert (said, path) == (message, field)
    assert "Expected" not in said and "`" not in said


def test_a_truncated_document_says_so() -> None:
    with pytest.raises(msgspec.DecodeError) as info:
        msgspec.json.decode(b'{"team": ', type=_Body)
    assert split_path(str(info.value)) == ("JSON is malformed: it ends before the document does (truncated)", None)


def test_a_message_it_does_not_know_is_kept_as_it_came() -> None:
    assert product_words("JSON is malformed: invalid character (byte 3)", "$") == \
        "JSON is malformed: invalid character (byte 3)"
