"""The admin API's guard against a store that cannot answer.

A store whose lock another process holds, or a PostgreSQL server that is away, must
not hang an admin request nor turn it into a 500 with a traceback: every request runs
under ``admin.request_timeout_seconds``, and a timeout or a store failure is ``503
store_unavailable`` with ``Retry-After`` — the JSON error shape, content-free.

The client's own slowness is not the store's: a timeout while the request's body is
still arriving is ``408 read_timeout``, and a client that closed the connection
mid-request is left to the listener (:mod:`sidecar.api.listener`), unlogged.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.api.listener import body_incomplete, client_gone, stalled_body
from sidecar.redact import describe

log = logging.getLogger("shadowtrial.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Seconds a client is told to wait before trying again.
RETRY_AFTER_S = 2


def store_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is the store failing (locked, away), not a defect (the console answers it too)."""
    if isinstance(exc, (sqlite3.OperationalError, ConnectionError)):
        return True
    module = type(exc).__module__
    return module.startswith("asyncpg")


def store_guard(timeout_s: float, *, streams: frozenset[str] = frozenset()) -> Middleware:
    """``streams``: paths of streaming routes that touch no store and bound their own time
    (``/v1/compare``): a timeout cannot answer 503 once a stream has started."""

    @web.middleware
    async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in streams:
            return await handler(request)
        try:
            async with asyncio.timeout(timeout_s):
                return await handler(request)
        except TimeoutError:
            if body_incomplete(request):
                raise stalled_body(request, timeout_s) from None
            message = f"the store did not answer within {timeout_s:g} s"
        except Exception as exc:
            if client_gone(request) or not store_failure(exc):
                raise
            message = f"the store failed ({describe(exc)})"
        log.warning("%s %s: %s; answered 503", request.method, request.path, message)
        body = {"error": {"code": "store_unavailable", "message": message, "field": None}}
        return web.json_response(body, status=503, headers={"Retry-After": str(RETRY_AFTER_S)})

    return guard
