"""The tap: where the gateway hands over copies of served exchanges.

``POST /v1/exchanges`` answers ``202 {"accepted", "sampled", "shed"}`` as soon as
the batch is decoded and its sampled claims are offered to the engine's
hand-off; it never waits for a dispatch, the store or the engine's loop.

Every refusal is ``{"error": {"code", "message", "field"}}``:

- ``400 invalid_exchange`` — the body is not exchanges (the path of the first bad
  field in ``field``), or a value the engine relies on is out of range
  (:mod:`sidecar.ingest.screen`); nothing of the batch is counted;
- ``401 unauthorized`` — ``tap.token_env`` is set and the request does not carry
  exactly one ``Authorization: Bearer <token>`` with that token (the scheme in any
  case, one space, the token compared in constant time);
- ``408 read_timeout`` — the body did not arrive within ``tap.read_timeout_seconds``
  (the connection is closed after the answer);
- ``413 body_too_large`` — over ``tap.max_body_bytes``, after decompression;
- ``415 unsupported_encoding`` — a ``Content-Encoding`` other than ``gzip``
  (``identity`` is no encoding);
- ``404``/``405`` for other paths and methods, ``500 internal_error`` for a bug
  (logged by exception type only: an exception's message may echo content).

``POST /v1/integrations/litellm`` takes what LiteLLM's generic API logger sends
(:mod:`sidecar.integrations.litellm_webhook`), with the same credentials and limits, and
answers ``202 {"accepted", "sampled", "shed", "skipped": {reason: n}}``; the team is the
URL's ``team`` parameter (or a single-team gateway JWT's), never the payload's: ``400
missing_team``/``invalid_parameter`` and ``403 forbidden`` name the parameter, ``400
invalid_payload`` the path of the bad JSON.

``POST /v1/traces`` takes OTLP/HTTP traces, protobuf or JSON, with the same credentials and
limits: GenAI chat spans become exchanges (:mod:`sidecar.api.otlp_route`).

Both routes read a gateway plugin's ``Shadowtrial-Plugin-Stats`` header, once the
credential is accepted, into ``Runtime.plugin_stats`` (:mod:`sidecar.ingest.plugin_stats`).

A connection idle for ``tap.idle_timeout_seconds`` — before its first request,
between requests, or with its request headers unfinished — is closed (aiohttp's
keep-alive timer, armed from the moment the connection is made).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import re
import zlib
from dataclasses import dataclass
from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from sidecar.api.listener import Listener, ListenerRunner, client_gone, describe
from sidecar.api.otlp_route import TapHooks, traces_handler
from sidecar.auth.errors import Unauthorized
from sidecar.auth.verify import Verifier
from sidecar.config import TapConfig
from sidecar.ingest.plugin_stats import HEADER as PLUGIN_STATS_HEADER, PluginStats
from sidecar.runtime import Runtime
from sidecar.ingest.intake import IntakeParts, ingest, offer
from sidecar.ingest.wire import DecodeError, check_utf8, encode
from sidecar.integrations import litellm_webhook
from sidecar.trials.create import MAX_NAME_CHARS, NAME_RULE
from sidecar.telemetry.counters import TapCounters
from sidecar.telemetry.names import TapRejection

log = logging.getLogger("shadowtrial.tap")

#: The tap's verifier of gateway JWTs (``tap.gateway_jwt``), absent otherwise.
GATEWAY_VERIFIER: web.AppKey[Verifier] = web.AppKey("gateway_verifier", Verifier)


@dataclass(frozen=True, slots=True)
class TapContext:
    """What the tap's handlers use, not the runtime: intake's parts (read at each batch),
    ``[tap]``, the shared token, this process's counts and the plugins' drop counts."""

    intake: IntakeParts
    tap: TapConfig
    token: str | None
    counters: TapCounters
    plugin_stats: PluginStats


TAP_CONTEXT: web.AppKey[TapContext] = web.AppKey("tap_context", TapContext)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: The token of ``Authorization: <scheme> <token>``: visible ASCII, no spaces (RFC 9110 token68 and more).
_CREDENTIALS = re.compile(r"[\x21-\x7e]+")
_GZIP = frozenset({"gzip", "x-gzip"})



def _error(
    status: int, code: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> web.Response:
    body = {"error": {"code": code, "message": message, "field": field}}
    return web.Response(status=status, body=encode(body), content_type="application/json", headers=headers)


class _Refused(Exception):
    """A request the tap answers with an error (raised while reading the body);
    ``reason`` is the ``shadowtrial_tap_rejected_total`` label it is counted under."""

    def __init__(
        self, status: int, code: str, message: str, *, reason: TapRejection, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.response = _error(status, code, message, headers=headers)
        self.reason = reason


def bearer_token(values: list[str]) -> bytes | None:
    """The token of exactly one ``Authorization: Bearer <token>`` header, or None.

    The scheme is case-insensitive (RFC 9110); one space separates it from one
    token of visible ASCII. A bare token, another scheme, extra spaces, several
    tokens, a non-ASCII value or several ``Authorization`` headers give None."""
    if len(values) != 1:
        return None
    scheme, sep, credentials = values[0].partition(" ")
    if not sep or scheme.lower() != "bearer" or not _CREDENTIALS.fullmatch(credentials):
        return None
    return credentials.encode("ascii")


def _authorised(request: web.Request, token: bytes) -> bool:
    given = bearer_token(request.headers.getall("Authorization", []))
    # compare_digest on bytes: its time does not depend on where the two differ.
    return given is not None and hmac.compare_digest(given, token)


def _content_codings(request: web.Request) -> list[str]:
    codings = (c.strip().lower() for v in request.headers.getall("Content-Encoding", []) for c in v.split(","))
    return [c for c in codings if c and c != "identity"]


def _gunzip(raw: bytes, limit: int) -> bytes:
    """Decompress a gzip body (all its members) to at most ``limit`` bytes, never more in memory."""
    out: list[bytes] = []
    size = 0
    rest = raw
    while True:
        d = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            chunk = d.decompress(rest, limit - size + 1)
        except zlib.error:
            raise _Refused(
                400, "invalid_encoding", "the body is not valid gzip (Content-Encoding: gzip)", reason="malformed"
            ) from None
        size += len(chunk)
        out.append(chunk)
        if size > limit:
            raise _Refused(413, "body_too_large", f"body exceeds {limit} bytes once decompressed", reason="too_large")
        if not d.eof:
            raise _Refused(400, "invalid_encoding", "the gzip body is truncated", reason="malformed")
        rest = d.unused_data
        if not rest.strip(b"\0"):  # some encoders pad the last member with zeros
            return b"".join(out)


async def _read_body(request: web.Request, ctx: TapContext) -> bytes:
    """The request body, decoded; raises :class:`_Refused`."""
    tap = ctx.tap
    codings = _content_codings(request)
    if codings and (len(codings) > 1 or codings[0] not in _GZIP):
        raise _Refused(
            415, "unsupported_encoding", "Content-Encoding must be gzip or none",
            reason="unsupported_encoding", headers={"Accept-Encoding": "gzip"},
        )
    try:
        if request.content.is_eof():  # every byte is here: the read cannot wait, so no timer (issue 29)
            raw = await request.read()
        else:
            async with asyncio.timeout(tap.read_timeout_seconds):
                raw = await request.read()
    except TimeoutError:
        raise _Refused(
            408, "read_timeout", f"the body did not arrive within {tap.read_timeout_seconds} s", reason="read_timeout"
        ) from None
    except web.HTTPRequestEntityTooLarge:
        raise _Refused(413, "body_too_large", f"body exceeds {tap.max_body_bytes} bytes", reason="too_large") from None
    except HttpProcessingError as exc:  # a broken chunked encoding, a body shorter than its Content-Length
        # In fixed words: the parser's own text may quote the bytes sent (sidecar.api.listener).
        raise _Refused(400, "invalid_body", describe(exc), reason="malformed") from None
    return _gunzip(raw, tap.max_body_bytes) if codings else raw


def _gateway(request: web.Request, ctx: TapContext) -> frozenset[str] | None | web.Response:
    """Who may post here: None (any team: loopback with no credential configured, or the
    shared token), the teams of a verified gateway JWT, or the error response."""
    token = ctx.token
    verifier = request.app.get(GATEWAY_VERIFIER)
    if token is None and verifier is None:
        return None
    if token is not None and _authorised(request, token.encode()):
        return None
    if verifier is not None:
        values = request.headers.getall("Authorization", [])
        try:
            principal = verifier.authenticate(values[0] if len(values) == 1 else None)
        except Unauthorized:
            pass
        else:
            if principal.is_super:
                return None
            if "gateway" in principal.roles:
                return principal.teams
            ctx.counters.tap_rejected_forbidden += 1
            return _error(403, "forbidden", "the token does not carry the gateway role")
    ctx.counters.tap_rejected("unauthorized")
    return _error(401, "unauthorized", "tap credential missing or wrong", headers={"WWW-Authenticate": "Bearer"})


async def post_exchanges(request: web.Request) -> web.StreamResponse:
    ctx = request.app[TAP_CONTEXT]
    teams = _gateway(request, ctx)
    if isinstance(teams, web.Response):
        return teams
    _plugin_stats(request, ctx)
    body = await _body_or_refusal(request, ctx)
    if isinstance(body, web.StreamResponse):
        return body
    try:
        reply = ingest(ctx.intake, body, request.content_type, teams)
    except DecodeError as exc:
        ctx.counters.tap_rejected("malformed")
        return _error(400, "invalid_exchange", str(exc), exc.path)
    return web.Response(status=202, body=encode(reply), content_type="application/json")


async def post_litellm(request: web.Request) -> web.StreamResponse:
    """``POST /v1/integrations/litellm``: StandardLoggingPayloads from LiteLLM's generic API logger."""
    ctx = request.app[TAP_CONTEXT]
    teams = _gateway(request, ctx)
    if isinstance(teams, web.Response):
        return teams
    _plugin_stats(request, ctx)
    params = _webhook_params(request, teams)
    if isinstance(params, web.Response):
        ctx.counters.tap_rejected("malformed")
        return params
    team, gateway = params
    body = await _body_or_refusal(request, ctx)
    if isinstance(body, web.StreamResponse):
        return body
    try:
        check_utf8(body, request.content_type)  # naming where, as for exchanges
        batch = litellm_webhook.exchanges_from_body(body, request.content_type, team=team, gateway=gateway)
    except DecodeError as exc:
        ctx.counters.tap_rejected("malformed")
        return _error(400, "invalid_payload", str(exc), exc.path)
    reply = offer(ctx.intake, batch.screened, teams)
    ctx.counters.webhook_skipped(batch.skipped)
    answer = litellm_webhook.WebhookReply(
        accepted=reply.accepted, sampled=reply.sampled, shed=reply.shed, refused=reply.refused,
        skipped={reason: batch.skipped[reason] for reason in litellm_webhook.SKIP_REASONS},
    )
    return web.Response(status=202, body=encode(answer), content_type="application/json")


