"""The admin API's authentication middleware (docs/security.md).

Registered first, so that it runs before any other middleware or handler: every request
but the content-free ``/healthz``, ``/readyz``, ``/metrics`` and ``/openapi.json`` must
carry exactly one ``Authorization: Bearer <JWT>`` that :class:`sidecar.auth.verify.Verifier`
accepts; otherwise the answer is ``401 unauthorized`` (field ``Authorization``) with
``WWW-Authenticate: Bearer`` and nothing else runs. An accepted request carries its
:class:`~policies.roles.Principal` as ``request[PRINCIPAL]``; with ``auth.mode = "off"``
(loopback only) that is :data:`~policies.roles.LOCAL_DEVELOPMENT`. The log says why a
token was refused (its ``reason``), never the token.
"""

from __future__ import annotations

import logging
from typing import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from policies.roles import LOCAL_DEVELOPMENT, Principal
from sidecar.api.principal import PRINCIPAL
from sidecar.auth.errors import KeyLoadError, Unauthorized
from sidecar.auth.revocations import Revocations
from sidecar.auth.keys import JwksSource, KeySet, PemSource, Source
from sidecar.auth.verify import Verifier
from sidecar.config import AuthConfig
from sidecar.errors import StartupError
from sidecar.ingest.wire import encode

log = logging.getLogger("shadowtrial.auth")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Paths any caller may read: content-free, and needed by probes and scrapers.
PUBLIC_PATHS = frozenset(("/healthz", "/readyz", "/metrics", "/openapi.json"))
#: A browser asks for it on every page it opens; answered 204 without a principal, never 401 (issue 28).
FAVICON = "/favicon.ico"
#: The admin app's verifier (None: authentication off), for reloading its keys.
VERIFIER = web.AppKey("verifier", Verifier)


def build_verifier(auth: AuthConfig) -> Verifier | None:
    """The verifier ``auth`` configures, keys loaded; None when ``auth.mode`` is off. A key that
    cannot be loaded is :class:`StartupError` naming its setting."""
    if auth.mode == "off":
        return None
    sources: list[Source] = [
        PemSource(k.path, k.algorithms, k.kid, k.allow_no_kid, f"auth.keys[{i}]") for i, k in enumerate(auth.keys)
    ]
    if auth.jwks:
        sources.append(JwksSource(auth.jwks, auth.jwks_algorithms))
    try:
        keys = KeySet(sources)
    except KeyLoadError as exc:
        raise StartupError(str(exc)) from exc
    log.info("admin authentication: JWT, %d key(s), audience %r, issuer %r", len(keys.keys()), auth.audience,
             auth.issuer)
    return Verifier(keys, audience=auth.audience, issuer=auth.issuer, leeway_s=auth.leeway_seconds)


def announce(auth: AuthConfig) -> None:
    """Say at start-up, loudly, when the admin API has no authentication (once the listeners
    are up: a start-up that fails says only why)."""
    if auth.mode == "off":
        log.warning("ADMIN AUTHENTICATION IS OFF (auth.mode = \"off\"): every admin request acts as "
                    "platform_admin. Local development only; the admin listener is on loopback.")


def unauthorized(message: str) -> web.Response:
    body = {"error": {"code": "unauthorized", "message": message, "field": "Authorization"}}
    return web.Response(status=401, body=encode(body), content_type="application/json",
                        headers={"WWW-Authenticate": 'Bearer realm="shadowtrial"'})


def authenticate(verifier: Verifier, revocations: Revocations | None, values: list[str]) -> Principal:
    """The principal of a request's ``Authorization`` header values; :class:`Unauthorized` otherwise.
    The one check the API and the console (its session cookie read as a bearer token) share."""
    if len(values) > 1:
        raise Unauthorized("malformed", "give one Authorization header")
    principal = verifier.authenticate(values[0] if values else None)
    if revocations is not None and revocations.revoked(principal.subject):
        raise Unauthorized("revoked", "the token's subject is revoked")
    return principal


def delegated_path(path: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``path`` is ``prefix`` or under ``prefix/`` for one of ``prefixes``."""
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def authn_middleware(
    verifier: Verifier | None, revocations: Revocations | None = None, *, delegated: tuple[str, ...] = ()
) -> Middleware:
    """``revocations``: subjects whose tokens are refused even while valid (``auth.revoked_subjects_file``).
    ``delegated``: path prefixes whose own middleware authenticates with the same verifier and
    revocations (the console, :mod:`sidecar.console.session`: a bearer header or its session
    cookie, answering HTML); nothing under them runs unauthenticated but its login page and
    static assets."""

    @web.middleware
    async def authn(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == FAVICON and request.method in ("GET", "HEAD"):
            return web.Response(status=204, headers={"Cache-Control": "public, max-age=86400"})
        # The raw path decides delegation, as it decides routing: "/console%2f..%2fv1" is not the console's.
        if request.path in PUBLIC_PATHS or delegated_path(request.rel_url.raw_path, delegated):
            return await handler(request)
        if verifier is None:
            request[PRINCIPAL] = LOCAL_DEVELOPMENT
            return await handler(request)
        try:
            principal = authenticate(verifier, revocations, request.headers.getall("Authorization", []))
        except Unauthorized as exc:
            log.info("admin %s %s: token refused (%s)", request.method, request.path, exc.reason)
            return unauthorized(exc.message)
        request[PRINCIPAL] = principal
        return await handler(request)

    return authn


def reload_keys(app: web.Application | None) -> None:
    """Re-read the admin app's keys now (SIGHUP); a no-op with authentication off."""
    verifier = app.get(VERIFIER) if app is not None else None
    if verifier is not None:
        verifier.reload()
