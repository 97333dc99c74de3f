"""Hand copies of served exchanges from a LiteLLM proxy to the shadowtrial tap.

A LiteLLM ``CustomLogger``: after LiteLLM has answered a chat completion, its
logging worker calls :meth:`ShadowtrialTap.async_log_success_event`, which
turns the call's ``standard_logging_object`` into a tap exchange, puts it in a
bounded buffer and returns at once. A background task posts the buffer to the
tap in small JSON-array batches, one POST at a time, each with a short
timeout. Nothing here can delay, fail or change what the caller received:

- the hook never awaits the network and never raises;
- a full buffer drops the *newest* exchange (those already waiting keep their
  place), a failed or slow POST drops its batch; there are no retries, and every
  drop is counted by reason in ``stats()`` and logged at most once a minute;
- exchanges LiteLLM redacted (``turn_off_message_logging``, or per request)
  are sent with ``"redacted": true`` and without messages or answer, so the
  sidecar counts them (``skipped_redacted``) and never samples them;
- calls carrying the sidecar's shadow header (its own candidate calls, if they
  are routed through this gateway) are never sent back to the tap.

Install next to the proxy's ``config.yaml`` (LiteLLM loads the module from the
config file's directory) and register the instance::

    litellm_settings:
      callbacks: shadowtrial_callback.proxy_handler_instance

Settings, read once from the environment when LiteLLM loads this module (a
``LITELLM_SHADOWTRIAL_`` prefix, so they never collide with the sidecar's own
``SHADOWTRIAL_*`` overrides, which it refuses when it does not know them):

=====================================  ==========================================
``LITELLM_SHADOWTRIAL_TAP_URL``        default ``http://127.0.0.1:8790/v1/exchanges``
``LITELLM_SHADOWTRIAL_TAP_TOKEN``      bearer token, when the tap requires one
``LITELLM_SHADOWTRIAL_GATEWAY``        this gateway's name (default ``litellm``)
``LITELLM_SHADOWTRIAL_DEFAULT_TEAM``   team for keys without one (default ``default``)
``LITELLM_SHADOWTRIAL_TIMEOUT_S``      per POST, connect included (default ``0.5``)
``LITELLM_SHADOWTRIAL_BATCH``          most exchanges per POST (default ``100``)
``LITELLM_SHADOWTRIAL_FLUSH_S``        longest an exchange waits for a batch (default ``0.2``)
``LITELLM_SHADOWTRIAL_BUFFER``         most exchanges held (default ``5000``)
``LITELLM_SHADOWTRIAL_ADMIN_URL``      optional: enables pre-sampling (below)
``LITELLM_SHADOWTRIAL_ADMIN_TOKEN``    bearer token for the admin API, if it needs one
=====================================  ==========================================

Pre-sampling (optional). With ``LITELLM_SHADOWTRIAL_ADMIN_URL`` set, the
callback reads the running trials (``GET /v1/trials?status=running``) every
30 s and sends only the exchanges that some running trial matches (team,
incumbent model, route, gateway) *and* samples, using the sidecar's own
deterministic helper ``policies.sampling.is_sampled`` (imported from the
installed package, or from a copy of ``policies/sampling.py`` placed beside
this file as ``shadowtrial_sampling.py``; it is standard library only). The
sidecar would decide exactly the same, so no judged case is lost; what is lost
is its view of the unsampled traffic: ``not_sampled`` counts and the gateway
spend reported beside evaluation spend then cover only what was sent. Until
the first successful read, after a failed one, or when the helper cannot be
found, everything is sent (pre-sampling fails open; it only saves bandwidth).
A trial started since the last read sees no traffic until the next read.

LiteLLM runs one instance per worker process; each has its own buffer.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import time
from collections import Counter, deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import urlsplit

import httpx
from litellm.integrations.custom_logger import CustomLogger

log = logging.getLogger("shadowtrial.litellm")

#: What LiteLLM puts in place of content it must not log.
REDACTED = "redacted-by-litellm"
#: The header the sidecar sets on its own candidate and judge calls
#: (``engine.shadow_header`` in its config; compared case-insensitively).
SHADOW_HEADER = "x-shadowtrial-shadow"
CHAT_CALL_TYPES = frozenset({"completion", "acompletion"})
#: Request parameters passed on to the tap (the candidate is called with them).
#: An allow-list, so that nothing else a request carried (user ids, metadata,
#: provider credentials) leaves the gateway.
PARAMS = frozenset({
    "temperature", "top_p", "max_tokens", "max_completion_tokens", "stop", "seed", "n",
    "presence_penalty", "frequency_penalty", "logit_bias", "response_format",
    "tools", "tool_choice", "parallel_tool_calls", "reasoning_effort",
})
TRIALS_REFRESH_S = 30.0
LOG_EVERY_S = 60.0

SampleFn = Callable[[str, str, float], bool]


class ShadowtrialTap(CustomLogger):
    """A LiteLLM callback that copies served chat completions to the tap (see the module docstring)."""

    def __init__(
        self,
        tap_url: str = "http://127.0.0.1:8790/v1/exchanges",
        *,
        tap_token: str | None = None,
        gateway: str = "litellm",
        default_team: str = "default",
        timeout_s: float = 0.5,
        batch_size: int = 100,
        flush_s: float = 0.2,
        max_buffer: int = 5000,
        admin_url: str | None = None,
        admin_token: str | None = None,
    ) -> None:
        super().__init__()
        if batch_size < 1 or max_buffer < 1 or timeout_s <= 0 or flush_s < 0:
            raise ValueError("batch_size and max_buffer must be >= 1, timeout_s > 0, flush_s >= 0")
        self.tap_url = tap_url
        self.gateway = gateway
        self.default_team = default_team
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        self.flush_s = flush_s
        self.max_buffer = max_buffer
        self.admin_url = admin_url.rstrip("/") if admin_url else None
        self._tap_headers = {"Content-Type": "application/json"}
        if tap_token:
            self._tap_headers["Authorization"] = f"Bearer {tap_token}"
        self._admin_headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        self._buffer: deque[dict[str, Any]] = deque()
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._counts: Counter[str] = Counter()
        self._last_log = 0.0
        # Pre-sampling: None = unknown (send everything).
        self._is_sampled: SampleFn | None = _load_is_sampled() if self.admin_url else None
        if self.admin_url and self._is_sampled is None:
            log.warning("shadowtrial: pre-sampling needs policies.sampling or shadowtrial_sampling.py; sending all")
        self._trials: list[dict[str, Any]] | None = None
        self._trials_read_at = 0.0
        self._refresher: asyncio.Task[None] | None = None

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> ShadowtrialTap:
        def get(name: str, default: str = "") -> str:
            return environ.get(f"LITELLM_SHADOWTRIAL_{name}", default)

        return cls(
            get("TAP_URL", "http://127.0.0.1:8790/v1/exchanges"),
            tap_token=get("TAP_TOKEN") or None,
            gateway=get("GATEWAY", "litellm"),
            default_team=get("DEFAULT_TEAM", "default"),
            timeout_s=float(get("TIMEOUT_S", "0.5")),
            batch_size=int(get("BATCH", "100")),
            flush_s=float(get("FLUSH_S", "0.2")),
            max_buffer=int(get("BUFFER", "5000")),
            admin_url=get("ADMIN_URL") or None,
            admin_token=get("ADMIN_TOKEN") or None,
        )

    async def aclose(self) -> None:
        """Send what is buffered (within one timeout per batch), then close the HTTP client."""
        if self._flusher is not None and not self._flusher.done():
            self._wake.set()
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self._refresher is not None:
            await asyncio.gather(self._refresher, return_exceptions=True)
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    def stats(self) -> dict[str, int]:
        """Counts: ``queued``, ``sent``, ``skipped_*``, ``dropped_*`` (by reason), ``buffered`` now."""
        return {**self._counts, "buffered": len(self._buffer)}

    # -- LiteLLM hooks ---------------------------------------------------------

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        try:
            exchange = self.exchange_from(kwargs)
            if exchange is not None and self._wanted(exchange):
                self._enqueue(exchange)
        except Exception:  # a logging callback must never disturb the gateway
            self._drop("error_building", 1)

    # -- building an exchange --------------------------------------------------

    def exchange_from(self, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The tap exchange for one LiteLLM call, or None when it is not one to send."""
        slo = kwargs.get("standard_logging_object") or {}
        if slo.get("call_type") not in CHAT_CALL_TYPES or slo.get("status", "success") != "success":
            self._counts["skipped_not_chat"] += 1
            return None
        proxy_request = (kwargs.get("litellm_params") or {}).get("proxy_server_request") or {}
        headers = proxy_request.get("headers") or {}
        if any(str(k).lower() == SHADOW_HEADER for k in headers):
            self._counts["skipped_shadow_call"] += 1
            return None
        messages = slo.get("messages")
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            self._counts["skipped_not_chat"] += 1
            return None
        response = slo.get("response") if isinstance(slo.get("response"), dict) else {}
        choices = response.get("choices") or [{}]
        choice = choices[0] if isinstance(choices[0], dict) else {}
        message = choice.get("message") or {}
        content = message.get("content")
        model = slo.get("model_group") or slo.get("model")
        exchange_id = slo.get("id") or kwargs.get("litellm_call_id")
        # The tap refuses a whole batch for one malformed exchange; never send one.
        if not isinstance(model, str) or not exchange_id or not (content is None or isinstance(content, str)):
            self._counts["skipped_incomplete"] += 1
            return None
        redacted = content == REDACTED or any(
            isinstance(m, dict) and m.get("content") == REDACTED for m in messages
        )
        metadata = slo.get("metadata") or {}
        start, end = slo.get("startTime"), slo.get("endTime")
        params = {k: v for k, v in (slo.get("model_parameters") or {}).items() if k in PARAMS}
        usage: dict[str, Any] = {
            "input_tokens": slo.get("prompt_tokens"),
            "output_tokens": slo.get("completion_tokens"),
        }
        # Unknown is not zero: LiteLLM reports 0.0 when it could not price the
        # call, with the reason in response_cost_failure_debug_info.
        cost = slo.get("response_cost")
        if isinstance(cost, (int, float)) and not slo.get("response_cost_failure_debug_info"):
            usage["cost_usd"] = float(cost)
        return {
            "exchange_id": str(exchange_id),
            "team": str(
                metadata.get("user_api_key_team_alias") or metadata.get("user_api_key_team_id") or self.default_team
            ),
            "gateway": self.gateway,
            "route": urlsplit(str(proxy_request.get("url") or "")).path or None,
            # The model as the gateway's callers name it (the trial's incumbent).
            "model": model,
            "request": {"messages": [] if redacted else messages, "params": {} if redacted else params},
            "response": {
                "content": None if redacted else content,
                "finish_reason": choice.get("finish_reason"),
                "usage": usage,
            },
            "served_at": _iso(start),
            "latency_ms": (end - start) * 1000.0 if isinstance(start, (int, float)) and isinstance(end, (int, float)) else None,
            "redacted": redacted,
        }

    # -- pre-sampling ----------------------------------------------------------

    def _wanted(self, exchange: dict[str, Any]) -> bool:
        if self._is_sampled is None:
            return True
        self._maybe_refresh_trials()
        trials = self._trials
        if trials is None or time.monotonic() - self._trials_read_at > 3 * TRIALS_REFRESH_S:
            return True  # unknown or stale: fail open
        sample = self._is_sampled
        for t in trials:
            # A redacted exchange goes to every trial it matches, which counts it skipped_redacted.
            if _matches(t, exchange) and (
                exchange["redacted"] or sample(t["id"], exchange["exchange_id"], float(t["sample_rate"]))
            ):
                return True
        self._counts["skipped_presampled"] += 1
        return False

    def _maybe_refresh_trials(self) -> None:
        due = time.monotonic() - self._trials_read_at > TRIALS_REFRESH_S
        if due and (self._refresher is None or self._refresher.done()):
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_trials())

    async def _refresh_trials(self) -> None:
        self._trials_read_at = time.monotonic()  # at most one read per period, even when it fails
        try:
            r = await self._http().get(
                f"{self.admin_url}/v1/trials", params={"status": "running"}, headers=self._admin_headers
            )
            r.raise_for_status()
            self._trials = [t for t in r.json()["trials"] if t.get("status") == "running"]
        except Exception:
            self._trials = None
            self._counts["trials_read_failed"] += 1

    # -- buffer and sender -----------------------------------------------------

    def _enqueue(self, exchange: dict[str, Any]) -> None:
        if len(self._buffer) >= self.max_buffer:
            self._drop("buffer_full", 1)  # shed the newest: what already waited keeps its place
            return
        self._buffer.append(exchange)
        self._counts["queued"] += 1
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        elif len(self._buffer) >= self.batch_size:
            self._wake.set()

    async def _flush(self) -> None:
        while self._buffer:
            if len(self._buffer) < self.batch_size and self.flush_s > 0:
                self._wake.clear()
                try:
                    await asyncio.wait_for(self._wake.wait(), self.flush_s)
                except asyncio.TimeoutError:
                    pass
            batch = [self._buffer.popleft() for _ in range(min(self.batch_size, len(self._buffer)))]
            await self._post(batch)

    async def _post(self, batch: list[dict[str, Any]]) -> None:
        try:
            r = await self._http().post(self.tap_url, json=batch, headers=self._tap_headers)
        except httpx.TimeoutException:
            self._drop("timeout", len(batch))
        except httpx.HTTPError:
            self._drop("unreachable", len(batch))
        else:
            if r.status_code == 202:
                self._counts["sent"] += len(batch)
            else:
                self._drop(f"http_{r.status_code}", len(batch))

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=httpx.Limits(max_connections=2, max_keepalive_connections=2),
                trust_env=False,  # never route the loopback tap through an HTTP(S)_PROXY
            )
        return self._client

    def _drop(self, reason: str, n: int) -> None:
        self._counts[f"dropped_{reason}"] += n
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            log.warning("shadowtrial: dropped %d exchange(s) (%s); totals so far %s", n, reason, self.stats())


def _matches(trial: Mapping[str, Any], exchange: Mapping[str, Any]) -> bool:
    """The sidecar's matching rule (sidecar/registry.py): team, incumbent model, route and gateway filters."""
    if trial.get("team") != exchange["team"] or trial.get("incumbent_model") != exchange["model"]:
        return False
    if trial.get("route") is not None and trial["route"] != exchange["route"]:
        return False
    return trial.get("gateway") is None or trial["gateway"] == exchange["gateway"]


def _iso(epoch: Any) -> str | None:
    if not isinstance(epoch, (int, float)):
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _load_is_sampled() -> SampleFn | None:
    """shadowtrial's sampling helper: the installed package, else a copy beside this file."""
    try:
        from policies.sampling import is_sampled

        return is_sampled
    except ImportError:
        pass
    # LiteLLM loads this file by path, so its directory is not on sys.path.
    copy = Path(__file__).with_name("shadowtrial_sampling.py")
    spec = importlib.util.spec_from_file_location("shadowtrial_sampling", copy) if copy.is_file() else None
    if spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, "is_sampled", None)


#: The instance LiteLLM's config names (``callbacks: shadowtrial_callback.proxy_handler_instance``).
proxy_handler_instance = ShadowtrialTap.from_env(os.environ)