_WEBHOOK_PARAMS = ("team", "gateway")


def _webhook_params(request: web.Request, teams: frozenset[str] | None) -> tuple[str, str] | web.Response:
    """(team, gateway) from the webhook's URL, or the error response.

    The team is never read from the payload (the caller of the gateway controls it): it is
    the ``team`` parameter the operator wrote into LiteLLM's ``GENERIC_LOGGER_ENDPOINT``,
    or, without one, the only team of the gateway JWT; a ``team`` the JWT does not carry is 403."""
    query = request.rel_url.query
    for name in query:
        if name not in _WEBHOOK_PARAMS:
            return _error(400, "invalid_parameter", f"unknown query parameter {name!r}; "
                          f"known: {', '.join(_WEBHOOK_PARAMS)}", name)
        if len(query.getall(name)) > 1:
            return _error(400, "invalid_parameter", f"query parameter {name!r} given more than once", name)
    for name in _WEBHOOK_PARAMS:
        value = query.get(name)
        if value is not None and not _is_name(value):
            return _error(400, "invalid_parameter", f"{name} must be {NAME_RULE}", name)
    team = query.get("team")
    if team is None:
        if teams is None or len(teams) != 1:
            return _error(400, "missing_team", "the team is not taken from LiteLLM's payload (a caller can set it); "
                          "add ?team=<team> to the logger's URL", "team")
        (team,) = teams
    elif teams is not None and team not in teams:
        return _error(403, "forbidden", "the gateway's credential does not cover this team", "team")
    return team, query.get("gateway", "litellm")


