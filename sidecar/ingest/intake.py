"""Intake: the stage between the gateway's exchanges and the sinks that run them.

:func:`offer` matches a screened batch against the routing table, samples, hands each
sampled :class:`~sidecar.ingest.claims.Claim` to the sink of its trial's pinned
execution site (:class:`~sidecar.ingest.handoff.Handoff`), journals what the sink took
and counts every outcome. It never awaits: the HTTP tap (:mod:`sidecar.api.tap`) and the
LiteLLM webhook call it on the tap's loop.

It takes the few things it uses (:class:`IntakeParts`), not the runtime: the routing
table, the sinks and their journals, the funnel counter, the process's counters, the
retention window's buffer and the outbox's fullness. The sinks (the engine, its process,
the control-plane forwarder) consume the contract below them; none is imported here.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from functools import lru_cache
from operator import attrgetter
from typing import Callable, Mapping, Protocol, Sequence

from policies.sampling import sampler
from sidecar.ingest.claims import Claim
from sidecar.ingest.fast_decode import decode_fast
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.journal import Journal
from sidecar.ingest.routing import Favour, RoutingTable
from sidecar.ingest.segment_keys import exchange_keys
from sidecar.ingest.screen import Screened, screen_exchanges
from sidecar.ingest.wire import Exchange, TapReply, decode_body

log = logging.getLogger("shadowtrial.tap")


class ExchangeBuffer(Protocol):
    """Where the retention window takes the exchanges of a batch (buffered, never awaited)."""

    def offer(self, exchanges: Sequence[Exchange]) -> int: ...


class IntakeCounts(Protocol):
    """The process's counts intake adds to (:class:`sidecar.telemetry.counters.TapCounters`)."""

    exchanges_received: int
    cases_sampled: int
    cases_shed: int
    tap_exchanges_refused_team: int
    journal_write_errors: int

    def figures_excluded(self, excluded: Mapping[str, int]) -> None: ...


class IntakeParts(Protocol):
    """What intake reads and counts into; the runtime provides them, read at each batch."""

    @property
    def routing(self) -> RoutingTable: ...
    @property
    def sinks(self) -> Mapping[str, Handoff[Claim]]: ...
    @property
    def journals(self) -> Mapping[str, Journal]: ...
    @property
    def funnel(self) -> FunnelCounter: ...
    @property
    def counters(self) -> IntakeCounts: ...
    @property
    def retention(self) -> ExchangeBuffer | None: ...
    @property
    def outbox_full(self) -> bool: ...


def ingest(parts: IntakeParts, body: bytes, content_type: str, teams: frozenset[str] | None = None) -> TapReply:
    """Decode, screen, match, sample and hand claims to their sinks. Never awaits. Raises DecodeError.

    A claim goes to the sink of its trial's pinned execution site; a full sink
    refuses the newest claims, which are counted ``shed_queue_full`` (``shed_stopped``
    once the sink closed: stopping, or its engine's process died). ``teams``: the
    teams the gateway's credential may report (None: any); an exchange for another
    team is refused and counted, never matched."""
    decoded = decode_fast(body, content_type) or decode_body(body, content_type)
    return offer(parts, screen_exchanges(decoded.exchanges, decoded.where, decoded.plain), teams)


