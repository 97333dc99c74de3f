"""The ``control_plane`` sink (:mod:`sidecar.export.forwarder`): claims of a trial pinned to the control
plane become ``exchange`` outbox records; nothing else is ever forwarded, and every claim it
does not forward is counted."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec

from sidecar.ingest.claims import Claim
from sidecar.export.forwarder import Forwarder
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.routing import RoutingTable
from sidecar.ingest.wire import Exchange
from sidecar.store import make_store
from tests.harness import exchange, wait_for
from tests.store.factories import trial


def _claim(trial_id: str, i: int) -> Claim:
    return Claim(trial_id, msgspec.convert(exchange(i), Exchange))


async def test_only_claims_of_routed_control_plane_trials_with_retention_are_forwarded(tmp_path: Path) -> None:
    store = make_store(str(tmp_path / "s.db"))
    await store.open()
    routing = RoutingTable()
    routing.add(trial("cp", team="team-a", execution_site="control_plane", prompt_retention=True))
    routing.add(trial("loc", team="team-a", execution_site="local"))
    routing.add(trial("off", team="team-a", execution_site="control_plane", prompt_retention=False))
    funnel = FunnelCounter()
    fwd = Forwarder(store, routing, funnel, queue_size=4, clock=lambda: 5.0)
    await fwd.start()
    try:
        claims = [_claim("cp", 1), _claim("loc", 2), _claim("off", 3), _claim("gone", 4), _claim("cp", 5)]
        assert fwd.handoff.offer_many(claims) == 4, "a full buffer refuses the newest (the tap counts them)"

        async def done() -> bool:
            return fwd.forwarded + sum(fwd.dropped.values()) == 4

        await wait_for(done, what="the forwarder's batch")
        stamp, record = await store.outbox()  # the posture they are forwarded under, ahead of them
        assert {k: v for k, v in json.loads(stamp.body).items() if k in ("kind", "team", "site")} == {
            "kind": "posture", "team": "team-a", "site": "control_plane"}
        body = json.loads(record.body)
        assert (record.record_id, body["kind"], body["trial_id"], body["exchange_id"]) == (
            "exchange:cp:ex-1", "exchange", "cp", "ex-1")
        assert body["request"]["messages"] == exchange(1)["request"]["messages"]
        assert body["response"]["content"] == exchange(1)["response"]["content"]
        assert fwd.dropped == {"not_at_site": 2, "shed_stopped": 1}
        # The same claim again (a re-delivery of the exchange) keeps the first record.
        assert fwd.handoff.offer_many([_claim("cp", 1)]) == 1
        await wait_for(lambda: _forwarded(fwd, 2), what="the second batch")
        assert len(await store.outbox()) == 2
    finally:
        await fwd.stop(1.0)
        await store.close()
    assert fwd.handoff.offer_many([_claim("cp", 9)]) == 0, "closed: the tap counts shed_stopped"


async def _forwarded(fwd: Forwarder, n: int) -> bool:
    return fwd.forwarded >= n