def _is_name(value: str) -> bool:
    """A team or gateway name as trials take it (sidecar.trials.create.NAME_RULE)."""
    return (
        0 < len(value) <= MAX_NAME_CHARS and value == value.strip()
        and not any(ord(c) < 0x20 or ord(c) == 0x7F for c in value)
    )


def _plugin_stats(request: web.Request, ctx: TapContext) -> None:
    """Take a gateway plugin's drop counts from its stats header (one header, bounded)."""
    values = request.headers.getall(PLUGIN_STATS_HEADER, [])
    if len(values) == 1:
        ctx.plugin_stats.record(values[0])
    elif values:
        ctx.plugin_stats.ignored += 1


async def _body_or_refusal(request: web.Request, ctx: TapContext) -> bytes | web.StreamResponse:
    """The decoded body, or the refusal answered (and counted)."""
    try:
        return await _read_body(request, ctx)
    except _Refused as refused:
        ctx.counters.tap_rejected(refused.reason)
        if refused.reason == "read_timeout":
            return await _answer_and_close(request, refused.response)
        return refused.response


async def _answer_and_close(request: web.Request, response: web.Response) -> web.Response:
    """Send ``response`` and close the connection at once: a stalled client gets no
    lingering time to keep it open (aiohttp would otherwise read on for a while)."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()
    return response


@web.middleware
async def tap_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error the tap answers is JSON: aiohttp's own (404, 405) and a bug's (500)."""
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _error(exc.status, exc.reason.lower().replace(" ", "_"), exc.reason)
    except Exception as exc:
        if client_gone(request):  # closed mid-body: nobody to answer, nothing to log (sidecar.api.listener)
            raise
        # The type only: the message of an unexpected error may echo an exchange's content.
        log.error("tap request failed unexpectedly: %s", type(exc).__name__)
        request.app[TAP_CONTEXT].counters.tap_failed += 1
        return _error(500, "internal_error", "the tap failed to handle the request; it was not ingested")


