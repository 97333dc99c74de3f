"""OTLP/HTTP traces on the wire: an ``ExportTraceServiceRequest`` in, its response out.

Both encodings of the OTLP specification (``opentelemetry-proto``'s message classes):
binary protobuf (``application/x-protobuf``) and JSON (``application/json``: proto3's
JSON mapping, but trace and span ids in hex, as the specification says). The response
is in the request's encoding: ``ExportTraceServiceResponse``, with ``partial_success``
when spans were rejected (or, with none rejected, to warn). Decoding is the whole body
at once (protobuf's C parser; nesting is bounded by its recursion limit); what is read
of each span is :mod:`sidecar.ingest.genai_spans`'s business.
"""

from __future__ import annotations

import base64
from typing import Any, Literal

import msgspec
from google.protobuf import json_format
from google.protobuf.message import DecodeError as ProtoDecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from sidecar.ingest.wire import DecodeError

Encoding = Literal["protobuf", "json"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_MEDIA: dict[str, Encoding] = {PROTOBUF: "protobuf", "application/protobuf": "protobuf", JSON: "json"}
#: The span fields of the JSON encoding holding ids in hex (proto3's JSON mapping says base64).
_ID_FIELDS = ("traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id")


def encoding_of(content_type: str) -> Encoding | None:
    """The OTLP encoding of a request's media type (its parameters stripped), None when not OTLP."""
    return _MEDIA.get(content_type.partition(";")[0].strip().lower())


def decode_request(body: bytes, encoding: Encoding) -> ExportTraceServiceRequest:
    """Decode an export request. Raises :class:`~sidecar.ingest.wire.DecodeError` (never anything else)."""
    request = ExportTraceServiceRequest()
    if encoding == "protobuf":
        try:
            request.ParseFromString(body)
        except (ProtoDecodeError, RecursionError, ValueError) as exc:
            raise DecodeError("the body is not an OTLP ExportTraceServiceRequest in protobuf", "$") from None
        return request
    try:
        document = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise DecodeError(f"the body is not JSON ({_short(exc)})", "$") from None
    except RecursionError:
        raise DecodeError("JSON nested too deeply to decode", "$") from None
    if not isinstance(document, dict):
        raise DecodeError("an OTLP JSON export request is an object", "$")
    _ids_to_base64(document)
    try:
        json_format.ParseDict(document, request, ignore_unknown_fields=True)
    except json_format.ParseError as exc:
        raise DecodeError(f"the body is not an OTLP ExportTraceServiceRequest in JSON ({_short(exc)})", "$") from None
    except RecursionError:
        raise DecodeError("JSON nested too deeply to decode", "$") from None
    except (ValueError, TypeError, AttributeError) as exc:  # json_format's own checks on odd shapes
        raise DecodeError("the body is not an OTLP ExportTraceServiceRequest in JSON", "$") from None
    return request


def _ids_to_base64(document: dict[str, Any]) -> None:
    """Rewrite the hex ids of every span (and its links) into what proto3's JSON parser reads."""
    for rs_at, rs in enumerate(_list(document, "resourceSpans", "resource_spans", "$")):
        for ss_at, ss in enumerate(_list(rs, "scopeSpans", "scope_spans", f"$.resourceSpans[{rs_at}]")):
            where = f"$.resourceSpans[{rs_at}].scopeSpans[{ss_at}]"
            for sp_at, span in enumerate(_list(ss, "spans", "spans", where)):
                _hex_ids(span, f"{where}.spans[{sp_at}]")
                for ln_at, link in enumerate(_list(span, "links", "links", f"{where}.spans[{sp_at}]")):
                    _hex_ids(link, f"{where}.spans[{sp_at}].links[{ln_at}]")


def _list(node: object, camel: str, snake: str, where: str) -> list[Any]:
    if not isinstance(node, dict):
        raise DecodeError("expected an object", where)
    value = node.get(camel, node.get(snake))
    if value is None:
        return []
    if not isinstance(value, list):
        raise DecodeError(f"{camel} must be an array", f"{where}.{camel}")
    return value


def _hex_ids(node: object, where: str) -> None:
    if not isinstance(node, dict):
        raise DecodeError("expected an object", where)
    for name in _ID_FIELDS:
        value = node.get(name)
        if value is None:
            continue
        if not isinstance(value, str):
            raise DecodeError(f"{name} must be a hex string", f"{where}.{name}")
        try:
            node[name] = base64.b64encode(bytes.fromhex(value)).decode("ascii")
        except ValueError:
            raise DecodeError(f"{name} must be a hex string", f"{where}.{name}") from None


def encode_response(encoding: Encoding, rejected: int = 0, message: str = "") -> bytes:
    """An ``ExportTraceServiceResponse``: ``partial_success`` set when ``rejected`` or ``message``."""
    response = ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.CopyFrom(ExportTracePartialSuccess(rejected_spans=rejected, error_message=message))
    if encoding == "protobuf":
        wire: bytes = response.SerializeToString()
        return wire
    text: str = json_format.MessageToJson(response, indent=None)
    return text.encode()


def media_type(encoding: Encoding) -> str:
    return PROTOBUF if encoding == "protobuf" else JSON


def _short(exc: BaseException) -> str:
    """An error's text up to its first colon, bounded: what follows may quote the body."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.partition(": ")[0][:120]

