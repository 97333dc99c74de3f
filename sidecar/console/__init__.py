"""The operator console: server-rendered pages on the admin listener, under ``/console/``.

Pages are Jinja2 templates (autoescaped: nothing an operator or a gateway sent is ever
read as HTML) over the very services the admin API calls (:mod:`sidecar.services`),
with the very principal (:mod:`sidecar.console.session`), so the console can do nothing
the API would refuse. Charts are SVG drawn on the server; the scripts are small files of
this package's own (no library). Every asset is this package's own file: no page reaches
beyond the sidecar (or, for the corpus pages, the control plane).

Modules: :mod:`.app` (the helpers every screen shares, the middleware and HTML errors),
:mod:`.routes` (the sub-application: every screen's routes),
:mod:`.session` (login cookie, CSRF), :mod:`.pages` (Live, Results, Trials, Teams, login),
:mod:`.watch_pages` (Promote, Watches, alert moves), :mod:`.compare_pages` (Compare),
the control plane's Datasets and Comparisons pages (:mod:`sidecar.collector.corpus.pages`, which use this package's templates),
:mod:`.forms` (form fields to the API's bodies), :mod:`.chart` (the decision-bounds chart,
the watch's detector gauge), :mod:`.slots` (whether Promote is offered, and why not),
:mod:`.fmt` (template filters). Scripts: ``console.js`` (refresh), ``compare.js`` (the
compare stream), ``upload.js`` (import progress), ``panels.js`` (side panels).
"""

from __future__ import annotations

from sidecar.console.app import CONSOLE_PREFIX, Console
from sidecar.console.routes import console_app

__all__ = ["CONSOLE_PREFIX", "Console", "console_app"]
