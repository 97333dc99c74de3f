"""The delivery loop: the outbox's records to the collector, at least once.

One task per sidecar process. Each round claims up to ``batch_size`` records
(leased to this process, so a fleet's sidecars never send the same record at
once), sends them as one gzip-compressed :class:`~uplink.schema.Batch` with a
fresh short-lived EdDSA token, and deletes exactly the ids the collector's
:class:`~uplink.schema.Ack` names (acknowledged and refused). Anything else
stays in the outbox and is sent again.

A failed send (connection error, timeout, any non-2xx) is a value
(:class:`SendResult`), never an exception out of the loop: the loop waits a
full-jitter exponential backoff (``uniform(0, min(cap, base * 2**attempt))``),
at least the collector's ``Retry-After``, and tries again. Nothing is ever
dropped for failing to send. On shutdown the loop finishes or abandons the
send in progress within its timeout; unacknowledged records stay durable in
the outbox (their lease lapses, and the next life sends them again).
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Coroutine

import httpx
import msgspec

from uplink.outbox import Outbox
from uplink.schema import Ack, encode_batch
from uplink.signing import Signer

log = logging.getLogger("shadowtrial.uplink")

BATCHES_PATH = "/v1/uplink/batches"
_ack = msgspec.json.Decoder(Ack)


class _Refusal(msgspec.Struct):
    refused: dict[str, str] = {}


_refusal = msgspec.json.Decoder(_Refusal)


@dataclass(frozen=True)
class DeliverySettings:
    url: str
    sidecar_id: str
    owner: str
    batch_size: int = 500
    #: How long a claimed record is ours; longer than a send can take.
    lease_s: float = 60.0
    timeout_s: float = 10.0
    backoff_base_s: float = 0.2
    backoff_cap_s: float = 30.0
    #: The longest ``Retry-After`` honoured (a bigger one is capped, not obeyed blindly).
    retry_after_cap_s: float = 300.0
    #: How often an empty outbox is looked at again.
    idle_poll_s: float = 0.2


@dataclass(frozen=True)
class SendResult:
    """One POST's outcome. ``ack`` is set on success (2xx, or a 403 naming refused ids)."""

    status: int | None
    ack: Ack | None = None
    retry_after_s: float | None = None
    error: str | None = None


@dataclass
class DeliveryStats:
    records_sent: int = 0
    records_deleted: int = 0
    batches_ok: int = 0
    failures: Counter[str] = field(default_factory=Counter)


class Delivery:
    """``await d.start()`` … ``await d.stop()``: sends the outbox until stopped.

    Contract: a record leaves the outbox only when the collector's answer names
    its id; a failure of any kind keeps it and backs off. ``stop`` waits for the
    send in progress at most ``timeout_s``, then cancels it.
    """

    def __init__(
        self, outbox: Outbox, settings: DeliverySettings, signer: Signer, *,
        transport: httpx.AsyncBaseTransport | None = None, clock: Callable[[], float] = time.time,
        rng: random.Random | None = None, on_answer: Callable[[Ack], Awaitable[None]] | None = None,
    ) -> None:
        """``on_answer``: given each answer once its ids are deleted (what the collector refused,
        the trials it no longer runs); a failure of it is logged, never retried."""
        self.outbox = outbox
        self._on_answer = on_answer
        self.settings = settings
        self.signer = signer
        self.clock = clock
        self.stats = DeliveryStats()
        self._rng = rng or random.Random()
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(settings.timeout_s),
            limits=httpx.Limits(max_connections=2, max_keepalive_connections=1),
            transport=transport,
        )
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self, spawn: Spawn | None = None) -> None:
        """Start the loop; with ``spawn`` (the sidecar's supervisor), as a supervised worker
        restarted if it dies: its work is in the outbox, nothing is lost with it."""
        if spawn is None:
            self._task = asyncio.create_task(self._run(), name="shadowtrial-uplink")
        else:
            self._task = spawn("uplink-delivery", self._run)

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), self.settings.timeout_s + 1.0)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        await self._client.aclose()

    async def _run(self) -> None:
        attempt = 0
        while not self._stopping.is_set():
            try:
                claimed = await self.outbox.claim_outbox(
                    self.settings.owner, limit=self.settings.batch_size, lease_s=self.settings.lease_s,
                    now=self.clock(),
                )
            except Exception as exc:
                self.stats.failures["outbox_read"] += 1
                log.warning("uplink: reading the outbox failed (%s); trying again", type(exc).__name__)
                attempt += 1
                await self._pause(self._backoff(attempt, None))
                continue
            if not claimed:
                await self._pause(self.settings.idle_poll_s)
                continue
            result = await self.send(claimed)
            if result.ack is not None:
                attempt = 0
                await self._forget(claimed, result.ack)
                continue
            attempt += 1
            self.stats.failures[result.error or f"http_{result.status}"] += 1
            await self._pause(self._backoff(attempt, result.retry_after_s))

    async def send(self, claimed: list[tuple[str, bytes]]) -> SendResult:
        """POST one batch; never raises for a remote outcome."""
        body = gzip.compress(encode_batch(self.settings.sidecar_id, self.clock(), [b for _, b in claimed]), 5)
        headers = {
            "Authorization": f"Bearer {self.signer.token()}",
            "Content-Type": "application/json",
            "Content-Encoding": "gzip",
        }
        try:
            resp = await self._client.post(self.settings.url.rstrip("/") + BATCHES_PATH, content=body, headers=headers)
        except httpx.TimeoutException:
            return SendResult(None, error="timeout")
        except httpx.TransportError:
            return SendResult(None, error="connection")
        self.stats.records_sent += len(claimed)
        retry_after = _retry_after(resp.headers.get("Retry-After"))
        if resp.status_code == 200:
            try:
                return SendResult(200, ack=_ack.decode(resp.content))
            except msgspec.DecodeError:
                return SendResult(200, error="bad_ack")
        if resp.status_code == 403:
            try:
                refused = _refusal.decode(resp.content).refused
            except msgspec.DecodeError:
                refused = {}
            if refused:
                return SendResult(403, ack=Ack(acked=[], refused=refused))
        return SendResult(resp.status_code, retry_after_s=retry_after)

    async def _forget(self, claimed: list[tuple[str, bytes]], ack: Ack) -> None:
        sent = {rid for rid, _ in claimed}
        done = [rid for rid in [*ack.acked, *ack.refused] if rid in sent]
        for rid, reason in ack.refused.items():
            log.warning("uplink: the collector refused record %s for good (%s)", rid, reason)
        if done:
            self.stats.records_deleted += await self.outbox.delete_outbox(done)
        self.stats.batches_ok += 1
        if self._on_answer is not None and (ack.refused or ack.trials):
            try:
                await self._on_answer(ack)
            except Exception as exc:
                log.warning("uplink: acting on the collector's answer failed (%s)", type(exc).__name__)

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        s = self.settings
        delay = self._rng.uniform(0.0, min(s.backoff_cap_s, s.backoff_base_s * 2 ** min(attempt, 30)))
        if retry_after is not None:
            delay = max(delay, min(retry_after, s.retry_after_cap_s))
        return delay

    async def _pause(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except asyncio.TimeoutError:
            pass


#: Starts a named background loop and hands back its task (``Supervisor.task`` fits).
Spawn = Callable[[str, Callable[[], Coroutine[Any, Any, None]]], "asyncio.Task[None]"]


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # an HTTP date: rare from a collector; the backoff applies
    return seconds if seconds >= 0 else None
