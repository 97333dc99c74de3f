"""The operator console: server-rendered pages on the admin listener, under ``/console/``.

Pages are Jinja2 templates (autoescaped: nothing an operator or a gateway sent is ever
read as HTML) over the very services the admin API calls (:mod:`sidecar.services`),
with the very principal (:mod:`sidecar.console.session`), so the console can do nothing
the API would refuse. Charts are SVG drawn on the server; the one script
(``static/console.js``) only refreshes regions while the tab is visible. Every asset is
this package's own file: no page reaches beyond the sidecar.

Modules: :mod:`.app` (the sub-application, its middleware and HTML errors),
:mod:`.session` (login cookie, CSRF), :mod:`.pages` (handlers), :mod:`.forms` (form
fields to the API's bodies), :mod:`.chart` (the decision-bounds chart), :mod:`.slots`
(actions whose API lands later, such as Promote), :mod:`.fmt` (template filters).
"""

from __future__ import annotations

from sidecar.console.app import CONSOLE_PREFIX, console_app

__all__ = ["CONSOLE_PREFIX", "console_app"]
