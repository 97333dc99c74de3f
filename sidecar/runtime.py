"""The runtime: every resource of one sidecar process, opened and closed in order.

Held on the aiohttp apps under :data:`RUNTIME` (no module globals). ``start``
opens the store, recovers cases left in flight by a crash, loads running
trials and starts the engine; ``stop`` drains the engine within the deadline,
flushes the funnel, closes provider clients, then the store.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import Counter
from typing import Callable

import httpx
from aiohttp import web

from judge.paired import PairedJudge
from policies.money import Price
from sidecar.engine.completer_adapter import ProviderCompleter
from sidecar.config import Config, resolve_model
from sidecar.engine.case import Engine, Job
from sidecar.errors import ConfigError, Conflict, NotFound
from sidecar.ingest.funnel import FunnelCounter
from sidecar.engine.handoff import Intake
from sidecar.prices import PriceBook, load_price_map
from sidecar.providers.base import Provider
from sidecar.providers.factory import make_provider
from sidecar.engine.registry import ActiveTrial, Registry
from sidecar.store.base import Store
from sidecar.store.records import TrialRecord
from sidecar.store.sqlite import SQLiteStore
from sidecar.trials import Resolved, TrialCreate, TrialDefaults, build_trial, spec_of

log = logging.getLogger("shadowtrial")

RUNTIME: web.AppKey["Runtime"] = web.AppKey("runtime", object)  # type: ignore[arg-type]

FUNNEL_FLUSH_S = 0.5


class Runtime:
    def __init__(
        self,
        config: Config,
        *,
        store: Store | None = None,
        clock: Callable[[], float] = time.time,
        providers: dict[str, Provider] | None = None,
    ) -> None:
        self.config = config
        self.secrets = config.secrets
        self.clock = clock
        self.store: Store = store or SQLiteStore(config.store.path)
        self.registry = Registry()
        self.funnel = FunnelCounter()
        self.intake: Intake[Job] = Intake(config.tap.queue_size)
        self.counters: Counter[str] = Counter()
        self.tap_token: str | None = config.secrets.tap_token
        self.providers: dict[str, Provider] = providers or {}
        self._own_providers = providers is None
        self.price_book = self._price_book()
        self.engine = Engine(
            store=self.store,
            registry=self.registry,
            intake=self.intake,
            funnel=self.funnel,
            workers=config.engine.workers,
            shadow_header=config.engine.shadow_header,
            clock=clock,
        )
        self._flusher: asyncio.Task[None] | None = None
        self.ready = False
        self.recovered: list[str] = []

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        if self._own_providers:
            for name, p in self.config.providers.items():
                self.providers[name] = make_provider(
                    p.kind,
                    p.base_url,
                    self.secrets.get(name),
                    timeout=httpx.Timeout(p.timeout_s, connect=p.connect_timeout_s),
                    limits=httpx.Limits(max_connections=p.max_connections, max_keepalive_connections=p.max_connections),
                    deadline_s=p.deadline_s,
                    max_retries=p.max_retries,
                )
        await self.store.open()
        self.recovered = await self.store.recover_in_flight(self.clock())
        if self.recovered:
            log.warning("marked %d case(s) found in flight as indeterminate; none is re-run", len(self.recovered))
        for record in await self.store.list_trials(status="running"):
            self.registry.add(self.activate(record))
        self.engine.start()
        self._flusher = asyncio.create_task(self._flush_loop(), name="shadowtrial-funnel-flush")
        self.ready = True

    async def stop(self) -> None:
        self.ready = False
        await self.engine.drain(self.config.engine.drain_seconds)
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
        await self.funnel.flush(self.store)
        if self._own_providers:
            for p in self.providers.values():
                await p.aclose()
        await self.store.close()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(FUNNEL_FLUSH_S)
            try:
                await self.funnel.flush(self.store)
            except Exception:
                log.exception("funnel flush failed; counts kept for the next try")

    # -- models --------------------------------------------------------------

    def _price_book(self) -> PriceBook:
        price_map: dict[str, Price] = {}
        if self.config.prices.map_file:
            price_map = load_price_map(self.config.prices.map_file)
        return self.config.price_book(price_map)

    def resolve(self, name: str) -> Resolved:
        try:
            r = resolve_model(self.config, name, self.price_book)
        except ConfigError as exc:
            raise LookupError(str(exc)) from exc
        return Resolved(provider=r.provider_name, upstream=r.upstream_model, price=r.price)

    def activate(self, record: TrialRecord) -> ActiveTrial:
        cand = self.resolve(record.candidate_model)
        judge = self.resolve(record.judge_model)
        spec = spec_of(record)
        headers = {self.config.engine.shadow_header: "1", "X-Shadowtrial-Trial": record.id}
        completer = ProviderCompleter(self.providers[judge.provider], judge.upstream, headers)
        inc_price = (
            Price(record.incumbent_price_in, record.incumbent_price_out)
            if record.incumbent_price_in is not None and record.incumbent_price_out is not None
            else None
        )
        return ActiveTrial(
            record=record,
            candidate=self.providers[cand.provider],
            candidate_upstream=cand.upstream,
            judge=PairedJudge(completer, spec),
            judge_spec=spec,
            candidate_price=Price(record.candidate_price_in, record.candidate_price_out),
            judge_price=Price(record.judge_price_in, record.judge_price_out),
            incumbent_price=inc_price,
        )

    # -- trials --------------------------------------------------------------

    def defaults(self) -> TrialDefaults:
        j = self.config.judge
        return TrialDefaults(
            judge_model=j.model,
            judge_rubric=j.rubric,
            judge_temperature=j.temperature,
            judge_max_tokens=j.max_tokens,
            audit_share=j.audit_share,
            candidate_max_tokens=self.config.engine.default_max_tokens,
        )

    def prompt_retention(self, team: str) -> bool:
        team_cfg = self.config.teams.get(team)
        return True if team_cfg is None else team_cfg.prompt_retention

    async def create_trial(self, body: TrialCreate, raw: bytes, idempotency_key: str | None) -> tuple[TrialRecord, bool]:
        """Create (or, for a repeated Idempotency-Key, return) a trial. Returns (trial, created).

        ``raw`` is the body the key's fingerprint is taken over; the admin API passes the
        canonical encoding of ``body``, not the bytes as received.
        """
        record = build_trial(
            body,
            resolve=self.resolve,
            defaults=self.defaults(),
            prompt_retention=self.prompt_retention(body.team),
            now=self.clock(),
        )
        active = self.activate(record)  # every model must be callable before the trial exists
        body_hash = hashlib.sha256(raw).hexdigest() if idempotency_key else None
        stored = await self.store.create_trial(record, idempotency_key=idempotency_key, body_hash=body_hash)
        created = stored.id == record.id
        if created:
            self.registry.add(active)
        return stored, created

    async def get_trial(self, trial_id: str) -> TrialRecord:
        record = await self.store.get_trial(trial_id)
        if record is None:
            raise NotFound(f"no trial {trial_id!r}")
        return record

    async def stop_trial(self, trial_id: str) -> TrialRecord:
        updated, changed = await self.store.set_trial_status(trial_id, "stopped", "stopped by operator", ended=True)
        if updated is None:
            raise NotFound(f"no trial {trial_id!r}")
        if not changed:  # the update is conditional, so of two concurrent stops exactly one wins
            raise Conflict(f"trial {trial_id} is already stopped", code="trial_not_running")
        self.registry.set_status(trial_id, "stopped")
        return updated
