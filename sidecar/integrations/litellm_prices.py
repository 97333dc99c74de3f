"""Is LiteLLM's cost for a call the deployment's price, or one a caller slipped in?

LiteLLM 1.80.0 lets any caller re-price a model for the whole proxy process: a request
body with ``input_cost_per_token`` and ``output_cost_per_token`` makes ``litellm.main``
call ``register_model``, which overwrites the model's entry in ``litellm.model_cost``.
Every later call of that model, whoever makes it, is then priced at the caller's figures,
and nothing in the logged payload shows it (checked on a real proxy: $0.000366 became
$45.00 for another team's call). So the plugin checks each positive cost against the
deployment's *known* price:

1. the deployment's own ``model_info`` prices (set by LiteLLM's router from the config,
   from ``model_info`` or ``litellm_params``; a request cannot change them, and LiteLLM
   prices such a deployment by them);
2. else LiteLLM's price map as it stood when the plugin was built, at the proxy's start,
   before any request (:func:`snapshot_prices`), found under the payload's
   ``model_map_information``.

A cost outside :data:`LOW`..:data:`HIGH` times tokens × that price is *disputed*: it is not
sent, so the sidecar prices the call itself (the trial's price) or calls it unknown. The
band is wide on purpose: LiteLLM's own figure legitimately departs from tokens × list
price — cached input costs as little as a tenth, long-context tiers up to twice. A cost
with no known price to compare with is sent as it is (docs/litellm.md says what the
sidecar then trusts). Standard library only: this runs in the gateway's process.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Mapping

#: A reported cost is disputed below LOW or above HIGH times the known price's cost.
LOW = 0.1
HIGH = 2.0
#: Absolute slack in US dollars, for float rounding of tiny costs.
SLACK_USD = 1e-9

Prices = Mapping[str, tuple[float, float]]


def _price(value: Any) -> float | None:
    """A per-token price as LiteLLM keeps it: a finite number >= 0, or (from YAML) a numeric string."""
    try:
        if type(value) is str or type(value) is int or type(value) is float:
            number = float(value)
        else:
            return None
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number >= 0 else None


def price_pair(entry: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(input, output)`` USD per token from a ``model_info`` or price-map entry, or None."""
    pair = (_price(entry.get("input_cost_per_token")), _price(entry.get("output_cost_per_token")))
    return (pair[0], pair[1]) if pair[0] is not None and pair[1] is not None else None


def snapshot_prices() -> dict[str, tuple[float, float]]:
    """Per-token prices of every entry of the gateway's ``litellm.model_cost`` now (empty
    where LiteLLM is not loaded). Copied, not referenced: LiteLLM edits the entries in place."""
    litellm = sys.modules.get("litellm")
    table = getattr(litellm, "model_cost", None) if litellm is not None else None
    if not isinstance(table, dict):
        return {}
    out: dict[str, tuple[float, float]] = {}
    for key, entry in list(table.items()):
        if isinstance(key, str) and isinstance(entry, dict):
            pair = price_pair(entry)
            if pair is not None:
                out[key] = pair
    return out


def known_price(model_info: Mapping[str, Any], slo: Mapping[str, Any], snapshot: Prices) -> tuple[float, float] | None:
    """The deployment's price that no request can change (see the module docstring), or None."""
    declared = price_pair(model_info)
    if declared is not None:
        return declared
    info = slo.get("model_map_information")
    if not isinstance(info, dict):
        return None
    value = info.get("model_map_value")
    keys = [value.get("key") if isinstance(value, dict) else None, info.get("model_map_key")]
    provider = slo.get("custom_llm_provider")
    if isinstance(info.get("model_map_key"), str) and isinstance(provider, str):
        keys.append(f"{provider}/{info['model_map_key']}")
    for key in keys:
        if isinstance(key, str) and key in snapshot:
            return snapshot[key]
    return None


def disputed(slo: Mapping[str, Any], price: tuple[float, float] | None) -> bool:
    """Whether the payload's positive ``response_cost`` is far from ``price`` × its tokens.

    False when there is nothing to compare (no price, no cost, no token counts)."""
    cost, prompt, completion = _price(slo.get("response_cost")), slo.get("prompt_tokens"), slo.get("completion_tokens")
    if price is None or cost is None or cost == 0 or type(slo.get("response_cost")) is str:
        return False
    if type(prompt) is not int or type(completion) is not int or prompt < 0 or completion < 0:
        return False
    expected = prompt * price[0] + completion * price[1]
    return not (expected * LOW - SLACK_USD <= cost <= expected * HIGH + SLACK_USD)
