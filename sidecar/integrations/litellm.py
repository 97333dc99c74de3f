"""Hand copies of served exchanges from a LiteLLM proxy to the shadowtrial tap.

A LiteLLM ``CustomLogger``: after LiteLLM has answered a chat completion, its logging
worker calls ``async_log_success_event``, which keeps the call; a moment later (``flush_s``,
or once MAP_BATCH wait) the calls kept are mapped to tap exchanges together
(:func:`sidecar.integrations.slo.exchange_of`), pre-sampled when configured, and offered to a
:class:`~sidecar.integrations.sender.TapSender`: a bounded buffer (by count and
bytes; a full one sheds the newest) posted to the tap in batches bounded by count and bytes,
never retried, an oversized exchange dropped alone, every drop counted by reason and
reported to the sidecar (``Shadowtrial-Plugin-Stats``) and to the gateway's Prometheus
registry. Nothing here can delay, fail or change what the caller received: the hook never
awaits the network and never raises; calls carrying the sidecar's shadow header are never
sent back; only allow-listed request parameters leave the gateway.

What is trusted (checked on a real LiteLLM 1.80.0 proxy; see :mod:`sidecar.integrations.slo`):
the team is the key's, from ``kwargs["litellm_params"]["metadata"]``, which the proxy fills
from the key after the request body (a body's ``metadata`` or ``litellm_metadata`` cannot
change it); the model is that metadata's ``model_group``; the exchange id is LiteLLM's
``litellm_call_id``. A cost of zero is sent only when the deployment's own ``model_info``
declares zero token prices, and no cost at all when the request body carried prices
(LiteLLM 1.80.0 lets a caller re-price a call that way). Content is withheld
(``"redacted": true``) under LiteLLM's ``turn_off_message_logging`` (global, or per key or
team) and for a request with ``x-litellm-enable-message-redaction``. A positive cost far from
the deployment's known price (a caller re-priced the model for the whole process) is
disputed and not sent (:mod:`sidecar.integrations.litellm_prices`). A call with an empty
call id (a caller's empty ``x-litellm-call-id``) cannot be a case: it is dropped and
counted ``no_call_id``, reported to the sidecar like every drop.

Register it from the proxy's config directory with the shim
``deploy/gateways/litellm/shadowtrial_callback.py`` (``from sidecar.integrations.litellm
import proxy_handler_instance``)::

    litellm_settings:
      callbacks: shadowtrial_callback.proxy_handler_instance

This module imports only the standard library, httpx and :mod:`policies.sampling`;
LiteLLM's ``CustomLogger`` is imported when ``ShadowtrialTap`` or
``proxy_handler_instance`` is first used (module ``__getattr__``), so the module imports
where LiteLLM is not installed. Settings are read from the environment once, when
``proxy_handler_instance`` is built (:mod:`sidecar.integrations.litellm_settings`; see
``docs/litellm.md``). A setting that cannot be used never stops the gateway: it is refused
in one log line naming the variable, and the plugin disables itself (:func:`build_from_env`).
LiteLLM runs one instance per worker process; each has its own buffer and counters.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import importlib
import logging
import os
import sys
import time
from collections import Counter
from typing import Any, Callable, Mapping, cast
from urllib.parse import urlsplit

import httpx

from sidecar.integrations import litellm_prices
from sidecar.integrations.litellm_settings import ENV_PREFIX, SettingError, read_settings
from sidecar.integrations.sender import DROP_REASONS, STATS_HEADER, TapSender
from sidecar.integrations.slo import CHAT_CALL_TYPES, Context, Skip, exchange_of, has_shadow_header

__all__ = ["DROP_REASONS", "ENV_PREFIX", "STATS_HEADER", "SettingError", "TapPlugin", "build_from_env"]

log = logging.getLogger("shadowtrial.litellm")

TRIALS_REFRESH_S = 30.0
#: Warnings about disputed costs: at most one a minute.
LOG_EVERY_S = 60.0

#: The hook only keeps a reference to the call's kwargs; the calls are mapped, serialised and
#: posted together ``flush_s`` after the first of them (the wait a batch had before), or as soon
#: as MAP_BATCH are waiting. Measured inside a LiteLLM proxy (issue 29): mapping and serialising
#: a call in the hook, right after LiteLLM served it, cost 150-200 us of CPU; the same work
#: next to other calls 60-110 us (its code stays in the caches from one call to the next; the
#: proxy's own work between two calls evicts it: in one turn the first call cost about 190 us,
#: the others about 45), and on the same call again about 40 us, as in a loop outside the
#: proxy. A batch stays short on the event loop: MAP_BATCH calls take a few ms.
MAP_BATCH = 32

SampleFn = Callable[[str, str, float], bool]


class TapPlugin:
    """The plugin without LiteLLM's base class (``ShadowtrialTap`` adds it; see the module docstring).

    Maps each call, pre-samples it when configured, and hands it to a :class:`TapSender`
    (whose docstring states what happens on a full buffer, a timeout, a shutdown)."""

    def __init__(
        self,
        tap_url: str = "http://127.0.0.1:8790/v1/exchanges",
        *,
        tap_token: str | None = None,
        gateway: str = "litellm",
        default_team: str = "default",
        timeout_s: float = 0.5,
        batch_size: int = 100,
        batch_bytes: int = 1 << 20,
        tap_max_bytes: int = 4 << 20,
        flush_s: float = 1.0,
        max_buffer: int = 5000,
        buffer_bytes: int = 64 << 20,
        stats_every_s: float = 5.0,
        admin_url: str | None = None,
        admin_token: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        known_prices: litellm_prices.Prices | None = None,
    ) -> None:
        self.sender = TapSender(
            tap_url, tap_token=tap_token, timeout_s=timeout_s, batch_size=batch_size, batch_bytes=batch_bytes,
            tap_max_bytes=tap_max_bytes, flush_s=0.0, max_buffer=max_buffer, buffer_bytes=buffer_bytes,
            stats_every_s=stats_every_s, transport=transport,
            also_https=bool(admin_url) and str(admin_url).lower().startswith("https:"),
        )
        self.gateway = gateway
        self.default_team = default_team
        self.admin_url = admin_url.rstrip("/") if admin_url else None
        self._admin_headers = {"Authorization": f"Bearer {admin_token}"} if admin_token else {}
        self._counts: Counter[str] = Counter()
        # Pre-sampling: None = unknown (send everything).
        self._is_sampled: SampleFn | None = _load_is_sampled() if self.admin_url else None
        if self.admin_url and self._is_sampled is None:
            log.warning("shadowtrial: pre-sampling needs policies.sampling; sending all")
        self._trials: list[dict[str, Any]] | None = None
        self._trials_read_at = -float("inf")
        self._refresher: asyncio.Task[None] | None = None
        #: LiteLLM's prices as they stood when the plugin was built (at the proxy's start,
        #: before any request could re-price a model): see :mod:`litellm_prices`.
        self._known_prices = dict(known_prices) if known_prices is not None else litellm_prices.snapshot_prices()
        self._disputed_logged_at = -float("inf")
        #: Calls handed to the hook and not mapped yet, and the timer that maps them.
        self._pending: list[Any] = []
        self._map_timer: asyncio.Handle | None = None
        #: How long a call waits to be mapped; the sender then posts what it is given at once.
        self.flush_s = flush_s

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> TapPlugin:
        """An instance configured by ``LITELLM_SHADOWTRIAL_*`` variables; :class:`SettingError`
        (a ValueError) names every variable that cannot be used."""
        return cls(**read_settings(environ).as_kwargs())

    async def aclose(self) -> None:
        """Map the calls waiting, send what is buffered (one timeout per batch) and unreported
        drops, then close the client."""
        self._map_pending()
        if self._refresher is not None and not self._refresher.done():
            self._refresher.cancel()
            await asyncio.gather(self._refresher, return_exceptions=True)
        await self.sender.aclose()

    def stats(self) -> dict[str, int]:
        """Counts: ``queued``, ``sent``, ``skipped_*``, ``dropped_*`` (by reason), ``buffered`` now
        (on the event loop, the calls waiting to be mapped are mapped first, so that they are counted)."""
        self._map_waiting()
        dropped = {f"dropped_{r}": n for r, n in self.sender.dropped.items()}
        return {**self._counts, **self.sender.counts, **dropped, "buffered": self.sender.buffered}

    def stats_header(self) -> str:
        """The ``Shadowtrial-Plugin-Stats`` value of this instance's next POST (the calls waiting
        to be mapped are mapped first, on the event loop)."""
        self._map_waiting()
        return self.sender.stats_header()

    # -- LiteLLM hooks ---------------------------------------------------------

    async def async_log_success_event(self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any) -> None:
        """Keep a reference to the call's kwargs and return: the calls are mapped together a
        moment later (:meth:`_map_pending`; see MAP_BATCH), not one by one in the serving path."""
        try:
            pending = self._pending
            pending.append(kwargs)
            if self.flush_s <= 0:
                self._map_pending()
            elif len(pending) == 1:
                self._map_timer = asyncio.get_running_loop().call_later(self.flush_s, self._map_due)
            elif len(pending) == MAP_BATCH:
                if self._map_timer is not None:
                    self._map_timer.cancel()
                self._map_timer = asyncio.get_running_loop().call_soon(self._map_due)
        except Exception:  # a logging callback must never disturb the gateway
            self.sender.drop("error", 1)

    def _map_pending(self, limit: int | None = None) -> None:
        """Map the calls waiting and offer their exchanges to the sender (which posts them at
        once), MAP_BATCH at a time on the event loop (``limit`` None: all, for a caller outside
        it). Never raises; a call that fails to map is dropped ``error`` alone.

        The calls wait as long as a batch waited for more before (``flush_s``), held only in
        this process's memory, like the batch itself: nothing of them is kept once mapped."""
        timer, self._map_timer = self._map_timer, None
        if timer is not None:
            timer.cancel()
        pending = self._pending
        if limit is not None and len(pending) > limit:
            self._pending = pending[limit:]
            del pending[limit:]
            self._map_timer = asyncio.get_running_loop().call_soon(self._map_due)
        else:
            self._pending = []
        # While the tap is down (no pre-sampling), a plain chat call is dropped unmapped: a
        # stopped or hung sidecar then costs the gateway least.
        down = self.sender.down_reason() if self._is_sampled is None and pending else None
        dropped_down = 0
        for kwargs in pending:
            try:
                if down is not None and _plainly_an_exchange(kwargs):
                    dropped_down += 1
                    continue
                exchange = self.exchange_from(kwargs)
                if exchange is not None and self._wanted(exchange):
                    self.sender.offer(exchange)
            except Exception:
                self.sender.drop("error", 1)
        if dropped_down:
            self.sender.drop(cast(str, down), dropped_down)

    def _map_waiting(self) -> None:
        """:meth:`_map_pending` for a caller that may be outside the event loop, where the
        sender could not start its tasks: then the calls wait for their timer."""
        if self._pending:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                return
            self._map_pending()

    def _map_due(self) -> None:
        """The timer's and the full batch's call: at most MAP_BATCH calls in this turn of the loop."""
        self._map_pending(MAP_BATCH)

    # -- building an exchange --------------------------------------------------

    def exchange_from(self, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """The tap exchange for one LiteLLM call, or None (counted ``skipped_<reason>``, or
        dropped ``no_call_id`` when only the call id is missing).

        This runs in the gateway's event loop once per call, so each part of ``kwargs`` is
        looked up once and the :class:`Context` built once (issue 29)."""
        slo = kwargs.get("standard_logging_object")
        if not isinstance(slo, dict):
            self._counts["skipped_incomplete"] += 1
            return None
        params = kwargs.get("litellm_params")
        if not isinstance(params, dict):
            params = _EMPTY
        metadata = params.get("metadata")
        if not isinstance(metadata, dict):
            metadata = _EMPTY
        proxy_request = params.get("proxy_server_request")
        if not isinstance(proxy_request, dict):
            proxy_request = _EMPTY
        headers = proxy_request.get("headers")
        if not (isinstance(headers, dict) and headers):
            headers = metadata.get("headers")
            if not isinstance(headers, dict):
                headers = _EMPTY
        call_id = kwargs.get("litellm_call_id") or params.get("litellm_call_id")
        model = metadata.get("model_group")
        model = model if isinstance(model, str) and model else None
        cost_trusted = not _body_sets_price(proxy_request.get("body"))
        # The deployment's price matters only for a positive cost (litellm_prices.disputed is
        # False for any other), and its zero price only for a zero cost (slo.known_cost): each
        # is looked up only then.
        cost = slo.get("response_cost")
        disputed = zero_cost_known = False
        if cost_trusted and (type(cost) is float or type(cost) is int):
            model_info = metadata.get("model_info")
            if not (isinstance(model_info, dict) and model_info):
                model_info = params.get("model_info")
                if not isinstance(model_info, dict):
                    model_info = _EMPTY
            if cost:
                disputed = litellm_prices.disputed(
                    slo, litellm_prices.known_price(model_info, slo, self._known_prices))
            else:
                zero_cost_known = _declares_zero_price(model_info)
        # A missing call id is mapped with a stand-in only to tell a lost exchange from a skipped one.
        no_call_id = not call_id
        mapped = exchange_of(
            slo,
            str(metadata.get("user_api_key_team_alias") or metadata.get("user_api_key_team_id") or self.default_team),
            self.gateway,
            "-" if no_call_id else str(call_id),
            model,
            _route(proxy_request.get("url")),
            headers,
            _logging_turned_off(kwargs),
            zero_cost_known,
            cost_trusted and not disputed,
            str(metadata.get("user_api_key_alias") or ""),
        )
        if type(mapped) is not dict:
            self._counts[f"skipped_{cast(Skip, mapped).reason}"] += 1
            return None
        if no_call_id:
            # A caller's empty x-litellm-call-id: no identity to make a case of. A real exchange
            # lost, so a drop the sidecar hears of (the stats header), not a local skip.
            self.sender.drop("no_call_id", 1)
            return None
        if disputed:
            self._count_disputed(model)
        return mapped

    def _count_disputed(self, model: str | None) -> None:
        self._counts["cost_disputed"] += 1
        now = time.monotonic()
        if now - self._disputed_logged_at >= LOG_EVERY_S:
            self._disputed_logged_at = now
            log.warning("shadowtrial: LiteLLM's cost for %s is far from the deployment's price (a caller may have "
                        "re-priced the model); sent without a cost (%d so far)", model, self._counts["cost_disputed"])

    def context_of(self, kwargs: Mapping[str, Any]) -> Context:
        """What the call's kwargs say that its logged payload cannot be trusted for."""
        params = _dict(kwargs.get("litellm_params"))
        # Filled by the proxy from the key *after* the body was copied in: the trusted metadata.
        metadata = _dict(params.get("metadata"))
        model_info = _dict(metadata.get("model_info")) or _dict(params.get("model_info"))
        return self._context(kwargs, params, metadata, model_info)

    def _context(self, kwargs: Mapping[str, Any], params: Mapping[str, Any], metadata: Mapping[str, Any],
                 model_info: Mapping[str, Any]) -> Context:
        """:meth:`context_of`, given the parts of ``kwargs`` its caller has already looked up."""
        proxy_request = _dict(params.get("proxy_server_request"))
        headers = _dict(proxy_request.get("headers")) or _dict(metadata.get("headers"))
        team = metadata.get("user_api_key_team_alias") or metadata.get("user_api_key_team_id") or self.default_team
        call_id = kwargs.get("litellm_call_id") or params.get("litellm_call_id")
        model = metadata.get("model_group")
        return Context(
            team=str(team),
            gateway=self.gateway,
            exchange_id=str(call_id) if call_id else "",
            model=model if isinstance(model, str) and model else None,
            route=_route(proxy_request.get("url")),
            headers=headers,
            redacted=_logging_turned_off(kwargs),
            zero_cost_known=_declares_zero_price(model_info),
            cost_trusted=not _body_sets_price(proxy_request.get("body")),
            key_alias=str(metadata.get("user_api_key_alias") or ""),
        )

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
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # mapped from outside the event loop (stats()): the next call reads them
                return
            self._refresher = loop.create_task(self._refresh_trials())

    async def _refresh_trials(self) -> None:
        self._trials_read_at = time.monotonic()  # at most one read per period, even when it fails
        try:
            r = await self.sender.http().get(
                f"{self.admin_url}/v1/trials", params={"status": "running"}, headers=self._admin_headers
            )
            r.raise_for_status()
            self._trials = [t for t in r.json()["trials"] if t.get("status") == "running"]
        except Exception:
            self._trials = None
            self._counts["trials_read_failed"] += 1


_EMPTY: Mapping[str, Any] = {}


def _dict(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else _EMPTY


@functools.lru_cache(maxsize=64)
def _url_path(url: str) -> str:
    return urlsplit(url).path


def _route(url: Any) -> str:
    """The path of the proxy request's URL (a gateway serves few: cached)."""
    return _url_path(url if isinstance(url, str) else str(url or ""))


def _plainly_an_exchange(kwargs: Mapping[str, Any]) -> bool:
    """What a few lookups can tell of a call the mapping would send: a successful chat
    completion with a call id, not the sidecar's own. While the tap is down such a call is
    dropped unmapped (a stopped or hung sidecar then costs the gateway least); any other is
    mapped, so that what would be skipped is still counted skipped, not dropped."""
    slo = kwargs.get("standard_logging_object")
    if not isinstance(slo, dict):
        return False
    call_type = slo.get("call_type")
    if not isinstance(call_type, str) or call_type not in CHAT_CALL_TYPES or slo.get("status", "success") != "success":
        return False
    params = kwargs.get("litellm_params")
    if not isinstance(params, dict):
        params = _EMPTY
    if not (kwargs.get("litellm_call_id") or params.get("litellm_call_id")):
        return False
    # The headers as exchange_from finds them, each level looked up once (issue 29).
    proxy_request = params.get("proxy_server_request")
    headers = proxy_request.get("headers") if isinstance(proxy_request, dict) else None
    if not (isinstance(headers, dict) and headers):
        metadata = params.get("metadata")
        headers = metadata.get("headers") if isinstance(metadata, dict) else None
        if not isinstance(headers, dict):
            return True
    return not has_shadow_header(headers)


def _logging_turned_off(kwargs: Mapping[str, Any]) -> bool:
    """LiteLLM's ``turn_off_message_logging``: global (``litellm_settings``), or per key/team."""
    litellm = sys.modules.get("litellm")  # the gateway's own module; never imported from here
    if litellm is not None and getattr(litellm, "turn_off_message_logging", False) is True:
        return True
    dynamic = kwargs.get("standard_callback_dynamic_params")
    if not dynamic:
        return False
    dynamic = _dict(dynamic).get("turn_off_message_logging")
    return dynamic is True or (isinstance(dynamic, str) and dynamic.strip().lower() in ("true", "1", "yes"))


def _declares_zero_price(model_info: Mapping[str, Any]) -> bool:
    """Whether the deployment's own ``model_info`` (set by LiteLLM's router from the config,
    not from the request) prices input and output tokens at exactly zero."""
    given, taken = model_info.get("input_cost_per_token"), model_info.get("output_cost_per_token")
    return (type(given) is int or type(given) is float) and given == 0 and (
        type(taken) is int or type(taken) is float) and taken == 0


def _body_sets_price(body: Any) -> bool:
    """Whether the request body carried what LiteLLM prices a call by (``input_cost_per_token``
    and the like, ``base_model``): then the logged cost is the caller's figure."""
    if not isinstance(body, dict):
        return False
    for k in body:  # without a generator per call (this runs once per call, issue 29)
        if "cost" in (k if type(k) is str else str(k)) or k == "base_model":
            return True
    metadata = body.get("metadata")
    return isinstance(metadata, dict) and "base_model" in metadata


def _matches(trial: Mapping[str, Any], exchange: Mapping[str, Any]) -> bool:
    """The sidecar's matching rule (sidecar/ingest/routing.py): team, incumbent model, route and gateway."""
    if trial.get("team") != exchange["team"] or trial.get("incumbent_model") != exchange["model"]:
        return False
    if trial.get("route") is not None and trial["route"] != exchange["route"]:
        return False
    return trial.get("gateway") is None or trial["gateway"] == exchange["gateway"]


def _load_is_sampled() -> SampleFn | None:
    """shadowtrial's sampling helper (standard library only), or None if the package is incomplete."""
    try:
        from policies.sampling import is_sampled
    except ImportError:
        return None
    return is_sampled


@functools.lru_cache(maxsize=1)
def _tap_class() -> type[TapPlugin]:
    """``ShadowtrialTap``: :class:`TapPlugin` on LiteLLM's ``CustomLogger``, built on first use."""
    base = importlib.import_module("litellm.integrations.custom_logger").CustomLogger

    def __init__(self: TapPlugin, *args: Any, **kwargs: Any) -> None:
        base.__init__(self)
        TapPlugin.__init__(self, *args, **kwargs)

    cls = type("ShadowtrialTap", (TapPlugin, base), {"__init__": __init__, "__module__": __name__})
    return cast("type[TapPlugin]", cls)


@functools.lru_cache(maxsize=1)
def _disabled_class() -> type[Any]:
    """``ShadowtrialTapDisabled``: LiteLLM's ``CustomLogger`` doing nothing, with ``disabled_because``."""
    base = importlib.import_module("litellm.integrations.custom_logger").CustomLogger

    def __init__(self: Any, reason: str) -> None:
        base.__init__(self)
        self.disabled_because = reason

    return type("ShadowtrialTapDisabled", (base,), {"__init__": __init__, "__module__": __name__})


def build_from_env(environ: Mapping[str, str]) -> Any:
    """A ``ShadowtrialTap`` configured from ``environ`` (needs LiteLLM importable).

    A setting that cannot be used (or any failure to build) never stops the gateway: it is
    logged in one line naming the variable(s), and a ``ShadowtrialTapDisabled`` that does
    nothing is returned instead; the gateway serves as usual."""
    try:
        return _tap_class().from_env(environ)
    except SettingError as exc:
        reason = str(exc)
    except Exception as exc:  # a bug of ours must not take the gateway down either
        reason = f"it could not start ({type(exc).__name__})"
    log.error("shadowtrial plugin disabled: %s; the gateway serves as usual, without handing exchanges to "
              "shadowtrial", reason)
    return _disabled_class()(reason)


def __getattr__(name: str) -> Any:
    """``ShadowtrialTap`` and ``proxy_handler_instance``, built when first asked for.

    The instance is what LiteLLM's config names; it reads the environment once, here, and
    is kept on the module (LiteLLM looks it up by attribute, once per worker process)."""
    if name == "ShadowtrialTap":
        return _tap_class()
    if name == "proxy_handler_instance":
        instance = build_from_env(os.environ)
        globals()["proxy_handler_instance"] = instance
        return instance
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
