"""The one thing the judge needs from the outside world: a way to ask a model.

The judge owns this Protocol so that it never imports the sidecar. The sidecar
adapts its provider clients to it; tests use :class:`ScriptedCompleter`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence


@dataclass(frozen=True, slots=True)
class Completion:
    """The outcome of one model call, success or failure, as a value.

    ``ok`` False means no usable text came back; ``error`` then names why
    (``timeout``, ``http_429``, ``http_5xx``, ``connection``, ``malformed`` …).
    Token counts are None when the provider did not report them.
    """

    ok: bool
    text: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None
    error: str | None = None
    latency_ms: float = 0.0
    #: A failed call that reached the provider and may have been billed (a timeout, an
    #: answer that could not be read): the spend ledger holds its worst case.
    may_have_billed: bool = False
    #: The answer came with usage figures that are not token counts (the counts are then
    #: None): the spend ledger charges the call's worst case as a disputed report.
    usage_disputed: bool = False


class Completer(Protocol):
    """Ask ``model`` to continue ``messages`` (OpenAI chat shape). Never raises for
    remote failures: they come back as ``Completion(ok=False, error=...)``."""

    async def complete(
        self,
        model: str,
        messages: Sequence[dict[str, object]],
        *,
        temperature: float,
        max_tokens: int,
    ) -> Completion: ...


@dataclass
class ScriptedCompleter:
    """A fake completer that returns scripted completions in order and records calls."""

    script: list[Completion]
    calls: list[dict[str, object]] = field(default_factory=list)

    async def complete(
        self,
        model: str,
        messages: Sequence[dict[str, object]],
        *,
        temperature: float,
        max_tokens: int,
    ) -> Completion:
        self.calls.append(
            {"model": model, "messages": list(messages), "temperature": temperature, "max_tokens": max_tokens}
        )
        if not self.script:
            return Completion(ok=False, error="script_exhausted")
        return self.script.pop(0)
