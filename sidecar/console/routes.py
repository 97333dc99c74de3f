"""The console's sub-application: every screen family's routes registered in one place.

The screen modules (:mod:`.pages`, :mod:`.watch_pages`, :mod:`.compare_pages`) import the
shared helpers of :mod:`.app`; this module, above them all, is the only one that imports
every screen, so no screen imports the module that registers it.
"""

from __future__ import annotations

from aiohttp import web

from sidecar.auth.revocations import Revocations
from sidecar.auth.verify import Verifier
from sidecar.console import compare_pages, pages, watch_pages
from sidecar.console.app import HERE, SHELL, STATE, Console, Shell, console_middleware, templates
from sidecar.console.session import Sessions


def console_app(console: Console, verifier: Verifier | None, revocations: Revocations | None) -> web.Application:
    """The console, to mount with ``admin.add_subapp(CONSOLE_PREFIX, ...)`` before any catch-all."""
    app = web.Application(middlewares=[console_middleware])
    app[SHELL] = Shell(Sessions(verifier, revocations), templates(), "sidecar", console.control_plane_console)
    app[STATE] = console
    watch_pages.add_routes(app.router)
    compare_pages.add_routes(app.router)
    pages.add_routes(app.router)
    app.router.add_static("/static", HERE / "static", append_version=False)
    app.router.add_route("*", "/{tail:.*}", pages.not_found)  # last: HTML, not the API's JSON 404
    return app
