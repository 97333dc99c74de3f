"""Who is at the browser, and whether a write really comes from a console form.

Authentication is the API's (:func:`sidecar.api.authn.authenticate`, same verifier, same
revocations, same :class:`~policies.roles.Principal`), read from, in order:

1. an ``Authorization: Bearer`` header (an authenticating proxy, or a script);
2. the session cookie :data:`SESSION_COOKIE`, which holds the very JWT the login form
   was given (HttpOnly, SameSite=Strict, path ``/console``; ``Secure`` behind TLS). The
   cookie is the token: it expires with it, and a revoked subject's cookie stops working
   at once.

With ``auth.mode = "off"`` every request is :data:`~policies.roles.LOCAL_DEVELOPMENT`,
as on the API. A page without a principal redirects to the login form; the login form
and the static assets are the only things served without one.

CSRF. Every console response makes sure the browser holds :data:`BROWSER_COOKIE` (a
random id, HttpOnly, SameSite=Strict). A form's token is an HMAC of that id under a key
drawn when the app starts; every write (any method but GET/HEAD) must carry the cookie
and the matching ``csrf`` form field (a script's JSON or upload write: the
``X-CSRF-Token`` header), and a cross-origin ``Origin`` is refused
whatever it carries. A forged write is ``403`` before anything is decoded; a write the
principal's roles do not carry is then refused by the service (``403``), as on the API.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from aiohttp import web

from policies.roles import LOCAL_DEVELOPMENT, Principal
from sidecar.api.authn import authenticate
from sidecar.auth.errors import Unauthorized
from sidecar.auth.revocations import Revocations
from sidecar.auth.verify import Verifier

SESSION_COOKIE = "shadowtrial_session"
BROWSER_COOKIE = "shadowtrial_browser"
CSRF_FIELD = "csrf"
SAFE_METHODS = frozenset(("GET", "HEAD"))


@dataclass(frozen=True, slots=True)
class Who:
    """A console request's principal (None: nobody signed in) and how it was established."""

    principal: Principal | None
    #: "off" (authentication off), "header", "cookie" or "none".
    via: str
    #: Why a presented token was refused (shown on the login page), else None.
    refused: str | None = None


class Sessions:
    """Principals from requests, and CSRF tokens, for one admin app (one key per process)."""

    def __init__(self, verifier: Verifier | None, revocations: Revocations | None, *, key: bytes | None = None) -> None:
        self.verifier = verifier
        self.revocations = revocations
        self._key = key if key is not None else secrets.token_bytes(32)

    @property
    def auth_on(self) -> bool:
        return self.verifier is not None

    def who(self, request: web.Request) -> Who:
        if self.verifier is None:
            return Who(LOCAL_DEVELOPMENT, "off")
        headers = request.headers.getall("Authorization", [])
        if headers:
            try:
                return Who(authenticate(self.verifier, self.revocations, headers), "header")
            except Unauthorized as exc:
                return Who(None, "header", exc.message)
        token = request.cookies.get(SESSION_COOKIE)
        if token:
            try:
                return Who(authenticate(self.verifier, self.revocations, [f"Bearer {token}"]), "cookie")
            except Unauthorized as exc:
                return Who(None, "cookie", exc.message)
        return Who(None, "none")

    def login(self, token: str) -> Principal:
        """The principal of a pasted token, or :class:`Unauthorized`."""
        if self.verifier is None:
            return LOCAL_DEVELOPMENT
        return authenticate(self.verifier, self.revocations, [f"Bearer {token.strip()}"])

    # -- CSRF ------------------------------------------------------------------------

    def csrf_token(self, browser_id: str) -> str:
        return hmac.new(self._key, browser_id.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, request: web.Request, submitted: str | None) -> bool:
        browser = request.cookies.get(BROWSER_COOKIE)
        if not browser or not submitted:
            return False
        return hmac.compare_digest(self.csrf_token(browser), submitted)


def same_origin(request: web.Request) -> bool:
    """False when the request names an ``Origin`` other than the one it was sent to."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    return origin == f"{request.scheme}://{request.host}"


def new_browser_id() -> str:
    return secrets.token_urlsafe(24)


def set_cookie(response: web.StreamResponse, request: web.Request, name: str, value: str) -> None:
    response.set_cookie(name, value, path="/console", httponly=True, samesite="Strict", secure=request.secure)


def clear_cookie(response: web.StreamResponse, name: str) -> None:
    response.del_cookie(name, path="/console")
