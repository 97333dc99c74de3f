"""An exchange's segment keys (issue 27), from its metadata and its prompt's length only.

Used where an exchange is at hand: intake, to favour a trial's rare segments when sampling
(``segment_min_cases``), and the engine, to give a claimed case its segment values. Only
the count of the prompt's characters is read, never kept.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.segments import segment_key, segment_values
from sidecar.ingest.wire import Exchange


def prompt_chars(exchange: Exchange) -> int:
    """The prompt's length in characters (text contents of its messages)."""
    n = 0
    for message in exchange.request.messages:
        content = message.get("content")
        if isinstance(content, str):
            n += len(content)
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    n += len(part["text"])
    return n


def exchange_values(segments: Sequence[str], exchange: Exchange) -> tuple[tuple[str, str], ...]:
    """The (segment, value) pairs of ``exchange`` for ``segments``."""
    if not segments:
        return ()
    return segment_values(segments, route=exchange.route, model=exchange.model, gateway=exchange.gateway,
                          tags=exchange.tags, prompt_chars=prompt_chars(exchange) if "length" in segments else 0)


def exchange_keys(segments: Sequence[str], exchange: Exchange) -> list[str]:
    """The segment keys of ``exchange`` for ``segments`` (before any cap)."""
    return [segment_key(s, v) for s, v in exchange_values(segments, exchange)]
