"""``/readyz``: whether this process is ready, and which of its workers is down.

Read by the sidecar's admin API and by the collector. 200 ``{"status": "ready"}`` while the
process runs and every supervised worker (:mod:`sidecar.supervise`) runs; otherwise 503 with
the error shape, whose ``error`` holds, when a worker is down, ``workers``: each worker that
died and is not running again, with its state (``restarting``: waiting for its backoff;
``failed``: the process stops and exits non-zero), the type of what ended it and where —
never a message or a payload.
"""

from __future__ import annotations

from typing import Any

from sidecar.supervise import Supervisor, Worker


def _said(w: Worker) -> str:
    what = w.last.error if w.last is not None else "died"
    where = f" at {w.last.place}" if w.last is not None and w.last.place else ""
    then = "restarting" if w.state == "restarting" else "the process exits"
    return f"{w.name} ({what}{where}; {then})"


def readiness(supervisor: Supervisor, *, ready: bool = True, reason: str = "") -> tuple[int, dict[str, Any]]:
    """The status and JSON body of ``/readyz``. ``ready``/``reason``: the owner's own state
    (starting, stopping); a down worker makes it 503 even while the owner says ready."""
    down = supervisor.down()
    named = {"workers": [w.view() for w in down]} if down else {}
    if not ready:
        return 503, {"error": {"code": "not_ready", "message": reason, "field": None, **named}}
    if down:
        message = "worker down: " + "; ".join(_said(w) for w in down)
        return 503, {"error": {"code": "worker_down", "message": message, "field": None, **named}}
    return 200, {"status": "ready"}
