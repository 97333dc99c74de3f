"""Intake's counts when a batch mixes trials at rate 0 (counted as runs) with sampled ones."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.intake import offer
from sidecar.ingest.routing import Route, RoutingTable, Routes
from sidecar.ingest.screen import Screened
from sidecar.ingest.wire import Exchange, ExchangeRequest, ExchangeResponse
from sidecar.telemetry.counters import TapCounters


def _ex(i: int, team: str, model: str, *, route: str | None = None, redacted: bool = False) -> Exchange:
    return Exchange(f"ex-{i}", team, model, ExchangeRequest([{"role": "user", "content": "hi"}]),
                    ExchangeResponse("hello"), gateway="gw", route=route, redacted=redacted)


def _parts(*routes: Route) -> SimpleNamespace:
    table = RoutingTable()
    table.current = Routes(routes)
    return SimpleNamespace(routing=table, sinks={"local": Handoff(10_000)}, journals={}, funnel=FunnelCounter(),
                           counters=TapCounters(), retention=None, outbox_full=False)


def test_rate_zero_runs_count_every_exchange_once_per_trial_across_key_changes() -> None:
    # Two trials at rate 0 on one key, one at rate 1 on another, exchanges alternating in runs,
    # a redacted one and one no trial matches in the middle: each count is exact.
    parts = _parts(
        Route("zero-a", "t", "m", None, None, 0.0, "local"),
        Route("zero-b", "t", "m", None, None, 0.0, "local"),
        Route("all", "t", "m2", None, None, 1.0, "local"),
    )
    keys = ["m"] * 3 + ["m2"] * 2 + ["m"] * 4 + ["other"] + ["m"] * 2 + ["m2"]
    batch = [_ex(i, "t", model) for i, model in enumerate(keys)]
    batch.insert(4, _ex(99, "t", "m", redacted=True))
    reply = offer(parts, Screened(batch, Counter()))
    pending = {t: parts.funnel.pending(t) for t in ("zero-a", "zero-b", "all")}
    assert pending == {
        "zero-a": {"not_sampled": 9, "skipped_redacted": 1},
        "zero-b": {"not_sampled": 9, "skipped_redacted": 1},
        "all": {},
    }
    assert (reply.accepted, reply.sampled, reply.shed) == (len(batch), 3, 0)
    assert parts.sinks["local"].depth == 3


def test_rate_zero_beside_a_sampled_trial_on_the_same_key_takes_the_per_exchange_path() -> None:
    parts = _parts(Route("zero", "t", "m", None, None, 0.0, "local"), Route("all", "t", "m", None, None, 1.0, "local"))
    reply = offer(parts, Screened([_ex(i, "t", "m") for i in range(5)], Counter()))
    assert parts.funnel.pending("zero") == {"not_sampled": 5}
    assert reply.sampled == 5


def test_a_one_key_batch_is_decided_whole_at_rate_zero_and_per_exchange_once_redacted() -> None:
    parts = _parts(Route("zero", "t", "m", None, None, 0.0, "local"))
    offer(parts, Screened([_ex(i, "t", "m") for i in range(7)], Counter()))
    assert parts.funnel.pending("zero") == {"not_sampled": 7}
    offer(parts, Screened([_ex(i, "t", "m", redacted=i == 3) for i in range(7)], Counter()))
    assert parts.funnel.pending("zero") == {"not_sampled": 13, "skipped_redacted": 1}
    reply = offer(parts, Screened([_ex(i, "t", "m", route="/other") for i in range(4)], Counter()))
    assert parts.funnel.pending("zero") == {"not_sampled": 17, "skipped_redacted": 1}  # route None: any route
    assert (reply.accepted, reply.sampled) == (4, 0)
    nobody = offer(parts, Screened([_ex(i, "u", "m") for i in range(3)], Counter()))
    assert (nobody.accepted, nobody.sampled, parts.counters.exchanges_received) == (3, 0, 21)
