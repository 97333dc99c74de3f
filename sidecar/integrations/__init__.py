"""Gateway integrations: code that runs in, or listens to, a gateway.

- :mod:`sidecar.integrations.slo` — LiteLLM's StandardLoggingPayload → a tap exchange,
  the one mapping both LiteLLM paths share;
- :mod:`sidecar.integrations.sender` — a plugin's bounded, batching, drop-counting way to
  the tap (gateway-neutral);
- :mod:`sidecar.integrations.litellm` — the LiteLLM plugin (a ``CustomLogger``), which runs
  inside the gateway's process;
- :mod:`sidecar.integrations.litellm_webhook` — the tap's side of the no-code path
  (``POST /v1/integrations/litellm``, what LiteLLM's generic API logger sends).

The first three run in the gateway's environment, so they import only the standard library,
httpx and :mod:`policies.sampling`; this package's ``__init__`` imports nothing.
"""
