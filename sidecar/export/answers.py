"""What a sidecar does with the collector's answers (issue 25 item 5): the control plane's word
flows back.

- **A trial the collector no longer runs** (:attr:`uplink.schema.Ack.trials`: its cap reached
  there, stopped, completed, or paused). The forwarder stops forwarding its claims at once and
  counts each in the trial's funnel here — ``cap_reached`` when the cap was reached, else
  ``shed_stopped`` (:meth:`~sidecar.export.forwarder.Forwarder.halt`) — and the sidecar's own
  record of the trial, still ``running``, takes the collector's status (ended for an end, paused
  for a pause), so the tap stops sampling it once its routing is refreshed. The two funnels add
  up: what was forwarded is counted at the collector, what was stopped here.
- **An exchange refused for good** (``content_not_permitted``: the collector's posture for the
  team does not allow content). Its record leaves the outbox (the delivery loop deletes what an
  answer names) and its one outcome is counted here, ``not_at_site``, so the exchange is not lost
  from both sites' totals.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Callable

from sidecar.export.forwarder import SITE, Forwarder
from sidecar.ingest.funnel import FunnelCounter
from sidecar.store.base import Store
from uplink.schema import Ack

log = logging.getLogger("shadowtrial.forwarder")

#: Statuses that end a trial at the collector; any other non-running one is a pause.
ENDED = ("cap_reached", "stopped", "completed")
REASON = "the control plane no longer runs it ({status})"


class ControlPlaneAnswers:
    """``await answers(ack)`` after each answer (``Delivery(on_answer=...)``); see the module's docs."""

    def __init__(self, store: Store, forwarder: Forwarder | None, funnel: FunnelCounter, *,
                 clock: Callable[[], float]) -> None:
        self._store = store
        self._forwarder = forwarder
        self._funnel = funnel
        self._clock = clock
        #: Exchanges refused at the collector and counted here.
        self.refused = 0

    async def __call__(self, ack: Ack) -> None:
        refused: Counter[str] = Counter()
        for record_id in ack.refused:
            kind, _, rest = record_id.partition(":")
            trial_id = rest.rpartition(":")[0]
            if kind == "exchange" and trial_id:
                refused[trial_id] += 1
        for trial_id, n in refused.items():
            self._funnel.add(trial_id, "not_at_site", n)
            self.refused += n
            log.warning("trial %s: %d exchange(s) refused at the collector: counted not_at_site", trial_id, n)
        for trial_id, status in ack.trials.items():
            await self._halt(trial_id, status)

    async def _halt(self, trial_id: str, status: str) -> None:
        ended = status in ENDED
        if self._forwarder is not None:
            self._forwarder.halt(trial_id, "cap_reached" if status == "cap_reached" else "shed_stopped")
        record = await self._store.get_trial(trial_id)
        if record is None or record.status != "running" or record.execution_site != SITE:
            return
        _, changed = await self._store.set_trial_status(trial_id, status, REASON.format(status=status), ended=ended,
                                                        now=self._clock())
        if changed:
            log.warning("trial %s: %s at the control plane; its exchanges are no longer forwarded", trial_id, status)
