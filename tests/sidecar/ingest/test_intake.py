"""Intake's counts when a batch mixes trials at rate 0 (counted as runs) with sampled ones."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from policies.sampling import is_sampled

from sidecar.ingest import intake
from sidecar.ingest.claims import Claim
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.intake import offer
from sidecar.ingest.routing import Route, RoutingTable, Routes
from sidecar.ingest.screen import Screened
from sidecar.ingest.wire import Exchange, ExchangeRequest, ExchangeResponse
from sidecar.telemetry.counters import TapCounters


def _ex(i: int, team: str, model: str, *, route: str | None = None, redacted: bool = False,
        gateway: str = "gw") -> Exchange:
    return Exchange(f"ex-{i}", team, model, ExchangeRequest([{"role": "user", "content": "hi"}]),
                    ExchangeResponse("hello"), gateway=gateway, route=route, redacted=redacted)


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


@pytest.mark.parametrize("one_key", [True, False], ids=["decided-whole", "per-exchange"])
def test_a_trials_rate_change_changes_its_decisions_at_the_next_batch(one_key: bool) -> None:
    # Intake keeps a trial's sampling decision between batches (built once per trial and rate):
    # the next batch after a rate change is decided at the new rate, exactly as is_sampled says.
    batch = [_ex(i, "t", "m", route="/r" if one_key or i % 2 else "/s") for i in range(400)]
    # A trial filtering on a route makes the route part of the key: the mixed batch is per exchange.
    beside = [] if one_key else [Route("other", "t", "m", "/never", None, 0.0, "local")]
    for rate in (0.05, 0.5, 0.05, 1.0):
        parts = _parts(Route("trial", "t", "m", None, None, rate, "local"), *beside)
        assert intake._one_key(batch, parts.routing.current.key_fields) is one_key
        reply = offer(parts, Screened(batch, Counter()))
        assert reply.sampled == sum(is_sampled("trial", ex.exchange_id, rate) for ex in batch), rate


class _SpyJournal:
    """Numbers claims as a journal would and keeps what each write was given."""

    def __init__(self) -> None:
        self.writes: list[tuple[list[tuple[str, str, int]], set[str]]] = []
        self.next = 0

    def number(self, claims: list[Claim]) -> list[Claim]:
        out = [Claim(c.trial_id, c.exchange, seq) for seq, c in enumerate(claims, start=self.next + 1)]
        self.next += len(claims)
        return out

    def write(self, claims: list[Claim], content_free: set[str] = set()) -> None:
        self.writes.append(([(c.trial_id, c.exchange.exchange_id, c.seq) for c in claims], set(content_free)))


def _run_offer(routes: list[Route], batch: list[Exchange], *, sink_room: int, outbox_full: bool) -> tuple[object, ...]:
    parts = _parts(*routes)
    parts.sinks = {"local": Handoff(10_000)}
    parts.sinks["local"].offer_many([None] * (10_000 - sink_room))  # type: ignore[list-item]
    journal = _SpyJournal()
    parts.journals = {"local": journal}
    parts.outbox_full = outbox_full
    reply = offer(parts, Screened(batch, Counter()))
    queued = [(c.trial_id, c.exchange.exchange_id, c.seq) for c in parts.sinks["local"].drain_remaining() if c]
    funnel = {r.trial_id: parts.funnel.pending(r.trial_id) for r in routes}
    return reply, funnel, queued, journal.writes, parts.counters.cases_sampled, parts.counters.cases_shed


@pytest.mark.parametrize("case", [
    "one sampled", "sampled beside rate 0", "rate 1", "decided", "outbox full", "retention off",
    "sink nearly full", "no sink at its site", "nobody matches", "two sampled",
])
def test_a_one_key_batch_decided_whole_counts_and_hands_over_as_the_per_exchange_loop(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 29: a batch of one routing key is decided whole; it must give what the loop gives
    # on the same input: the reply, each trial's funnel counts, the claims queued (in order,
    # numbered) and what the journal was given, retention-off trials included.
    routes = {
        "one sampled": [Route("s", "t", "m", None, None, 0.3, "local")],
        "sampled beside rate 0": [Route("z", "t", "m", None, None, 0.0, "local"), Route("s", "t", "m", None, None, 0.5, "local")],
        "rate 1": [Route("s", "t", "m", None, None, 1.0, "local")],
        "decided": [Route("s", "t", "m", None, None, 0.5, "local", decided=True)],
        "outbox full": [Route("s", "t", "m", None, None, 0.5, "local")],
        "retention off": [Route("s", "t", "m", None, None, 0.5, "local", prompt_retention=False)],
        "sink nearly full": [Route("s", "t", "m", None, None, 0.5, "local")],
        "no sink at its site": [Route("s", "t", "m", None, None, 0.5, "elsewhere")],
        "nobody matches": [Route("s", "u", "m", None, None, 0.5, "local")],
        "two sampled": [Route("a", "t", "m", None, None, 0.5, "local"), Route("b", "t", "m", None, None, 0.2, "local")],
    }[case]
    batch = [_ex(i, "t", "m") for i in range(60)]
    room = 7 if case == "sink nearly full" else 10_000
    full = case == "outbox full"
    whole = _run_offer(routes, batch, sink_room=room, outbox_full=full)
    monkeypatch.setattr(intake, "_one_key", lambda exchanges, fields: False)  # the per-exchange loop
    loop = _run_offer(routes, batch, sink_room=room, outbox_full=full)
    assert whole == loop
    reply = whole[0]
    assert reply.accepted == 60 and (case in ("nobody matches", "decided", "outbox full") or reply.sampled + reply.shed > 0)


def test_the_routing_key_is_the_fields_some_trial_matches_on() -> None:
    assert Routes([Route("a", "t", "m", None, None, 0.5, "local")]).key_fields == ("team", "model")
    assert Routes([Route("a", "t", "m", None, None, 0.5, "local"), Route("b", "t", "m", "/r", None, 0.5, "local")]
                  ).key_fields == ("team", "model", "route")
    assert Routes([Route("a", "t", "m", None, "gw", 0.5, "local")]).key_fields == ("team", "model", "gateway")
    assert Routes().key_fields == ("team", "model")


@pytest.mark.parametrize("filters", ["none", "route", "gateway"])
def test_a_batch_mixed_in_fields_no_trial_matches_on_is_decided_whole_as_the_loop_would(
    filters: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # issue 29: the batch's routes and gateways differ; when no trial filters on them the batch
    # is still one key, decided whole, and gives what the per-exchange loop gives; when one
    # does, it takes the loop.
    routes = [Route("s", "t", "m", None, None, 0.3, "local")]
    if filters == "route":
        routes.append(Route("r", "t", "m", "/r1", None, 0.5, "local"))
    if filters == "gateway":
        routes.append(Route("g", "t", "m", None, "gw1", 0.5, "local"))
    batch = [_ex(i, "t", "m", route=f"/r{i % 2}", gateway=f"gw{i % 3}") for i in range(60)]
    assert intake._one_key(batch, Routes(routes).key_fields) is (filters == "none")
    whole = _run_offer(routes, batch, sink_room=10_000, outbox_full=False)
    monkeypatch.setattr(intake, "_one_key", lambda exchanges, fields: False)
    assert whole == _run_offer(routes, batch, sink_room=10_000, outbox_full=False)
    assert whole[0].sampled > 0  # type: ignore[attr-defined]
