"""``POST /v1/traces`` on the tap: an OTLP/HTTP traces receiver whose GenAI chat spans feed trials.

The tap (:mod:`sidecar.api.tap`) registers it with its own credential check and body reader
(:class:`TapHooks`), so the receiver has the tap's authentication, body limits, gzip and
JSON errors. Its answers, as the OTLP/HTTP specification says:

- ``200`` with an ``ExportTraceServiceResponse`` in the request's encoding (protobuf or
  JSON); spans that could not be taken (no team, a chat span without a model, content that
  is not what its convention says, a team the gateway JWT does not cover) are counted in
  ``partial_success.rejected_spans`` with the first reasons in ``error_message``; with none
  rejected, spans without message content are reported there as a warning;
- ``400 invalid_otlp`` — the body does not decode (``{"error": {"code","message","field"}}``);
- ``415 unsupported_media_type`` — a content type other than ``application/x-protobuf`` or
  ``application/json``; the tap's own ``401``/``403``/``408``/``413``/``415 unsupported_encoding``.

Spans are read by :mod:`sidecar.ingest.genai_spans` (sampling before content), then handed
to intake's :func:`~sidecar.ingest.intake.offer` like any exchange: a span without content
is counted ``skipped_redacted`` per trial, an unsampled one ``not_sampled``; every span is
counted by outcome in ``shadowtrial_otlp_spans_total``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Awaitable, Callable, Mapping

from aiohttp import web

from sidecar.config.otlp import OtlpConfig
from sidecar.ingest.genai_spans import read_spans
from sidecar.ingest.claims import Claim
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.intake import ExchangeBuffer, IntakeCounts, IntakeParts, offer
from sidecar.ingest.journal import Journal
from sidecar.ingest.routing import Routes, RoutingTable
from sidecar.ingest.screen import Screened
from sidecar.ingest.wire import DecodeError

Gateway = Callable[[web.Request], "frozenset[str] | None | web.Response"]


@dataclass(frozen=True, slots=True)
class TapHooks:
    """What the receiver takes from the tap: intake's parts, its credential check, its body
    reader (gzip and limits; an answered refusal instead of bytes), its refusal counter and
    its JSON error builder."""

    intake: Callable[[web.Request], IntakeParts]
    gateway: Gateway
    body: Callable[[web.Request], Awaitable["bytes | web.StreamResponse"]]
    malformed: Callable[[web.Request], None]
    #: Spans by outcome (:data:`sidecar.telemetry.names.OTLP_SPAN_OUTCOMES`) into the process's counts.
    spans: Callable[[web.Request, Mapping[str, int]], None]
    error: Callable[[int, str, str, "str | None"], web.Response]


def traces_handler(hooks: TapHooks, settings: OtlpConfig) -> Callable[
        [web.Request], Awaitable[web.StreamResponse]]:
    """The ``POST /v1/traces`` handler."""

    async def post_traces(request: web.Request) -> web.StreamResponse:
        # The OTLP codec (protobuf) is imported by the first export, not when the sidecar starts.
        from sidecar.ingest.otlp import decode_request, encode_response, encoding_of, media_type

        teams = hooks.gateway(request)
        if isinstance(teams, web.Response):
            return teams
        encoding = encoding_of(request.content_type)
        if encoding is None:
            hooks.malformed(request)
            return hooks.error(415, "unsupported_media_type",
                               "OTLP/HTTP takes application/x-protobuf or application/json", "Content-Type")
        body = await hooks.body(request)
        if isinstance(body, web.StreamResponse):
            return body
        try:
            export = decode_request(body, encoding)
        except DecodeError as exc:
            hooks.malformed(request)
            return hooks.error(400, "invalid_otlp", str(exc), exc.path)
        parts = hooks.intake(request)
        routes = parts.routing.current
        decode_all = parts.retention is not None  # the retention window keeps every exchange's content
        batch = read_spans(export, routes, settings, jwt_teams=teams, decode_all=decode_all)
        refused = offer(_Pinned(parts, routes, retention=True), batch.screened(), teams).refused
        if batch.skeletons:  # not sampled by any trial, or without content: counted, never run
            skeletons = Screened(batch.skeletons, Counter())
            refused += offer(_Pinned(parts, routes, retention=False), skeletons, teams).refused
        hooks.spans(request, {**batch.outcomes, "refused": refused} if refused else batch.outcomes)
        rejected = batch.rejected + refused
        reasons = list(batch.reasons.values())
        if refused:
            reasons.append(f"{refused} for a team the gateway's credential does not cover")
        if rejected:
            message = f"{rejected} span(s) rejected: " + "; ".join(reasons)
        elif batch.outcomes["skipped_redacted"]:
            message = (f"{batch.outcomes['skipped_redacted']} GenAI span(s) without message content were skipped "
                       "(turn content capture on to run trials on them)")
        else:
            message = ""
        return web.Response(status=200, body=encode_response(encoding, rejected, message),
                            content_type=media_type(encoding))

    return post_traces


class _Pinned:
    """Intake's parts with the routing table read once for the request (so the sampling decided
    on skeletons is the one intake applies), and, for skeletons, no retention window (a
    skeleton has no content to keep)."""

    __slots__ = ("_parts", "_routing", "_retention")

    def __init__(self, parts: IntakeParts, routes: Routes, *, retention: bool) -> None:
        self._parts = parts
        self._routing = _FixedTable(routes)
        self._retention = parts.retention if retention else None

    @property
    def routing(self) -> RoutingTable:
        return self._routing  # type: ignore[return-value]  # intake reads .current only

    @property
    def sinks(self) -> Mapping[str, Handoff[Claim]]:
        return self._parts.sinks

    @property
    def journals(self) -> Mapping[str, Journal]:
        return self._parts.journals

    @property
    def funnel(self) -> FunnelCounter:
        return self._parts.funnel

    @property
    def counters(self) -> IntakeCounts:
        return self._parts.counters

    @property
    def retention(self) -> ExchangeBuffer | None:
        return self._retention

    @property
    def outbox_full(self) -> bool:
        return self._parts.outbox_full


@dataclass(frozen=True, slots=True)
class _FixedTable:
    current: Routes
