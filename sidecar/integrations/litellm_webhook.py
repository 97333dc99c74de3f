"""The no-code LiteLLM path: what LiteLLM's generic API logger posts, as tap exchanges.

LiteLLM's ``GenericAPILogger`` (``callbacks: ["generic_api"]``, endpoint in
``GENERIC_LOGGER_ENDPOINT``) posts a JSON array of StandardLoggingPayload objects (1.80.0
sends nothing else); NDJSON, one payload per line, and a single object are taken too. The
tap's ``POST /v1/integrations/litellm`` (:mod:`sidecar.api.tap`) reads the body and the
URL's parameters and calls :func:`exchanges_from_body`, which maps every entry with
:func:`sidecar.integrations.slo.to_exchange` — the plugin's mapping, not a copy of it.

A body that is not JSON, not an array or object, or holds an entry that is not an object
is refused (:class:`~sidecar.ingest.wire.DecodeError` with the path). An *entry* that is
not a chat completion, not a success, the sidecar's own call, incomplete, or that the tap's
screen would refuse (:mod:`sidecar.ingest.screen`) is skipped and counted by reason; it
never fails the batch — LiteLLM logs every call type through the same logger.

The team is the caller's (the URL's ``team``, or the gateway credential's), never the
payload's: a request body's ``litellm_metadata`` replaces the logged ``metadata`` whole.
A logged cost of zero is unknown here (an unpriced and a free deployment log the same).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, NamedTuple

import msgspec

from sidecar.ingest.screen import Screened, screen_batch
from sidecar.ingest.wire import DecodeError, Exchange, ndjson_type, split_path
from sidecar.integrations.slo import SKIP_REASONS, Context, Skip, to_exchange

__all__ = ["SKIP_REASONS", "WebhookBatch", "WebhookReply", "exchanges_from_body"]


class WebhookReply(msgspec.Struct, frozen=True):
    accepted: int
    sampled: int
    shed: int
    #: Entries not taken, by reason (every reason of :data:`SKIP_REASONS`, zeros included).
    skipped: dict[str, int]
    #: Exchanges for a team the gateway's credential does not cover.
    refused: int = 0


class WebhookBatch(NamedTuple):
    screened: Screened
    skipped: Counter[str]


_TOO_DEEP = "JSON nested too deeply to decode"


def exchanges_from_body(body: bytes, content_type: str, *, team: str, gateway: str) -> WebhookBatch:
    """Decode the body and map every entry; raises DecodeError for a body that is not payloads."""
    ctx = Context(team=team, gateway=gateway)
    exchanges: list[Exchange] = []
    excluded: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    for where, entry in _entries(body, content_type):
        mapped = to_exchange(entry, ctx)
        if isinstance(mapped, Skip):
            skipped[mapped.reason] += 1
            continue
        try:
            screened = screen_batch([(where, msgspec.convert(mapped, Exchange))])
        except msgspec.ValidationError:
            skipped["incomplete"] += 1
        except DecodeError:
            skipped["invalid"] += 1
        else:
            exchanges.extend(screened.exchanges)
            excluded.update(screened.excluded)
    return WebhookBatch(Screened(exchanges, excluded), skipped)


def _entries(body: bytes, content_type: str) -> list[tuple[str, dict[str, Any]]]:
    """(JSON path, payload object) for a JSON array, one object, or NDJSON."""
    if not body.strip():
        raise DecodeError("empty body", None)
    ndjson = ndjson_type(content_type)
    if not ndjson:
        try:
            doc = _decode(body, "")
        except DecodeError:
            if b"\n" not in body.strip():
                raise
            # several documents on several lines: NDJSON without its content type
        else:
            return _from_document(doc, "$")
    out: list[tuple[str, dict[str, Any]]] = []
    for lineno, line in enumerate(body.splitlines(), start=1):
        if line.strip():
            where = f"line {lineno}: $"
            doc = _decode(line, f"line {lineno}: ")
            if not isinstance(doc, dict):
                raise DecodeError(f"line {lineno}: expected a StandardLoggingPayload object", where)
            out.append((where, doc))
    return out


def _from_document(doc: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    if isinstance(doc, dict):
        return [(where, doc)]
    if not isinstance(doc, list):
        raise DecodeError("expected an array of StandardLoggingPayload objects", where)
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict):
            raise DecodeError("expected a StandardLoggingPayload object", f"{where}[{i}]")
    return [(f"{where}[{i}]", entry) for i, entry in enumerate(doc)]


def _decode(data: bytes, prefix: str) -> Any:
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        message, path = split_path(str(exc))
        raise DecodeError(f"{prefix}{message}", f"{prefix}{path or '$'}") from None
    except RecursionError:
        raise DecodeError(f"{prefix}{_TOO_DEEP}", f"{prefix}$") from None
