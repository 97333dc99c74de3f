"""A gateway plugin's way to the tap: a bounded buffer, batches by count and bytes, counted drops.

Gateway-neutral (the LiteLLM plugin uses it; a plugin for another gateway can too) and
light: standard library and httpx only (and orjson when the gateway has it), since it runs
in the gateway's process, whose CPU every line here costs.

:meth:`TapSender.offer` serialises an exchange and appends it to the buffer; it never awaits
and never raises. A background task posts JSON-array batches one at a time, each with one
short timeout, never retried, over one kept-alive connection written by hand
(:mod:`sidecar.integrations.tap_http`: a tenth of httpx's CPU per POST). The contract on
each bad outcome:

- **a full buffer** (``max_buffer`` exchanges or ``buffer_bytes`` bytes) sheds the *newest*
  exchange — those already waiting keep their place — counted ``buffer_full``;
- **an exchange larger than the tap takes** (``tap_max_bytes``, the tap's
  ``max_body_bytes``) is dropped alone when offered, ``too_large``; one larger than a batch
  (``batch_bytes``) but within the tap's limit is posted alone;
- **a 413** for a batch of several (the tap's limit set lower than ``tap_max_bytes``) splits
  it in two and posts both halves, down to the one exchange the tap cannot take
  (``too_large``): an oversized exchange never takes its batch with it;
- **a timeout, a connection failure, another refusal** drops the batch: ``timeout``,
  ``unreachable``, ``http_4xx``, ``http_5xx``;
- **a tap that is down** (a timeout or a connection failure) is not tried again for a
  back-off of 1 s, doubling on each further failure up to 30 s: meanwhile what is offered is
  dropped at once under the same reason, before it is even serialised, and no POST is made,
  not even the empty stats POSTs below, so a stopped or hung sidecar costs the gateway less
  than a live one. The first answer of any status ends the back-off; the empty stats POSTs
  (or the next batch) after it are the probes;
- **shutdown** (:meth:`TapSender.aclose`) posts what is buffered, one timeout per batch.

Every drop is counted by reason (:data:`DROP_REASONS`) and reported three ways: every POST
carries the :data:`STATS_HEADER` header (``{"instance": ..., "dropped": {reason: n}}``,
cumulative since this sender started; with drops and nothing queued an empty ``[]`` carries
it, at most every ``stats_every_s``, until the tap has read it); a
``shadowtrial_plugin_dropped_total{reason}`` counter in the gateway's default Prometheus
registry when ``prometheus_client`` is importable; a log line at most once a minute.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import logging
import secrets
import time
from collections import Counter, deque
from typing import Any, Mapping, cast

import httpx

from sidecar.integrations.tap_http import TapConnection, TapTimeout, TapUnreachable

_orjson: Any
try:  # LiteLLM's proxy ships it; a tenth of the standard encoder's CPU per exchange
    _orjson = importlib.import_module("orjson")
except ImportError:  # the standard encoder alone
    _orjson = None

log = logging.getLogger("shadowtrial.plugin")

#: The header every POST to the tap carries (read by ``sidecar.ingest.plugin_stats``).
STATS_HEADER = "Shadowtrial-Plugin-Stats"
#: Why exchanges are lost on the way (the sidecar exports no other reasons): after they were
#: built, or (``no_call_id``) a served call the plugin could give no identity.
DROP_REASONS = ("buffer_full", "too_large", "timeout", "unreachable", "http_4xx", "http_5xx", "error", "no_call_id")
LOG_EVERY_S = 60.0
#: The back-off after a tap that did not answer: the first, and the longest.
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 30.0
#: Statuses of answers that show the tap read the request's headers (and so its stats).
_STATS_DELIVERED = frozenset({202, 400, 408, 413, 415})


class TapSender:
    """Posts exchanges to the tap off the caller's path (see the module docstring)."""

    def __init__(
        self,
        tap_url: str = "http://127.0.0.1:8790/v1/exchanges",
        *,
        tap_token: str | None = None,
        timeout_s: float = 0.5,
        batch_size: int = 100,
        batch_bytes: int = 1 << 20,
        tap_max_bytes: int = 4 << 20,
        flush_s: float = 1.0,
        max_buffer: int = 5000,
        buffer_bytes: int = 64 << 20,
        stats_every_s: float = 5.0,
        transport: httpx.AsyncBaseTransport | None = None,
        also_https: bool = False,
    ) -> None:
        if min(batch_size, batch_bytes, tap_max_bytes, max_buffer, buffer_bytes) < 1:
            raise ValueError("batch_size, batch_bytes, tap_max_bytes, max_buffer and buffer_bytes must be >= 1")
        if not (timeout_s > 0 and flush_s >= 0 and stats_every_s > 0):
            raise ValueError("timeout_s and stats_every_s must be > 0, flush_s >= 0")
        self.tap_url = tap_url
        self.timeout_s = timeout_s
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        self.tap_max_bytes = tap_max_bytes
        self.flush_s = flush_s
        self.max_buffer = max_buffer
        self.buffer_bytes = buffer_bytes
        self.stats_every_s = stats_every_s
        #: This sender's id in the stats header: the sidecar sums drops over instances.
        self.instance = secrets.token_hex(8)
        #: ``queued``, ``sent``, ``skipped_invalid`` (not JSON-encodable).
        self.counts: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self._transport = transport
        #: Verify certificates only when the client talks TLS (an ``https`` tap, or ``also_https``:
        #: the plugin's admin reads go to an https URL). Loading the CA bundle for a plain-HTTP
        #: loopback tap cost the gateway 0.1-0.3 s of CPU per worker process.
        self._tls = tap_url.lower().startswith("https:") or also_https
        self._headers = {"Content-Type": "application/json"}
        if tap_token:
            self._headers["Authorization"] = f"Bearer {tap_token}"
        #: The batches' way to the tap (built here: a URL it cannot use fails the sender's start,
        #: which the plugin turns into one log line, not a failing task later).
        self._tap = TapConnection(tap_url, token=tap_token, timeout_s=timeout_s)
        self._buffer: deque[bytes] = deque()
        self._buffered_bytes = 0
        self._wake = asyncio.Event()
        self._flusher: asyncio.Task[None] | None = None
        self._closing = False
        self._reporter: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._reported: dict[str, int] = {}
        self._last_post = -float("inf")
        self._last_log = -float("inf")
        self._prometheus = _prometheus_counter()
        #: Until when the tap is taken to be down, why, and the back-off that set it.
        self._down_until = -float("inf")
        self._down_reason = "unreachable"
        self._backoff = 0.0
        #: Drops counted so far, and at the last stats header written (see :meth:`stats_header`).
        self._drops = 0
        self._header_drops = -1
        self._header = ""

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def stats_header(self) -> str:
        """The :data:`STATS_HEADER` value: compact JSON, cumulative since this sender started
        (written again only after a drop: every POST carries it)."""
        if self._header_drops != self._drops:
            self._header = json.dumps({"instance": self.instance, "dropped": dict(self.dropped)}, separators=(",", ":"))
            self._header_drops = self._drops
        return self._header

    def down_reason(self) -> str | None:
        """Why what is offered now would be dropped at once (the tap is in its back-off), or None."""
        return self._down_reason if time.monotonic() < self._down_until else None

    def offer(self, exchange: Mapping[str, Any]) -> None:
        """Queue one exchange for the tap (call on the event loop; never awaits)."""
        if time.monotonic() < self._down_until:
            self.drop(self._down_reason, 1)  # the tap is down: not even serialised
            return
        item = encode(exchange)
        if item is None:  # NaN, or a value JSON cannot carry: the tap would refuse the batch
            self.counts["skipped_invalid"] += 1
            return
        if len(item) + 2 > self.tap_max_bytes:  # "[" + item + "]"
            self.drop("too_large", 1)
            return
        if len(self._buffer) >= self.max_buffer or self._buffered_bytes + len(item) > self.buffer_bytes:
            self.drop("buffer_full", 1)  # shed the newest: what already waited keeps its place
            return
        self._buffer.append(item)
        self._buffered_bytes += len(item)
        self.counts["queued"] += 1
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush())
        elif len(self._buffer) >= self.batch_size or self._buffered_bytes >= self.batch_bytes:
            self._wake.set()

    def drop(self, reason: str, n: int) -> None:
        """Count ``n`` exchanges lost for ``reason`` (one of :data:`DROP_REASONS`) and see they are reported."""
        if n <= 0:
            return
        self.dropped[reason] += n
        self._drops += n
        if self._prometheus is not None:
            try:
                self._prometheus.labels(reason=reason).inc(n)
            except Exception:
                pass  # a metrics library must not stop the count either
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_S:
            self._last_log = now
            log.warning("shadowtrial: dropped %d exchange(s) (%s); drops so far %s", n, reason, dict(self.dropped))
        if self._reporter is None or self._reporter.done():
            try:
                self._reporter = asyncio.get_running_loop().create_task(self._report_drops())
            except RuntimeError:  # no running loop (a synchronous caller): the next POST reports them
                pass

    def http(self) -> httpx.AsyncClient:
        """The one HTTP client of this sender (the plugin's admin reads share it)."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout_s),
                limits=httpx.Limits(max_connections=2, max_keepalive_connections=2),
                trust_env=False,  # never route the loopback tap through an HTTP(S)_PROXY
                transport=self._transport,
                verify=self._tls,  # False: no CA bundle loaded for plain HTTP (no TLS is spoken)
            )
        return self._client

    async def aclose(self) -> None:
        """Post what is buffered (one timeout per batch) and unreported drops, then close the client."""
        self._closing = True  # a flusher that has not run yet must not start a flush_s wait either
        if self._flusher is not None and not self._flusher.done():
            self._wake.set()
            await asyncio.gather(self._flusher, return_exceptions=True)
        if self._reporter is not None and not self._reporter.done():
            self._reporter.cancel()
            await asyncio.gather(self._reporter, return_exceptions=True)
        if self._unreported():
            await self._post([])
        if self._client is not None:
            await self._client.aclose()
            self._client = None
        await self._tap.aclose()

    # -- batches ----------------------------------------------------------------

    async def _flush(self) -> None:
        while self._buffer:
            if (len(self._buffer) < self.batch_size and self._buffered_bytes < self.batch_bytes and self.flush_s > 0
                    and not self._closing):
                self._wake.clear()
                try:
                    async with asyncio.timeout(self.flush_s):  # no task per wait, unlike wait_for
                        await self._wake.wait()
                except TimeoutError:
                    pass
            await self._post(self._take())

    def _take(self) -> list[bytes]:
        """The next batch: at least one exchange, then as many as fit ``batch_size`` and ``batch_bytes``."""
        first = self._buffer.popleft()
        batch, size = [first], len(first) + 2
        while self._buffer and len(batch) < self.batch_size and size + len(self._buffer[0]) + 1 <= self.batch_bytes:
            item = self._buffer.popleft()
            batch.append(item)
            size += len(item) + 1
        self._buffered_bytes -= size - len(batch) - 1
        return batch

    async def _post(self, batch: list[bytes]) -> None:
        """POST ``batch`` (an empty one only reports drops); a 413 for several is split in two."""
        now = time.monotonic()
        if batch and now < self._down_until:
            self.drop(self._down_reason, len(batch))  # queued before the tap was found down
            return
        snapshot = dict(self.dropped)
        self._last_post = now
        try:
            status = await self._send(b"[" + b",".join(batch) + b"]", self.stats_header())
        except (httpx.TimeoutException, TapTimeout):
            self._back_off("timeout")
            self.drop("timeout", len(batch))
            return
        except (httpx.HTTPError, TapUnreachable):
            self._back_off("unreachable")
            self.drop("unreachable", len(batch))
            return
        self._backoff, self._down_until = 0.0, -float("inf")
        if status in _STATS_DELIVERED:
            self._reported = snapshot
        if status == 202:
            self.counts["sent"] += len(batch)
        elif status == 413 and len(batch) > 1:
            half = len(batch) // 2
            await self._post(batch[:half])
            await self._post(batch[half:])
        elif status == 413:
            self.drop("too_large", 1)
        elif batch:
            self.drop("http_4xx" if status < 500 else "http_5xx", len(batch))

    async def _send(self, body: bytes, stats: str) -> int:
        """One POST to the tap; its status. Over the hand-written connection, or through
        httpx when the sender was given a ``transport`` (a test's)."""
        if self._transport is not None:
            headers = {**self._headers, STATS_HEADER: stats}
            return (await self.http().post(self.tap_url, content=body, headers=headers)).status_code
        return await self._tap.post(body, b"%s: %s\r\n" % (_STATS_HEADER_NAME, stats.encode()))

    def _back_off(self, reason: str) -> None:
        """The tap did not answer: take it as down for the next back-off (see the module docstring)."""
        self._backoff = min(BACKOFF_MAX_S, self._backoff * 2) if self._backoff else BACKOFF_FIRST_S
        self._down_until = time.monotonic() + self._backoff
        self._down_reason = reason

    # -- reporting drops --------------------------------------------------------

    def _unreported(self) -> bool:
        return any(self._reported.get(r, 0) != n for r, n in self.dropped.items())

    async def _report_drops(self) -> None:
        """Until the tap has read the drop counts: an empty POST at most every ``stats_every_s``
        and never within the tap's back-off, unless a batch is on its way (batches carry the
        header too)."""
        while self._unreported():
            flusher = self._flusher
            if flusher is not None and not flusher.done():
                # Its batches carry the header: wait for it, not in a loop of zero sleeps (that
                # spun through the flusher's whole flush_s wait once the last POST was old).
                await asyncio.wait((flusher,))
                continue
            # Never before the tap's back-off is over: an empty POST is a probe too, and a
            # stopped or hung tap is tried once per back-off, not every stats_every_s.
            delay = max(self._last_post + self.stats_every_s, self._down_until) - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
                continue
            await self._post([])


_STATS_HEADER_NAME = STATS_HEADER.encode()
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
#: What orjson would write where the standard encoder refuses: left to the standard encoder.
_ORJSON_OPTIONS = (
    (_orjson.OPT_PASSTHROUGH_DATETIME | _orjson.OPT_PASSTHROUGH_DATACLASS | _orjson.OPT_PASSTHROUGH_SUBCLASS)
    if _orjson is not None else 0
)


def encode(exchange: Mapping[str, Any]) -> bytes | None:
    """``exchange`` as compact UTF-8 JSON, or None when JSON cannot carry it (NaN, an
    infinity, a value that is not JSON) — exactly what ``json.dumps(..., allow_nan=False)``
    refuses. orjson, when importable, writes it; it writes NaN as ``null``, so an output
    with a ``null`` in it is left to the standard encoder to decide (a redacted exchange's)."""
    if _orjson is not None:
        try:
            item: bytes = _orjson.dumps(exchange, option=_ORJSON_OPTIONS)
        except TypeError:  # a value orjson will not write: the standard encoder decides
            pass
        else:
            if b"null" not in item:
                return item
    try:
        return _JSON.encode(exchange).encode()
    except (TypeError, ValueError):  # ValueError: NaN, an infinity, a lone surrogate
        return None


class _Metric:
    """What the sender uses of a ``prometheus_client.Counter``."""

    def labels(self, **labels: str) -> _Metric:
        raise NotImplementedError

    def inc(self, amount: float = 1) -> None:
        raise NotImplementedError


@functools.lru_cache(maxsize=1)
def _prometheus_counter() -> _Metric | None:
    """``shadowtrial_plugin_dropped_total{reason}`` in the default registry, if prometheus_client
    is installed. Built once per process: the registry refuses a second metric of the same name,
    and a gateway (or a test) may build several senders."""
    try:
        prometheus_client = importlib.import_module("prometheus_client")
        counter = prometheus_client.Counter(
            "shadowtrial_plugin_dropped_total",
            "Exchanges the shadowtrial gateway plugin dropped, by reason.",
            ["reason"],
        )
    except Exception:  # not installed, or a registry that already has the name
        return None
    return cast(_Metric, counter)
