"""The alert webhook: each alert transition is POSTed, signed, to ``[alerts] webhook_url``.

Contract:

- Transitions come from the store (written in the transaction that made them, so one is
  never lost to a crash); a background task on the runtime's loop polls them every
  ``poll_seconds``. The engine never waits on it: the engine runs on its own loop and only
  writes rows.
- Each POST is JSON (:func:`payload`), content-free (ids, counts, the detector's figures),
  signed (:mod:`sidecar.alerts.signing`) with a fresh timestamp per attempt.
- A 2xx delivers. 408, 425, 429, 5xx and connection errors are retried with jittered
  exponential backoff (``backoff_base_seconds`` doubling, capped at ``backoff_cap_seconds``;
  the delay drawn uniformly from half to all of it) up to ``max_attempts`` in all; any other
  status is a refusal no retry changes. Either way the transition's delivery ends, logged.
- At-least-once: a crash between a receiver's 2xx and the store's mark sends it again;
  receivers deduplicate by ``id`` (``<alert id>:<state>``).
- Shutdown cancels the task; what is not delivered is sent by the next life.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from typing import Any, Callable

import httpx

from sidecar.alerts.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, signature
from sidecar.config import AlertsConfig
from sidecar.store.base import Store
from sidecar.store.watch_records import AlertTransition
from sidecar.supervise import RESTART, Supervisor

log = logging.getLogger("shadowtrial.alerts")

RETRYABLE = frozenset({408, 425, 429, 500, 502, 503, 504})


def payload(t: AlertTransition, evidence: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON body of one transition (docs/alerts.md shows templates for Alertmanager and PagerDuty)."""
    return {
        "version": 1,
        "id": t.id,
        "alert_id": t.alert_id,
        "watch_id": t.watch_id,
        "team": t.team,
        "state": t.state,
        "at": t.at,
        "actor": t.actor,
        "summary": f"watch {t.watch_id} ({t.team}): the replaced model is winning again — alert {t.state}",
        "evidence": evidence,
    }


class AlertWebhook:
    def __init__(
        self, store: Store, config: AlertsConfig, secret: str, *, clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None, rng: random.Random | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        self.store = store
        self._supervisor = supervisor or Supervisor()
        self.config = config
        self._secret = secret.encode()
        self.clock = clock
        self._transport = transport
        self._rng = rng or random.Random()
        self._client: httpx.AsyncClient | None = None
        self._task: asyncio.Task[None] | None = None
        #: Counts by outcome: ``delivered``, ``retried``, ``gave_up``.
        self.counts: dict[str, int] = {"delivered": 0, "retried": 0, "gave_up": 0}

    async def start(self, *, poll: bool = True) -> None:
        """Open the client and, with ``poll``, start the task that delivers what is pending
        (without it, a caller drives :meth:`deliver_pending` itself)."""
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self.config.timeout_seconds), transport=self._transport,
            limits=httpx.Limits(max_connections=4),
        )
        if poll:
            # Restarted if it dies: what is pending is in the store.
            self._task = self._supervisor.task("alert-webhook", self._loop, RESTART)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def _loop(self) -> None:
        while True:
            try:
                await self.deliver_pending()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store is away: try again next poll
                log.warning("alert webhook: pending transitions could not be read (%s)", type(exc).__name__)
            await asyncio.sleep(self.config.poll_seconds)

    async def deliver_pending(self) -> int:
        """Deliver what is pending, oldest first; how many were delivered."""
        delivered = 0
        for t in await self.store.pending_transitions(limit=50):
            delivered += await self.deliver(t)
        return delivered

    async def deliver(self, t: AlertTransition) -> bool:
        alert = await self.store.get_alert(t.alert_id)
        evidence = None if alert is None else json.loads(alert.evidence_json)
        body = json.dumps(payload(t, evidence), separators=(",", ":")).encode()
        attempt = t.attempts
        while True:
            attempt += 1
            status = await self._post(body)
            ok = status is not None and 200 <= status < 300
            retry = not ok and (status is None or status in RETRYABLE) and attempt < self.config.max_attempts
            await self.store.mark_transition(t.id, done=not retry, now=self.clock())
            if ok:
                self.counts["delivered"] += 1
                return True
            if not retry:
                self.counts["gave_up"] += 1
                log.warning("alert webhook: gave up on %s after %d attempt(s) (last status %s)", t.id, attempt, status)
                return False
            self.counts["retried"] += 1
            delay = min(self.config.backoff_cap_seconds, self.config.backoff_base_seconds * 2 ** (attempt - 1))
            await asyncio.sleep(self._rng.uniform(delay / 2, delay))

    async def _post(self, body: bytes) -> int | None:
        assert self._client is not None, "webhook not started"
        stamp = str(int(self.clock()))
        headers = {
            "Content-Type": "application/json",
            TIMESTAMP_HEADER: stamp,
            SIGNATURE_HEADER: signature(self._secret, stamp, body),
        }
        try:
            response = await self._client.post(self.config.webhook_url, content=body, headers=headers)
        except httpx.HTTPError as exc:
            log.info("alert webhook: POST failed (%s)", type(exc).__name__)
            return None
        return response.status_code
