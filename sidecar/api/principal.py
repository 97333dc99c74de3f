"""Who is asking, as the admin handlers read it off a request.

The authentication middleware (:mod:`sidecar.api.authn`) stores the verified
:class:`~policies.roles.Principal` under :data:`PRINCIPAL` (a typed ``web.RequestKey``:
aiohttp warns on plain string keys), or :data:`~policies.roles.LOCAL_DEVELOPMENT` when
authentication is off (loopback only). There is no other default: a handler never runs
as somebody it was not told.
"""

from __future__ import annotations

from aiohttp import web

from policies.roles import Principal

PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


def principal_of(request: web.Request) -> Principal:
    """The request's principal, as the authentication middleware (``sidecar.api.authn``) set it
    — the local-development one when authentication is off. A request that reached a handler
    without one is a wiring defect: it fails (500) rather than passing as anybody."""
    principal = request.get(PRINCIPAL)
    if not isinstance(principal, Principal):
        raise RuntimeError("no principal on the request: the authentication middleware did not run")
    return principal
