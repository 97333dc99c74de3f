"""Simulated gateway traffic for ``shadowtrial send --simulate``: exchanges as the demo's
gateway serves them, without a gateway.

Each exchange is a user request on one of the demo's topics and the answer the incumbent
served, carrying the fake provider's quality marker (``⟨q=0.55⟩``, drawn from the demo's
incumbent: quality 0.55 ± 0.12), so a sidecar judging with the fake provider's judge sees
the demo's planted gap against ``sim-candidate-small``. The answer is made here, not asked
of a provider: the incumbent is never called, by the sidecar or by this generator.
Exchange ids carry a ``run`` prefix, so a second run is new traffic, not duplicates.
"""

from __future__ import annotations

import datetime as _dt
import random
from collections.abc import Iterator
from typing import Any

from sidecar.demo.fake_provider import FakeModel, generation_text
from sidecar.demo.scenario import INCUMBENT, TOPICS, demo_models

#: What ``--simulate`` serves by default: the demo's incumbent, as the fake provider names it.
DEFAULT_MODEL = INCUMBENT
DEFAULT_GATEWAY = "sim-gateway"


def incumbent_spec(quality: float | None = None) -> FakeModel:
    """The demo's incumbent, or one whose planted quality is ``quality`` (same noise)."""
    spec = demo_models()[INCUMBENT]
    if quality is None:
        return spec
    return FakeModel(quality=quality, quality_noise=spec.quality_noise, latency_ms=spec.latency_ms,
                     filler_words=spec.filler_words)


def simulated_exchanges(
    *, team: str, count: int, run: str, model: str = DEFAULT_MODEL, gateway: str = DEFAULT_GATEWAY,
    route: str | None = None, quality: float | None = None, seed: int = 7,
) -> Iterator[dict[str, Any]]:
    """``count`` exchanges of ``team`` served by ``model``, ids ``sim-<run>-<i>``; the same
    ``seed`` draws the same prompts, answers and latencies."""
    spec = incumbent_spec(quality)
    rng = random.Random(seed)
    for i in range(count):
        messages = [{"role": "user", "content": f"{rng.choice(TOPICS)} (request {i})"}]
        answer = generation_text(model, spec, rng)
        latency = rng.uniform(*spec.latency_ms)
        exchange: dict[str, Any] = {
            "exchange_id": f"sim-{run}-{i}",
            "team": team,
            "gateway": gateway,
            "model": model,
            "request": {"messages": messages, "params": {"max_tokens": 400, "temperature": 0.2}},
            "response": {
                "content": answer,
                "finish_reason": "stop",
                # The fake provider's own count: about four bytes a token.
                "usage": {"input_tokens": -(-len(messages[0]["content"].encode()) // 4),
                          "output_tokens": -(-len(answer.encode()) // 4)},
            },
            "served_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
            "latency_ms": round(latency, 1),
        }
        if route is not None:
            exchange["route"] = route
        yield exchange
