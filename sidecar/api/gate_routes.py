"""Admin routes of the gates rollout controllers call (:mod:`sidecar.services.gates`, docs/promotion.md).

- ``GET /v1/trials/{trial_id}/gate`` and ``GET /v1/watches/{watch_id}/gate``: the documents
  Argo Rollouts' ``web`` metric reads; authenticated like every admin route (a bearer token;
  Argo's ``headers`` carry it).
- ``POST /v1/gates/flagger/confirm-promotion``, ``.../rollback``, ``.../pre-rollout`` and
  ``.../rollout``: Flagger's webhooks. A Flagger webhook sends no headers of its own, so these paths authenticate
  here rather than in the middleware (:data:`FLAGGER_PREFIX` is delegated): the ``Authorization``
  header when one is sent, else the token in the payload's ``metadata.token`` — verified by the
  same verifier and revocations, never logged or echoed. Without either, ``401`` as anywhere.
"""

from __future__ import annotations

import logging

from aiohttp import web

from policies.roles import LOCAL_DEVELOPMENT, Principal
from sidecar.api.authn import VERIFIER, authenticate, unauthorized
from sidecar.api.kit import GATES, Handler, _json, read_body
from sidecar.api.principal import principal_of
from sidecar.auth.errors import Unauthorized
from sidecar.auth.revocations import Revocations
from sidecar.errors import BadRequest
from sidecar.services.gates import FlaggerPayload, decode_flagger

log = logging.getLogger("shadowtrial.admin")

#: The Flagger webhooks' prefix: authenticated by :func:`_flagger_principal`, not the middleware.
FLAGGER_PREFIX = "/v1/gates/flagger"
#: The admin app's revocations, for the Flagger webhooks' own authentication.
REVOCATIONS = web.AppKey("gate_revocations", Revocations)


async def trial_gate(request: web.Request) -> web.Response:
    return _json(await request.app[GATES].trial(principal_of(request), request.match_info["trial_id"]))


async def watch_gate(request: web.Request) -> web.Response:
    return _json(await request.app[GATES].watch(principal_of(request), request.match_info["watch_id"]))


async def _flagger(request: web.Request) -> tuple[Principal, FlaggerPayload] | web.Response:
    """The caller and its payload, or the ``401`` to answer (the header first when one is sent)."""
    verifier = request.app.get(VERIFIER)
    revocations = request.app.get(REVOCATIONS)
    raw = await read_body(request)
    header = request.headers.getall("Authorization", [])
    try:
        if verifier is None:  # authentication off (loopback only), as for every route
            return LOCAL_DEVELOPMENT, decode_flagger(raw)
        if header:
            principal = authenticate(verifier, revocations, header)
            return principal, decode_flagger(raw)
        try:
            payload = decode_flagger(raw)
        except BadRequest:  # nothing about the body to an unauthenticated caller
            raise Unauthorized("missing", "a Flagger webhook authenticates with a bearer token: the "
                               "Authorization header, or metadata.token in its payload") from None
        token = payload.metadata.get("token")
        return authenticate(verifier, revocations, [f"Bearer {token}"] if token else []), payload
    except Unauthorized as exc:
        log.info("admin %s %s: token refused (%s)", request.method, request.path, exc.reason)
        return unauthorized(exc.message)


async def confirm_promotion(request: web.Request) -> web.Response:
    got = await _flagger(request)
    if isinstance(got, web.Response):
        return got
    principal, payload = got
    return _json(await request.app[GATES].confirm_promotion(principal, payload))


async def pre_rollout(request: web.Request) -> web.Response:
    got = await _flagger(request)
    if isinstance(got, web.Response):
        return got
    principal, payload = got
    return _json(await request.app[GATES].advance(principal, payload, "pre-rollout"))


async def rollout(request: web.Request) -> web.Response:
    got = await _flagger(request)
    if isinstance(got, web.Response):
        return got
    principal, payload = got
    return _json(await request.app[GATES].advance(principal, payload, "rollout"))


async def rollback(request: web.Request) -> web.Response:
    got = await _flagger(request)
    if isinstance(got, web.Response):
        return got
    principal, payload = got
    return _json(await request.app[GATES].rollback(principal, payload))


GATE_ROUTES: tuple[tuple[str, str, Handler], ...] = (
    ("GET", "/v1/trials/{trial_id}/gate", trial_gate),
    ("GET", "/v1/watches/{watch_id}/gate", watch_gate),
    ("POST", f"{FLAGGER_PREFIX}/confirm-promotion", confirm_promotion),
    ("POST", f"{FLAGGER_PREFIX}/rollback", rollback),
    ("POST", f"{FLAGGER_PREFIX}/pre-rollout", pre_rollout),
    ("POST", f"{FLAGGER_PREFIX}/rollout", rollout),
)
