"""The reference collector: an aiohttp app that receives uplink batches.

``POST /v1/uplink/batches``: verify the bearer token (:mod:`uplink.signing`:
EdDSA only, a known ``kid``, an allowed ``iss``, this collector's ``aud``,
``exp``) — else ``401``; gunzip within ``max_body_bytes`` — else ``413``;
decode the batch (:func:`uplink.schema.decode_batch`) — else ``400`` naming
the field; refuse ``exchange`` records of a team whose live posture (the latest
``posture`` record its sidecars sent, as in force at the record: the stored one,
then the batch's own in batch order) does not send its trials here, or — with ``content_teams`` set, or no posture heard for the team —
that is not listed there, as ``content_not_permitted`` (``403`` when every record of
the batch is such, the refused ids in the body); keep the rest once by id and
answer ``200`` with an :class:`~uplink.schema.Ack` naming exactly the ids it
now holds (stored now or before) and those it refused, and — with
``CollectorSettings.halted`` — the trials of the batch's exchanges it no longer
runs (``cap_reached``, stopped, paused), so the sender stops forwarding them.

``GET /v1/trials``: what it holds, per trial: the latest ``trial_state`` and
the count of case results per team; for a trial it runs itself (pinned to the
control plane, learnt from ``trial_spec`` records), ``control_plane``: its
status, funnel, spend and verdict from its own figures. Only the teams the
caller's token sees (``CollectorSettings.reader``; ``?team=`` narrows to one).

Errors are ``{"error": {"code", "message", "field"}}``; bad input never gets a 5xx.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Sequence

import msgspec
from aiohttp import web
from aiohttp.typedefs import Middleware

from uplink.collector_store import CollectorStore, Held
from uplink.schema import (
    CONTENT_KINDS,
    Ack,
    ExchangeRecord,
    PostureRecord,
    SchemaError,
    TrialSpec,
    TrialState,
    UnknownRecord,
    decode_batch,
    encode_record,
)
from uplink.signing import TokenRefused, Verifier


#: The teams a reader's request sees, or the response that refuses it (``401``).
Reader = Callable[[web.Request], "Callable[[str], bool] | web.Response"]


@dataclass(frozen=True)
class CollectorSettings:
    #: Teams whose posture allows content uplink: ``exchange`` records of any other team are refused.
    content_teams: frozenset[str] = frozenset()
    #: The most a batch may hold once decompressed (and, compressed, on the wire).
    max_body_bytes: int = 32 * 1024 * 1024
    #: Who may read what the collector holds (``GET /v1/trials``): given the request, the
    #: teams its caller sees (a predicate), or the refusal to answer. None: every team (a
    #: collector with no readers' authentication: loopback only).
    reader: Reader | None = None
    #: Of these trial ids, those the collector no longer runs, with their status there
    #: (:attr:`uplink.schema.Ack.trials`); None: the answer names none.
    halted: Callable[[Sequence[str]], Awaitable[dict[str, str]]] | None = None
    #: A team's live content posture as stored, from the ``posture`` records its sidecars send:
    #: (revision, content allowed), or None when none was heard (then ``content_teams`` alone
    #: decides). With it, a team's content is taken only while its posture says so, and — when
    #: ``content_teams`` is set — the team is listed there too (a second fence).
    content_posture: Callable[[str], Awaitable[tuple[int, bool] | None]] | None = None


VERIFIER: web.AppKey[Verifier] = web.AppKey("uplink_verifier", Verifier)
STORE: web.AppKey[CollectorStore] = web.AppKey("uplink_store", object)  # type: ignore[arg-type]
SETTINGS: web.AppKey[CollectorSettings] = web.AppKey("uplink_settings", CollectorSettings)

_json = msgspec.json.Encoder()


def _error(status: int, code: str, message: str, field: str | None = None, **extra: Any) -> web.Response:
    body: dict[str, Any] = {"error": {"code": code, "message": message, "field": field}}
    body.update(extra)
    return web.Response(status=status, body=_json.encode(body), content_type="application/json")


def collector_app(
    store: CollectorStore, verifier: Verifier, settings: CollectorSettings, *, middlewares: Sequence[Middleware] = ()
) -> web.Application:
    """The collector's app; the caller owns and closes ``store``. Run it with
    ``web.AppRunner(app, auto_decompress=False)``: the handler gunzips the body
    itself, bounded by ``max_body_bytes``, and answers a bad one with JSON."""
    app = web.Application(client_max_size=settings.max_body_bytes, middlewares=middlewares)
    app[STORE] = store
    app[VERIFIER] = verifier
    app[SETTINGS] = settings
    app.router.add_post("/v1/uplink/batches", receive_batch)
    app.router.add_get("/v1/trials", list_trials)
    app.router.add_get("/healthz", _healthz)
    return app


async def _healthz(_request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


def _gunzip(data: bytes, limit: int) -> bytes | None:
    """The decompressed body, or None when it would exceed ``limit``. Raises ``zlib.error``."""
    d = zlib.decompressobj(wbits=31)
    out = d.decompress(data, limit + 1)
    if len(out) > limit or d.unconsumed_tail:
        return None
    return out + d.flush()


def _held(record: Any, sidecar_id: str, now: float) -> Held:
    if isinstance(record, UnknownRecord):
        return Held(record.id, record.kind, sidecar_id, record.raw, now)
    kind = type(record).__struct_config__.tag
    team = getattr(record, "team", None)
    trial = getattr(record, "trial_id", None)
    revision = record.revision if isinstance(record, (TrialState, TrialSpec, PostureRecord)) else None
    exchange = record.exchange_id if isinstance(record, ExchangeRecord) else None
    return Held(record.id, str(kind), sidecar_id, encode_record(record), now, team, trial, revision, exchange)


async def receive_batch(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS]
    try:
        request.app[VERIFIER].verify(request.headers.get("Authorization"))
    except TokenRefused as exc:
        return _error(401, exc.code, str(exc), exc.field)
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _error(413, "body_too_large", f"a batch may be at most {settings.max_body_bytes} bytes", "body")
    encoding = request.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding == "gzip":
        try:
            body = _gunzip(raw, settings.max_body_bytes)
        except zlib.error:
            return _error(400, "bad_encoding", "the body is not valid gzip", "Content-Encoding")
        if body is None:
            return _error(413, "body_too_large", f"a batch may be at most {settings.max_body_bytes} bytes "
                          "decompressed", "body")
    elif encoding == "identity":
        body = raw
    else:
        return _error(415, "unsupported_encoding", "Content-Encoding must be gzip or identity", "Content-Encoding")
    try:
        batch, records = decode_batch(body)
    except SchemaError as exc:
        if exc.field == "schema":
            return _error(409, "schema_unsupported", str(exc), "schema")
        return _error(400, "invalid_batch", str(exc), exc.field)
    now = time.time()
    keep: list[Held] = []
    refused: dict[str, str] = {}
    # The posture in force at each record: the stored one, then the batch's own posture records
    # in batch order (a sidecar's outbox order), so an exchange forwarded before its team's
    # posture changed is judged on the posture it was sent under.
    live: dict[str, tuple[int, bool] | None] = {}
    for record in records:
        if isinstance(record, PostureRecord):
            current = await _live(settings, live, record.team)
            if current is None or record.revision > current[0]:
                live[record.team] = (record.revision, record.site == "control_plane")
        elif isinstance(record, ExchangeRecord) or (
            not isinstance(record, UnknownRecord) and type(record).__struct_config__.tag in CONTENT_KINDS
        ):
            team = getattr(record, "team", None)
            if not _content_allowed(settings, team, None if team is None else await _live(settings, live, team)):
                refused[record.id] = "content_not_permitted"
                continue
        keep.append(_held(record, batch.sidecar_id, now))
    if records and not keep:
        return _error(403, "content_not_permitted",
                      "every record of the batch carries content of a team whose posture does not allow it",
                      "records", refused=refused)
    if keep:
        await request.app[STORE].put(keep)
    halted: dict[str, str] = {}
    forwarded = sorted({r.trial_id for r in records if isinstance(r, ExchangeRecord)})
    if forwarded and settings.halted is not None:
        halted = await settings.halted(forwarded)
    ack = Ack(acked=[h.id for h in keep], refused=refused, trials=halted)
    return web.Response(body=_json.encode(ack), content_type="application/json")


async def _live(settings: CollectorSettings, live: dict[str, tuple[int, bool] | None],
                team: str) -> tuple[int, bool] | None:
    if team not in live:
        live[team] = None if settings.content_posture is None else await settings.content_posture(team)
    return live[team]


def _content_allowed(settings: CollectorSettings, team: str | None, live: tuple[int, bool] | None) -> bool:
    """The live posture first (see :attr:`CollectorSettings.content_posture`), the static list
    as a second fence when set, or alone when no posture was heard for the team."""
    if team is None:
        return False
    fenced = team in settings.content_teams
    if live is None:
        return fenced
    return live[1] and (fenced or not settings.content_teams)


async def list_trials(request: web.Request) -> web.Response:
    reader = request.app[SETTINGS].reader
    sees = reader(request) if reader is not None else None
    if isinstance(sees, web.Response):
        return sees
    wanted = request.query.get("team")
    out = []
    for r in await request.app[STORE].trials():
        team = _team_of(r)
        if (sees is not None and (team is None or not sees(team))) or (wanted is not None and team != wanted):
            continue
        item = {"trial_id": r["trial_id"], "team": team, "case_results": r["case_results"],
                "state": msgspec.Raw(r["state"]) if r["state"] is not None else None}
        if r.get("control_plane") is not None:
            item["control_plane"] = r["control_plane"]
        out.append(item)
    return web.Response(body=_json.encode({"trials": out}), content_type="application/json")


def _team_of(row: dict[str, Any]) -> str | None:
    """A held trial's team: from its latest state, its control-plane copy, or its case results."""
    if row.get("state") is not None:
        team = msgspec.json.decode(row["state"]).get("team")
        if isinstance(team, str):
            return team
    copy = row.get("control_plane")
    if isinstance(copy, dict) and isinstance(copy.get("team"), str):
        return str(copy["team"])
    teams = list(row.get("case_results") or {})
    return teams[0] if len(teams) == 1 else None



