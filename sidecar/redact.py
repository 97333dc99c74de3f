"""Content-free descriptions of errors, for logs and stored case errors.

An exception's message can echo what it choked on — a request parameter, a piece of a
prompt (``invalid literal for int() with base 10: 'CANARY…'``) — and a retention-off
team's content must never reach a log line, a trace or the store (DESIGN.md rule 9).
So errors raised while handling an exchange are described by their type and the
place they were raised, never by their message.
"""

from __future__ import annotations

import os
import traceback


def describe(exc: BaseException) -> str:
    """``ValueError at case.py:123``: the type and the innermost frame, no message."""
    frames = traceback.extract_tb(exc.__traceback__) if exc.__traceback__ is not None else []
    if not frames:
        return type(exc).__name__
    last = frames[-1]
    return f"{type(exc).__name__} at {os.path.basename(last.filename)}:{last.lineno}"
