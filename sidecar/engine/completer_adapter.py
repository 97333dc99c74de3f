"""Adapts a provider client to the judge's :class:`judge.completer.Completer`."""

from __future__ import annotations

from typing import Mapping, Sequence

from judge.completer import Completion
from sidecar.providers.base import ChatRequest, Provider


class ProviderCompleter:
    """Sends judge calls to ``provider`` as ``upstream_model``, tagged as shadow traffic."""

    def __init__(self, provider: Provider, upstream_model: str, headers: Mapping[str, str]) -> None:
        self._provider = provider
        self._upstream = upstream_model
        self._headers = dict(headers)

    async def complete(
        self,
        model: str,
        messages: Sequence[dict[str, object]],
        *,
        temperature: float,
        max_tokens: int,
    ) -> Completion:
        result = await self._provider.chat(
            ChatRequest(
                model=self._upstream,
                messages=[dict(m) for m in messages],
                params={"temperature": temperature, "max_tokens": max_tokens},
                headers=self._headers,
            )
        )
        if not result.ok:
            return Completion(
                ok=False,
                error=result.error or "failed",
                input_tokens=result.input_tokens,
                output_tokens=result.output_tokens,
                latency_ms=result.latency_ms,
                may_have_billed=result.may_have_billed,
                usage_disputed=result.usage_disputed,
            )
        return Completion(
            ok=True,
            text=result.content or "",
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            latency_ms=result.latency_ms,
            usage_disputed=result.usage_disputed,
        )
