"""Who is asking, as the admin handlers read it off a request.

The authentication middleware stores the verified :class:`~policies.roles.Principal`
under :data:`PRINCIPAL` (a typed ``web.RequestKey``: aiohttp warns on plain string
keys, and warnings are errors in the tests). Until that middleware is in place — and
whenever the admin API runs with authentication off, which is loopback only — no
principal is set, and the request is the local-development one, which passes every check.
"""

from __future__ import annotations

from aiohttp import web

from policies.roles import LOCAL_DEVELOPMENT, Principal

PRINCIPAL: web.RequestKey[Principal] = web.RequestKey("principal", Principal)


def principal_of(request: web.Request) -> Principal:
    """The request's principal: :data:`PRINCIPAL`, else a ``"principal"`` string key (accepted
    for a middleware written before the typed key), else :data:`~policies.roles.LOCAL_DEVELOPMENT`."""
    principal = request.get(PRINCIPAL) or request.get("principal", LOCAL_DEVELOPMENT)
    if not isinstance(principal, Principal):
        raise TypeError(f"the request's principal is a {type(principal).__name__}, not a Principal")
    return principal