def offer(parts: IntakeParts, screened: Screened, teams: frozenset[str] | None = None) -> TapReply:
    """The part of :func:`ingest` after decoding: match, sample, hand claims to their sinks."""
    exchanges = screened.exchanges
    refused = 0
    if teams is not None:
        allowed = [ex for ex in exchanges if ex.team in teams]
        refused = len(exchanges) - len(allowed)
        exchanges = allowed
        if refused:
            parts.counters.tap_exchanges_refused_team += refused
    routes = parts.routing.current  # one consistent table for the whole batch
    counts: defaultdict[tuple[str, str], int] = defaultdict(int)  # a Counter costs a Python call to build
    claims: dict[str, list[Claim]] = {}
    content_free: set[str] = set()
    outbox_shed = 0
    outbox_full = parts.outbox_full  # its result could not be recorded for the collector
    # Per trial, for this batch: its sampling decision (the keyed hash state after its id is
    # computed once) and its not_sampled count (the common outcome, counted without a tuple
    # each). A gateway's batch is mostly one team, model, route and gateway: the routes of
    # the previous exchange are reused while those four stay the same.
    deciders: dict[str, Callable[[str], bool]] = {}
    not_sampled: dict[str, int] = {}
    plan: list[tuple[str, Callable[[str], bool], str, bool, Favour | None]] = []
    # When every trial of the plan samples at rate 0 (a trial being set up, or paused by its
    # rate) and favours no segment, an exchange that is not redacted is not_sampled for each:
    # counted as a run, with no call and no count per exchange (issue 29). ``run`` is added to
    # each at a plan change.
    never = False
    run = 0
    team: str | None = None
    model = gateway = ""
    path: str | None = None
    exchanges_to_run = exchanges
    if exchanges and _one_key(exchanges, routes.key_fields):
        # The common batch: one team and model (route and gateway too, when a trial filters on
        # them: what the table matches on), nothing redacted. When no
        # trial matches it, or every matching one samples at rate 0, it is decided whole, in
        # C-level passes over the batch, with no Python step per exchange; when one of them
        # samples (favouring no segment), only its decision is taken per exchange (issue 29).
        # What it decides, counts and hands over, in the same order, is what the loop below
        # would (tests/sidecar/ingest/test_intake.py compares the two).
        matched = routes.match(exchanges[0])
        sampling = [route for route in matched if route.sample_rate != 0.0 or route.favour is not None]
        if len(sampling) <= 1 and all(route.favour is None for route in sampling):
            for route in matched:
                if route not in sampling:
                    not_sampled[route.trial_id] = len(exchanges)
            for route in sampling:
                trial_id = route.trial_id
                pick = _sampler(trial_id, route.sample_rate)
                picked = [ex for ex in exchanges if pick(ex.exchange_id)]
                if len(picked) < len(exchanges):
                    not_sampled[trial_id] = len(exchanges) - len(picked)
                if not picked:
                    continue
                if route.decided:  # stopped on its decision: counted, never run (sidecar.trials.decided)
                    counts[(trial_id, "after_decision")] += len(picked)
                elif outbox_full:
                    counts[(trial_id, "shed_outbox_full")] += len(picked)
                    outbox_shed += len(picked)
                else:
                    claims[route.execution_site] = [Claim(trial_id, ex) for ex in picked]
                    if not route.prompt_retention:
                        content_free.add(trial_id)
            exchanges_to_run = []
    for ex in exchanges_to_run:
        if ex.team != team or ex.model != model or ex.route != path or ex.gateway != gateway:
            if run:
                for trial_id, _, _, _, _ in plan:
                    not_sampled[trial_id] = not_sampled.get(trial_id, 0) + run
                run = 0
            team, model, path, gateway = ex.team, ex.model, ex.route, ex.gateway
            plan = []
            never = True
            for route in routes.match(ex):
                decide = deciders.get(route.trial_id)
                if decide is None:
                    decide = deciders[route.trial_id] = _sampler(route.trial_id, route.sample_rate)
                plan.append((route.trial_id, decide, route.execution_site, route.decided, route.favour))
                # sampler: rate 0 never samples; a segment short of its minimum may still be taken
                never = never and route.sample_rate == 0.0 and route.favour is None
                if not route.prompt_retention:
                    content_free.add(route.trial_id)
        if not plan:
            continue
        if ex.redacted:
            for trial_id, _, _, _, _ in plan:
                counts[(trial_id, "skipped_redacted")] += 1
            continue
        if never:
            run += 1
            continue
        for trial_id, decide, site, decided, favour in plan:
            if not decide(ex.exchange_id) and (favour is None or not favour.wants(exchange_keys(favour.segments, ex))):
                not_sampled[trial_id] = not_sampled.get(trial_id, 0) + 1
            elif decided:  # stopped on its decision: counted, never run (sidecar.trials.decided)
                counts[(trial_id, "after_decision")] += 1
            elif outbox_full:
                counts[(trial_id, "shed_outbox_full")] += 1
                outbox_shed += 1
            else:
                claims.setdefault(site, []).append(Claim(trial_id, ex))
    if run:
        for trial_id, _, _, _, _ in plan:
            not_sampled[trial_id] = not_sampled.get(trial_id, 0) + run
    for trial_id, n in not_sampled.items():
        counts[(trial_id, "not_sampled")] += n
    sampled, shed = 0, outbox_shed
    for site, batch in claims.items():
        sink = parts.sinks.get(site)
        journal = parts.journals.get(site)  # each sink's claims are written to its own journal
        if sink is None:
            taken = 0
        elif journal is None:
            taken = sink.offer_many(batch)
        else:
            batch = journal.number(batch)
            taken = sink.offer_many(batch)
            _write(parts, journal, batch[:taken], content_free)
        sampled += taken
        outcome = "not_at_site" if sink is None else "shed_stopped" if sink.closed else "shed_queue_full"
        for claim in batch[taken:]:
            shed += 1
            counts[(claim.trial_id, outcome)] += 1
    if counts:
        parts.funnel.add_many(counts)
    if parts.retention is not None:  # buffered for its writer: never awaited here
        parts.retention.offer(exchanges)
    parts.counters.figures_excluded(screened.excluded)
    parts.counters.exchanges_received += len(exchanges)
    parts.counters.cases_sampled += sampled
    parts.counters.cases_shed += shed
    return TapReply(accepted=len(exchanges), sampled=sampled, shed=shed, refused=refused)


#: A trial's sampling decision, built once per (trial, rate) rather than per batch (its keyed hash
#: state costs as much as hashing a few exchanges; issue 29). Bounded: a rate change adds an entry.
_sampler = lru_cache(maxsize=1024)(sampler)

#: Readers of an exchange's routing fields (those :attr:`Routes.key_fields` names) and of its
#: redaction flag, in C.
_FIELD = {name: attrgetter(name) for name in ("team", "model", "route", "gateway")}
_REDACTED = attrgetter("redacted")


def _one_key(exchanges: list[Exchange], fields: tuple[str, ...]) -> bool:
    """Whether the batch is one in the routing fields the table reads, and nothing in it is
    redacted (C-level passes over it): :func:`offer` may then decide it whole. Only the fields
    some trial matches on are compared: two passes, not four, when none filters on a route or
    a gateway (issue 29)."""
    return not any(map(_REDACTED, exchanges)) and all(len(set(map(_FIELD[f], exchanges))) == 1 for f in fields)


def _write(parts: IntakeParts, journal: Journal, claims: list[Claim], content_free: set[str]) -> None:
    """Journal the claims the sink took, before the tap answers (a crash cannot lose them)."""
    try:
        journal.write(claims, content_free)
    except OSError as exc:  # disk full, say: the claims still run; only crash-safety is lost
        counters = parts.counters
        counters.journal_write_errors += 1
        if counters.journal_write_errors == 1 or counters.journal_write_errors % 1000 == 0:
            log.error("intake journal write failed (%s): sampled cases are not crash-safe", exc.strerror)
