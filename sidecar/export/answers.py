"""What a sidecar does with the collector's answers (issue 25 item 5): the control plane's word
flows back.

- **A trial the collector no longer runs** (:attr:`uplink.schema.Ack.trials`: its cap reached
  there, stopped, completed, or paused). For an end the forwarder stops forwarding its claims at
  once and counts each in the trial's funnel here — ``cap_reached`` when the cap was reached, else
  ``shed_stopped`` (:meth:`~sidecar.export.forwarder.Forwarder.halt`); a paused trial's claims
  are counted ``shed_stopped`` because it is no longer routed (a resume routes it again) — and the sidecar's own
  record of the trial, still ``running``, takes the collector's status (ended for an end, paused
  for a pause) as any status change is recorded: the trial's row, with its ``trial_spec`` in the
  same transaction (the ``trial_state`` publisher sees the row move), and the trial leaves the
  tap's routes at once, so nothing more is sampled for it here (a fleet peer drops it at its next
  routing refresh; what it had sampled is counted ``shed_stopped`` by its forwarder). The two
  funnels add up: what was forwarded is counted at the collector, what was stopped here.
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
from sidecar.ingest.routing import RoutingTable
from sidecar.store.base import Store
from sidecar.trials.spec import spec_effects
from uplink.schema import Ack

log = logging.getLogger("shadowtrial.forwarder")

#: Statuses that end a trial at the collector; any other non-running one is a pause.
ENDED = ("cap_reached", "stopped", "completed")
#: The sidecar's own status for the collector's: the same where the sidecar has it; another end
#: is ``stopped``, another pause ``posture_changed`` (a resume pins the posture anew).
_LOCAL = {"cap_reached": "cap_reached", "stopped": "stopped", "completed": "stopped",
          "posture_changed": "posture_changed", "starter_unauthorized": "starter_unauthorized"}
REASON = "the control plane no longer runs it ({status})"
#: The collector's copy stopped on its decision (issue 26): not an end and not a pause — the
#: trial stays routed, flagged, so its later sampled exchanges are counted ``after_decision``.
DECIDED = "decided"


class ControlPlaneAnswers:
    """``await answers(ack)`` after each answer (``Delivery(on_answer=...)``); see the module's docs."""

    def __init__(self, store: Store, forwarder: Forwarder | None, funnel: FunnelCounter, *,
                 clock: Callable[[], float], routing: RoutingTable | None = None) -> None:
        self._store = store
        self._routing = routing
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
        if status == DECIDED:
            await self._decided(trial_id)
            return
        ended = status in ENDED
        if ended and self._forwarder is not None:  # final: a pause is undone by a resume, which routes it again
            self._forwarder.halt(trial_id, "cap_reached" if status == "cap_reached" else "shed_stopped")
        record = await self._store.get_trial(trial_id)
        if record is None or record.execution_site != SITE:
            return
        if record.status == "running":
            local = _LOCAL.get(status, "stopped" if ended else "posture_changed")
            reason, now = REASON.format(status=status), self._clock()
            _, changed = await self._store.set_trial_status(
                trial_id, local, reason, ended=ended, now=now,
                effects=spec_effects(record, status=local, reason=reason, at=now),
            )
            if changed:
                log.warning("trial %s: %s at the control plane; its exchanges are no longer forwarded", trial_id,
                            status)
        if self._routing is not None:  # not running here now: the tap samples it no more, from this moment
            self._routing.remove(trial_id)

    async def _decided(self, trial_id: str) -> None:
        """The collector's copy decided and stopped dispatching: what the forwarder still holds is
        counted ``after_decision``; the trial here reads ``decided`` (promotable, stoppable) and
        stays in the tap's routes flagged, so later sampled exchanges are ``after_decision`` too."""
        if self._forwarder is not None:
            self._forwarder.halt(trial_id, "after_decision")
        record = await self._store.get_trial(trial_id)
        if record is None or record.execution_site != SITE or record.status != "running":
            return
        reason, now = REASON.format(status=DECIDED), self._clock()
        after, changed = await self._store.set_trial_status(
            trial_id, DECIDED, reason, ended=False, now=now,
            effects=spec_effects(record, status=DECIDED, reason=reason, at=now),
        )
        if changed:
            log.info("trial %s: decided at the control plane; its exchanges are no longer forwarded", trial_id)
        if after is not None and self._routing is not None:
            self._routing.add(after)
