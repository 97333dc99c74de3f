"""What every admin route module shares: the services' app keys, the JSON answer, the
error middleware and the body reader. Below :mod:`.admin` and :mod:`.watch_routes`
both, so neither imports the other.

Errors always have the shape ``{"error": {"code", "message", "field"}}``; one
middleware maps :class:`sidecar.errors.ApiError` subclasses to their status.
"""

from __future__ import annotations

import logging
from typing import Any, Awaitable, Callable

from aiohttp import web

from sidecar.api.listener import client_gone, describe
from sidecar.errors import ApiError, PromotionRefused, UnsupportedEncoding
from sidecar.ingest.wire import encode
from sidecar.services.compare import CompareService
from sidecar.services.gates import GateService
from sidecar.services.posture import PostureService
from sidecar.services.promotion import PromotionService
from sidecar.services.trials import TrialService
from sidecar.services.watches import WatchService
from sidecar.store.errors import IdempotencyConflict
from sidecar.trials.create import IDEMPOTENCY_KEY

log = logging.getLogger("shadowtrial.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TRIALS: web.AppKey[TrialService] = web.AppKey("trials", TrialService)
POSTURE: web.AppKey[PostureService] = web.AppKey("posture", PostureService)
COMPARE: web.AppKey[CompareService] = web.AppKey("compare", CompareService)
WATCHES: web.AppKey[WatchService] = web.AppKey("watches", WatchService)
PROMOTION: web.AppKey[PromotionService] = web.AppKey("promotion", PromotionService)
GATES: web.AppKey[GateService] = web.AppKey("gates", GateService)


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=encode(data), content_type="application/json")


def _error(status: int, code: str, message: str, field: str | None = None) -> web.Response:
    return _json({"error": {"code": code, "message": message, "field": field}}, status)


@web.middleware
async def errors_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except PromotionRefused as exc:  # the one refusal whose body says more: why
        return _json({"error": {"code": exc.code, "message": exc.message, "field": exc.field, "reason": exc.reason}},
                     exc.status)
    except ApiError as exc:
        return _error(exc.status, exc.code, exc.message, exc.field)
    except IdempotencyConflict as exc:
        return _error(409, "request_key_conflict", str(exc), IDEMPOTENCY_KEY)
    except web.HTTPRequestEntityTooLarge:
        return _error(413, "body_too_large", "request body too large")
    except web.RequestPayloadError as exc:  # e.g. a broken chunked transfer
        # In fixed words: the parser's own text may quote the bytes sent (sidecar.api.listener).
        return _error(400, "invalid_request", f"the body could not be read: {describe(exc.__cause__ or exc)}")
    except web.HTTPException as exc:
        if exc.status >= 400:
            response = _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
            if "Allow" in exc.headers:  # a 405 says what is allowed
                response.headers["Allow"] = exc.headers["Allow"]
            return response
        raise
    except Exception:
        if client_gone(request):  # closed mid-request: nobody to answer, nothing to log (sidecar.api.listener)
            raise
        # A defect, not a refusal: the caller still gets the documented shape, and the log the
        # traceback (admin requests carry no prompt or answer content).
        log.exception("admin %s %s failed", request.method, request.path)
        return _error(500, "internal_error", "the sidecar failed on this request; its log has the details")


async def read_body(request: web.Request) -> bytes:
    """The request body as sent. Bodies are small JSON documents, so none may be compressed:
    a ``Content-Encoding`` other than ``identity`` is 415 naming the header (the app reads
    bodies undecoded, so no encoding, broken or unknown, can fail below the API's error shape)."""
    encodings = [e.strip().lower() for v in request.headers.getall("Content-Encoding", []) for e in v.split(",")]
    if any(e not in ("", "identity") for e in encodings):
        raise UnsupportedEncoding(
            f"the admin API takes uncompressed JSON; Content-Encoding {', '.join(encodings)!r} is not accepted",
            field="Content-Encoding",
        )
    return await request.read()