async def tap_healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def tap_app(rt: Runtime) -> web.Application:
    """The tap's routes; serve them with :func:`tap_runner` (it decodes gzip itself)."""
    app = web.Application(client_max_size=rt.config.tap.max_body_bytes, middlewares=[tap_errors])
    app[TAP_CONTEXT] = TapContext(intake=rt, tap=rt.config.tap, token=rt.tap_token, counters=rt.counters,
                                  plugin_stats=rt.plugin_stats)
    if rt.config.tap.gateway_jwt:
        from sidecar.api.authn import build_verifier

        verifier = build_verifier(rt.config.auth)  # the [auth] keys; re-read on change like the admin's
        if verifier is not None:
            app[GATEWAY_VERIFIER] = verifier
    app.router.add_post("/v1/exchanges", post_exchanges)
    app.router.add_post("/v1/integrations/litellm", post_litellm)
    app.router.add_get("/healthz", tap_healthz)
    app.router.add_post("/v1/traces", traces_handler(_otlp_hooks(), rt.config.otlp))
    return app


def _otlp_hooks() -> TapHooks:
    """The OTLP receiver (sidecar.api.otlp_route) with this tap's credentials, body reader and errors."""
    def ctx(request: web.Request) -> TapContext:
        return request.app[TAP_CONTEXT]

    return TapHooks(
        intake=lambda r: ctx(r).intake,
        gateway=lambda r: _gateway(r, ctx(r)),
        body=lambda r: _body_or_refusal(r, ctx(r)),
        malformed=lambda r: ctx(r).counters.tap_rejected("malformed"),
        spans=lambda r, outcomes: ctx(r).counters.otlp_spans(outcomes),
        error=lambda status, code, message, field: _error(status, code, message, field),
    )


def tap_runner(rt: Runtime) -> web.AppRunner:
    """The tap's runner (:mod:`sidecar.api.listener`): the idle timeout on its connections,
    parser errors answered in JSON without echoing the request, gzip left to the handler.

    aiohttp arms its keep-alive timer when a connection is made and after each
    answer, and closes the connection when it fires while no request is
    complete, so ``idle_timeout_seconds`` bounds idle connections and unfinished
    headers alike. After an answer given before the body was read (401, 413),
    aiohttp reads on for at most ``min(read_timeout_seconds, 10)`` s so the client sees
    the answer rather than a reset. The handler bounds its body read itself (``408
    read_timeout``, counted) and decompresses bodies itself, bounded by ``max_body_bytes``
    (``client_max_size`` then bounds the compressed bytes)."""
    tap = rt.config.tap
    listener = Listener("tap", read_timeout_s=tap.read_timeout_seconds, idle_timeout_s=tap.idle_timeout_seconds,
                        bound_body_reads=False)
    return ListenerRunner(tap_app(rt), listener, auto_decompress=False)
