"""Confirmation of the console's irreversible actions (issue 26, item 4): stop a trial, stop a watch.

The first POST (the page's button) only asks: it answers a confirmation page whose own form
POSTs again with ``confirm=yes``, which acts. No script is needed (the console's CSP allows
only its own files), and a caller without the right gets the same ``403`` before any question.
"""

from __future__ import annotations

from aiohttp import web

from sidecar.console.app import form, render

CONFIRMED = "yes"


def confirmed(request: web.Request) -> bool:
    """Whether this write carries the confirmation page's ``confirm=yes``."""
    return form(request).get("confirm") == CONFIRMED


def ask(request: web.Request, *, heading: str, what: str, button: str, button_id: str, cancel: str,
        nav: str) -> web.Response:
    """The confirmation page of the write ``request`` is (its form POSTs to the same path)."""
    return render(request, "confirm.html", nav=nav, heading=heading, what=what, button=button,
                  button_id=button_id, action=request.path, cancel=cancel)
