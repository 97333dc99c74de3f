"""The runner of comparison groups (issue 13, items 3 and 4; issue 25, items 3 and 4), in the control plane.

:class:`CorpusRunner` runs every ``admitted`` or ``running`` group **side by side**: a driver
looks at the runnable groups (on a wake, and every ``POLL_S``) and queues each item that still
has work on a :class:`~sidecar.collector.corpus.fair.FairQueue`, and a bounded pool of
``workers`` workers (each started through the Supervisor) takes items from it round-robin by
team, then by group, a group holding at most ``items_in_flight`` items at once. Two teams'
experiments and an A/B comparison (a two-arm group) so progress together, each within its own
caps (items in hand; spend, on the group's ledger), and no group waits for another to end. For each item the runner dispatches every repetition of every arm (corpus
evidence: nobody ran those inputs, so *both* arms are called, at twice the cost), the arms'
order rotating from item to item, then grades.

**A group that cannot run** — an arm's model, or a grading judge's, is not a configured alias,
has no price, or its provider is not configured here — ends ``failed`` with its run's
``error`` naming it (``model_unavailable: …``) the first time the runner looks at it: it is
never retried on a timer.

**A fleet of collectors.** Collectors sharing one PostgreSQL split a group's items by lease
(:meth:`~sidecar.collector.store.base.CorpusRunStore.lease_items`, ``FOR UPDATE SKIP LOCKED``):
a worker leases its item before any claim and gives it back when done; the lease refresher
extends it with the claims. So two collectors never work one item at once, and the identity
rules below keep every invocation to one call whatever the interleaving.

**Each invocation** has a stable attempt identity (group, arm, item id, item revision id,
repetition, attempt; :func:`sidecar.collector.store.corpus_run_records.attempt_id`) and is *claimed*
in the store before its call, in the transaction that reserves its worst case against the
group's cap (one conditional update, ``spent + reserved + amount <= cap``); the settlement
after the call charges the priced usage, or the whole reservation when the cost is not
fully known, never more. So the cap is never passed, at any moment, both arms and every
judge call counted.

**Grading**, per the suite's pinned metrics: deterministic graders
(:func:`policies.graders.grade`), latency and cost on each completed answer; the absolute
judge on each answer (its worst case topped up before its call); the paired judge between
the baseline arm's answer and each other arm's answer of the same item revision and
repetition, in an order drawn per pair (:func:`judge.order.presentation_order`), its
version checked against the pinned one (a mismatch is a grading error, never another
version's score).

**Crashes.** Claims and item leases carry the runner's ``owner`` and a lease it refreshes.
After a hard crash nothing refreshes them: once a lease has ended, :meth:`expire_claims`
makes the claim ``invocation_indeterminate`` (identity kept, cost unknown, its reservation
held as spent), and a peer may lease the item (it finds nothing left to call there). An
identity that has any attempt is never claimed again by the scheduler; only an explicit
linked retry (``POST /v1/comparisons/{id}/retry``) queues a new attempt, which the runner
then runs. A graceful :meth:`stop` takes no new item and drains the items in hand within
``drain_s`` — every item a worker took before the stop began, the one it was taking at
that moment included (issue 21 item 11; that one claims nothing): their claimed invocations
finish and are graded; what is still in hand at the deadline is made indeterminate at once.

**Cancelled arms** (``POST /v1/comparisons/{id}/arms/{arm}/cancel``) are skipped from the
next item on; their peers carry on.

**The starter's rights** (issue 24, item 8) are checked again before the group is taken,
before each new item and before an item's grading is claimed (``authorized(subject)``: on the
collector, the subject is not in ``[auth] revoked_subjects_file``). Once the recorded starter
has lost them, no new item or judgment is dispatched: the group ends ``starter_unauthorized``
(calls already dispatched settle; everything recorded stays readable under the reader's own
rights). It is not resumed; an authorized caller starts a new group.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Mapping

from judge.order import presentation_order
from judge.absolute import MAX_CALLS as ABSOLUTE_CALLS
from judge.paired import MAX_CALLS_PER_JUDGMENT, PairedJudge
from judge.version import judge_version
from policies.graders import absolute_judge_version
from policies.money import Cost
from sidecar.collector.corpus.fair import FairQueue
from sidecar.collector.corpus.grading import absolute_rating, charge_of, judge_charge, plain_grade
from sidecar.collector.corpus.items import Item
from sidecar.collector.corpus.plan import (
    Arm,
    GroupPlan,
    absolute_worst_case,
    arm_targets,
    load_plan,
    paired_spec,
    paired_worst_case,
    target_worst_case,
)
from sidecar.collector.corpus.targets import Target, TargetResolver
from sidecar.engine.case import ORDER_KEY
from sidecar.engine.completer_adapter import ProviderCompleter
from sidecar.providers.base import ChatRequest, Provider
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.supervise import RESTART, Supervisor
from sidecar.collector.store.corpus_records import ComparisonRecord
from sidecar.collector.store.corpus_run_records import AttemptRecord, ScoreRecord, attempt_id
from sidecar.trials.create import Resolved

log = logging.getLogger("shadowtrial.corpus.runner")

#: How often groups are looked at when nothing wakes the runner.
POLL_S = 0.5
#: The status of a group whose recorded starter lost the rights to run it.
STARTER_UNAUTHORIZED = "starter_unauthorized"
#: The metric kinds graded by a model (their judge must resolve for the group to run).
JUDGED = ("paired_judge", "absolute_judge")

Key = tuple[str, str, str, int]  # arm, item id, revision id, repetition


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    #: Names this process (its pid) in every claim and lease it holds.
    owner: str = field(default_factory=lambda: f"runner-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    lease_s: float = 15.0
    drain_s: float = 10.0
    #: Items of one group in hand at once (the group's own cap on this runner).
    items_in_flight: int = 4
    #: The worker pool: items in hand at once across every group this runner runs.
    workers: int = 8
    shadow_header: str = "X-Shadowtrial-Shadow"


@dataclass
class _GroupState:
    plan: GroupPlan
    latest: dict[Key, AttemptRecord]
    judged: set[tuple[str, str]]
    cancelled: set[str]
    cap_hit: bool = False
    #: Item indexes queued or in hand in this runner.
    local: set[int] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class _Unit:
    state: _GroupState
    index: int
    item: Item


class CorpusRunner:
    """See the module's docs. ``start()`` / ``stop()`` on the loop that owns ``store`` and the providers."""

    def __init__(self, *, store: ControlPlaneStore, open_providers: Callable[[], Mapping[str, Provider]],
                 resolve: Callable[[str], Resolved], settings: RunnerSettings = RunnerSettings(),
                 clock: Callable[[], float] = time.time, supervisor: Supervisor | None = None,
                 targets: TargetResolver | None = None,
                 authorized: Callable[[str | None], bool] | None = None) -> None:
        self._store = store
        self._arm_target = arm_targets(targets, resolve)
        #: Whether a group's recorded starter (a subject) may still have new work run for it.
        self._authorized = authorized or (lambda subject: True)
        self._supervisor = supervisor or Supervisor()
        self._open_providers = open_providers
        self._resolve = resolve
        self.settings = settings
        self._clock = clock
        self._providers: Mapping[str, Provider] = {}
        self._wake: asyncio.Event | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None
        self._refresher: asyncio.Task[None] | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._queue: FairQueue[_Unit] = FairQueue()
        self._groups: dict[str, _GroupState] = {}
        self._in_hand: set[asyncio.Task[Any]] = set()
        self._hand: dict[int, _Unit] = {}
        self._busy: Counter[str] = Counter()
        #: Provider calls made (generations and judge calls), for tests and logs.
        self.calls = 0
        #: Passes over the runnable groups completed (a test waits on one).
        self.passes = 0
        #: The most items in hand at once so far, and the groups they belonged to (tests, logs).
        self.peak_in_hand = 0
        self.peak_groups = 0

    async def start(self) -> None:
        self._providers = self._open_providers()
        self._wake = asyncio.Event()
        self._stopping = False
        await self._store.expire_claims(now=self._clock())
        # All restarted if they die: the driver reads runnable groups from the store again; a
        # worker takes the next item; the lease refresher must not stay dead, or a peer takes
        # items still in hand here.
        sup = self._supervisor
        self._task = sup.task("corpus-runner", self._drive, RESTART, expected_end=lambda: self._stopping)
        self._refresher = sup.task("corpus-leases", self._refresh, RESTART)
        self._workers = [sup.task(f"corpus-worker-{n}", self._work, RESTART, expected_end=lambda: self._stopping)
                         for n in range(max(1, self.settings.workers))]

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    @property
    def stopping(self) -> bool:
        """True from the moment :meth:`stop` is called: no new item is taken."""
        return self._stopping

    async def stop(self) -> None:
        """Take no new item; drain the items in hand within ``drain_s``; what is left is retired.

        A worker marks its item in hand the moment it takes it from the queue, before any
        read, so an item it was taking as the stop began is waited for too; it claims nothing
        once the stop has begun, and is never cancelled with its invocations claimed."""
        self._stopping = True
        self.wake()
        waiting = {t for t in (self._task, *self._in_hand) if t is not None and not t.done()}
        if waiting:
            await asyncio.wait(waiting, timeout=self.settings.drain_s)
        tasks = [t for t in (self._task, self._refresher, *self._workers, *self._in_hand) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._task = self._refresher = None
        self._workers = []
        try:  # a claim still in hand now has an unknown fate: retire it at once, not at its lease's end
            await self._store.refresh_claims(self.settings.owner, lease_until=0.0)
            await self._store.expire_claims(now=self._clock())
        except Exception as exc:  # the store may be gone; the lease then retires them later
            log.warning("retiring claims at stop failed (%s)", type(exc).__name__)
        for p in self._providers.values():
            await p.aclose()
        self._providers = {}

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self.settings.lease_s / 3)  # a timer, not a test synchronisation
            try:
                await self._store.refresh_claims(self.settings.owner,
                                                 lease_until=self._clock() + self.settings.lease_s)
            except Exception as exc:
                log.warning("refreshing leases failed (%s)", type(exc).__name__)

    async def _drive(self) -> None:
        assert self._wake is not None
        while not self._stopping:
            self._wake.clear()
            try:
                # Our own leases first: after a stall of this process (a starved CPU), the pass
                # must not retire the claims it holds itself before the refresher has run.
                now = self._clock()
                await self._store.refresh_claims(self.settings.owner, lease_until=now + self.settings.lease_s)
                await self._store.expire_claims(now=now)
                runnable = await self._store.runnable_comparisons()
                ids = {c.id for c in runnable}
                for gone in [cid for cid in self._groups if cid not in ids]:  # ended elsewhere (or by a peer)
                    self._forget(gone)
                for comparison in runnable:
                    if self._stopping:
                        break
                    await self.plan_group(comparison)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("running comparison groups failed; trying again")
            self.passes += 1
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=POLL_S)
            except asyncio.TimeoutError:
                pass

    def _forget(self, comparison_id: str) -> None:
        state = self._groups.pop(comparison_id, None)
        if state is not None:
            self._queue.drop_group(state.plan.comparison.team, comparison_id)
            state.local.clear()

    async def _starter_may_run(self, comparison: ComparisonRecord) -> bool:
        """The starter's rights, checked again: when lost, the group ends ``starter_unauthorized``."""
        if self._authorized(comparison.created_by):
            return True
        if await self._store.set_comparison_status(comparison.id, STARTER_UNAUTHORIZED,
                                                   allowed_from=("admitted", "running"), now=self._clock(), final=True):
            log.warning("group %s stopped: its starter may no longer run it (%s)", comparison.id, STARTER_UNAUTHORIZED)
        return False

    # -- the driver: one group -----------------------------------------------------------

    async def plan_group(self, comparison: ComparisonRecord) -> None:
        """Bring the group's state up to date from the store; end it when nothing is left (or it
        cannot run); else queue each item with work that is not queued or in hand here."""
        cid = comparison.id
        if not await self._starter_may_run(comparison):  # no new item once the starter lost its rights
            self._forget(cid)
            return
        state = self._groups.get(cid)
        if state is None:
            plan = await load_plan(self._store, comparison)
            cap = int(json.loads(comparison.readiness).get("spend", {}).get("cap_micros") or 0)
            run = await self._store.begin_run(cid, cap_micros=cap, now=self._clock())
            if run is None:
                return
            missing = self._unavailable(plan)
            if missing is not None:
                log.error("group %s cannot run: %s", cid, missing)
                await self._store.fail_run(cid, error=f"model_unavailable: {missing}", now=self._clock())
                return
            state = _GroupState(plan, {}, set(), set(json.loads(run.cancelled_arms)))
            self._groups[cid] = state
        await self._reload(state)
        if not state.local:
            if await self._conclude(state):
                self._forget(cid)
                return
            state.cap_hit = False  # what did not fit is tried once more with what the ledger holds now
        for index, item in enumerate(state.plan.items):
            if index not in state.local and self._has_work(state, item):
                state.local.add(index)
                self._queue.put(comparison.team, cid, _Unit(state, index, item))

    def _unavailable(self, plan: GroupPlan) -> str | None:
        """Why the group cannot run here (an arm's target or a judge's model), or None."""
        for arm in plan.arms:
            if arm.outputs is not None:
                continue
            try:
                target = self._arm_target(arm)
            except LookupError as exc:
                return f"arm {arm.name!r}: {exc}"
            if not target.bounded:
                return f"arm {arm.name!r}: {arm.model!r} has no list price and no declared ceiling"
            if target.provider not in self._providers:
                return f"arm {arm.name!r}: {arm.model!r}'s provider {target.provider!r} is not configured here"
        for m in plan.metrics:
            if m["kind"] not in JUDGED:
                continue
            what, model = f"metric {m['name']!r}", m["spec"]["model"]
            try:
                resolved = self._resolve(model)
            except LookupError:
                return f"{what}: model {model!r} is not a configured alias"
            if resolved.price is None:
                return f"{what}: model {model!r} has no list price"
            if resolved.provider not in self._providers:
                return f"{what}: model {model!r}'s provider {resolved.provider!r} is not configured here"
        return None

    async def _reload(self, state: _GroupState) -> None:
        cid = state.plan.comparison.id
        latest: dict[Key, AttemptRecord] = {}
        for a in await self._store.run_attempts(cid):
            key = (a.arm, a.item_id, a.revision_id, a.repetition)
            if key not in latest or latest[key].attempt < a.attempt:
                latest[key] = a
        state.latest.update(latest)
        state.judged |= {(s.attempt_id, s.metric) for s in await self._store.run_scores(cid)}

    # -- the workers -----------------------------------------------------------------------

    async def _work(self) -> None:
        while not self._stopping:
            unit = await self._queue.get(self._eligible)
            if self._stopping:
                unit.state.local.discard(unit.index)
                return
            self._busy[unit.state.plan.comparison.id] += 1
            self._hand[id(unit)] = unit
            task = asyncio.create_task(self._item_in_hand(unit))
            self._in_hand.add(task)
            task.add_done_callback(self._in_hand.discard)
            self.peak_in_hand = max(self.peak_in_hand, len(self._hand))
            self.peak_groups = max(self.peak_groups, len({u.state.plan.comparison.id for u in self._hand.values()}))
            await asyncio.shield(task)  # a stop drains it: only a cancelled worker leaves it alone

    def _eligible(self, comparison_id: str) -> bool:
        return self._busy[comparison_id] < max(1, self.settings.items_in_flight)

    async def _item_in_hand(self, unit: _Unit) -> None:
        state, cid, owner = unit.state, unit.state.plan.comparison.id, self.settings.owner
        leased = False
        try:
            fresh = await self._store.get_run(cid)
            if self._stopping:  # the stop began while this item was being taken: it claims nothing
                return
            if not self._authorized(state.plan.comparison.created_by):  # the starter lost its rights: no new item
                self.wake()
                return
            if fresh is not None:
                state.cancelled = set(json.loads(fresh.cancelled_arms))
            now = self._clock()
            leased = bool(await self._store.lease_items(cid, [unit.index], owner=owner, now=now,
                                                        lease_until=now + self.settings.lease_s))
            if not leased or self._stopping:
                return  # a peer has it in hand; the driver sees its outcome on a later pass
            await self.run_item(state, unit.index, unit.item)
        except Exception:
            log.exception("an item of group %s failed to run", cid)
        finally:
            self._hand.pop(id(unit), None)
            self._busy[cid] -= 1
            if self._busy[cid] <= 0:
                del self._busy[cid]
            self._queue.poke()  # the group may take another item now
            state.local.discard(unit.index)
            if leased:
                try:
                    await self._store.release_items(cid, [unit.index], owner=owner)
                except Exception as exc:  # its lease then ends on its own
                    log.warning("giving back an item's lease failed (%s)", type(exc).__name__)
            if not state.local:
                self.wake()  # the group may be done

    def _has_work(self, state: _GroupState, item: Item) -> bool:
        plan = state.plan
        for arm in plan.arms:
            if arm.name in state.cancelled:
                continue
            for rep in range(1, plan.repetitions + 1):
                found = state.latest.get((arm.name, item.id, item.revision_id, rep))
                if found is None or found.status == "queued":
                    return True
        return bool(self._pairs_to_judge(state, item))

    async def _conclude(self, state: _GroupState) -> bool:
        """The group is completed when nothing is left to run or in hand anywhere; ``cap_reached``
        when what is left does not fit the cap with nothing reserved. True when it ended now."""
        cid = state.plan.comparison.id
        attempts = await self._store.run_attempts(cid)
        if any(a.status in ("claimed", "queued") for a in attempts):
            return False  # someone's claim, or a retry: later
        if any(s.status == "pending" for s in await self._store.run_scores(cid)):
            return False
        left = [item for item in state.plan.items if self._has_work(state, item)]
        if left:
            if not state.cap_hit:
                return False
            run = await self._store.get_run(cid)
            need = self._next_worst_case(state, left[0])
            # Only with nothing reserved, and when the next invocation's worst case does not fit what is left:
            # a claim refused while others held reservations is tried again on the next pass.
            if run is not None and run.reserved_micros == 0 and need is not None \
                    and run.spent_micros + need > run.cap_micros:
                return await self._store.set_comparison_status(cid, "cap_reached", allowed_from=("running",),
                                                               now=self._clock(), final=True)
            return False
        return await self._store.set_comparison_status(cid, "completed", allowed_from=("running",),
                                                       now=self._clock(), final=True)

    def _next_worst_case(self, state: _GroupState, item: Item) -> int | None:
        """The worst case of the next invocation ``item`` needs (a generation, else a judgment)."""
        plan = state.plan
        for arm in plan.arms:
            if arm.name in state.cancelled or arm.outputs is not None:
                continue
            for rep in range(1, plan.repetitions + 1):
                found = state.latest.get((arm.name, item.id, item.revision_id, rep))
                if found is None or found.status == "queued":
                    target = self._target(arm)
                    return None if target is None else target_worst_case(target, arm, item)
        for metric, b, c in self._pairs_to_judge(state, item):
            price = self._resolve(metric["spec"]["model"]).price
            if price is not None:
                return paired_worst_case(price, metric, plan.baseline.judged_messages(item), b.output or "", c.output or "")
        return None

    # -- one item --------------------------------------------------------------------------

    async def run_item(self, state: _GroupState, index: int, item: Item) -> None:
        plan = state.plan
        n = len(plan.arms)
        order = [plan.arms[(index + k) % n] for k in range(n)]  # the arms rotate from item to item
        calls: list[Awaitable[None]] = []
        for arm in order:
            if arm.name in state.cancelled:
                continue
            for rep in range(1, plan.repetitions + 1):
                key = (arm.name, item.id, item.revision_id, rep)
                found = state.latest.get(key)
                if found is None or found.status == "queued":
                    calls.append(self._generate(state, arm, item, rep, found))
        await asyncio.gather(*calls)
        if not self._authorized(plan.comparison.created_by):  # no new grading once the starter lost its rights
            return
        await asyncio.gather(*(self._judge_pair(state, item, *pair) for pair in self._pairs_to_judge(state, item)))

    def _pairs_to_judge(self, state: _GroupState, item: Item
                        ) -> list[tuple[Mapping[str, Any], AttemptRecord, AttemptRecord]]:
        plan = state.plan
        out = []
        base = plan.baseline
        for metric in plan.metrics:
            if metric["kind"] != "paired_judge":
                continue
            for arm in plan.arms[1:]:
                if arm.name in state.cancelled:
                    continue
                for rep in range(1, plan.repetitions + 1):
                    b = state.latest.get((base.name, item.id, item.revision_id, rep))
                    c = state.latest.get((arm.name, item.id, item.revision_id, rep))
                    if b is None or c is None or b.status != "completed" or c.status != "completed":
                        continue
                    if (c.id, metric["name"]) not in state.judged:
                        out.append((metric, b, c))
        return out

    async def _generate(self, state: _GroupState, arm: Arm, item: Item, rep: int,
                        queued: AttemptRecord | None) -> None:
        plan = state.plan
        cid = plan.comparison.id
        if arm.outputs is not None:
            await self._given(state, arm, item, rep, queued)
            return
        target = self._target(arm)
        worst = None if target is None else target_worst_case(target, arm, item)
        if target is None or worst is None or target.provider not in self._providers:
            log.error("arm %s of group %s cannot run: %s %s is unknown, its spend unbounded or its provider not "
                      "configured", arm.name, cid, arm.target_kind, arm.model)
            return
        now = self._clock()
        number = 1 if queued is None else queued.attempt
        record = AttemptRecord(
            attempt_id(cid, arm.name, item.id, item.revision_id, rep, number), cid, arm.name, item.id,
            item.revision_id, rep, number, None if queued is None else queued.retry_of, "claimed",
            self.settings.owner, now + self.settings.lease_s, worst, now if queued is None else queued.created_at)
        claimed = await self._store.claim_attempt(record)
        key = (arm.name, item.id, item.revision_id, rep)
        if claimed == "cap":
            state.cap_hit = True
            return
        if claimed == "exists":
            return
        state.latest[key] = record
        params = dict(arm.settings)
        headers = {self.settings.shadow_header: "1", "X-Shadowtrial-Comparison": cid}
        self.calls += 1
        result = await self._providers[target.provider].chat(
            ChatRequest(model=target.upstream, messages=arm.messages(item), params=params, headers=headers))
        # An agent of unknown cost (price None) is charged its whole reserved ceiling.
        cost, charge = charge_of(target.price, result, record.reserved_micros)
        scores: list[ScoreRecord] = []
        answer = result.content or ""
        if result.ok:
            conversation = arm.judged_messages(item)
            for metric in plan.metrics:
                score, extra_charge = await self._grade_answer(record, metric, item, conversation, answer,
                                                               result.latency_ms, cost)
                if score is not None:
                    scores.append(score)
                    charge += extra_charge
        done = replace(record, status="completed" if result.ok else "failed", finished_at=self._clock(),
                       latency_ms=result.latency_ms, cost_micros=cost.known_micros, cost_coverage=cost.coverage,
                       output=answer if result.ok else None, error=None if result.ok else (result.error or "failed"))
        if await self._store.finish_attempt(done, charge_micros=charge, scores=scores):
            state.latest[key] = done
            state.judged.update((s.attempt_id, s.metric) for s in scores)

    def _target(self, arm: Arm) -> Target | None:
        """Where ``arm`` generates (its model at its version, or its agent); None when that cannot be resolved."""
        try:
            return self._arm_target(arm)
        except LookupError:
            return None

    async def _given(self, state: _GroupState, arm: Arm, item: Item, rep: int, queued: AttemptRecord | None) -> None:
        """An arm scored from given outputs: its attempt records the given answer; no target is called."""
        assert arm.outputs is not None
        cid = state.plan.comparison.id
        now = self._clock()
        number = 1 if queued is None else queued.attempt
        record = AttemptRecord(
            attempt_id(cid, arm.name, item.id, item.revision_id, rep, number), cid, arm.name, item.id,
            item.revision_id, rep, number, None if queued is None else queued.retry_of, "claimed",
            self.settings.owner, now + self.settings.lease_s, 0, now if queued is None else queued.created_at)
        if await self._store.claim_attempt(record) != "claimed":
            return
        key = (arm.name, item.id, item.revision_id, rep)
        state.latest[key] = record
        answer = arm.outputs.get(item.id)
        scores: list[ScoreRecord] = []
        charge = 0
        if answer is not None:
            for metric in state.plan.metrics:
                if metric["kind"] in ("latency", "cost"):  # nothing was called: not applicable, never zero
                    scores.append(ScoreRecord(record.id, cid, metric["name"], metric["kind"], metric["version"],
                                              metric["direction"], "not_applicable"))
                    continue
                score, extra = await self._grade_answer(record, metric, item, arm.judged_messages(item), answer, 0.0,
                                                        Cost.zero())
                if score is not None:
                    scores.append(score)
                    charge += extra
        done = replace(record, status="completed" if answer is not None else "failed", finished_at=self._clock(),
                       cost_micros=0, cost_coverage="complete", output=answer,
                       error=None if answer is not None else "no_output_given")
        if await self._store.finish_attempt(done, charge_micros=charge, scores=scores):
            state.latest[key] = done
            state.judged.update((s.attempt_id, s.metric) for s in scores)

    async def _grade_answer(self, attempt: AttemptRecord, metric: Mapping[str, Any], item: Item,
                            conversation: list[dict[str, Any]], answer: str, latency_ms: float,
                            cost: Cost) -> tuple[ScoreRecord | None, int]:
        base = ScoreRecord(attempt.id, attempt.comparison_id, metric["name"], metric["kind"], metric["version"],
                           metric["direction"], "scored")
        if metric["kind"] == "absolute_judge":
            return await self._absolute(attempt, metric, base, conversation, answer)
        return plain_grade(base, metric, item, answer, latency_ms, cost), 0

    async def _absolute(self, attempt: AttemptRecord, metric: Mapping[str, Any], base: ScoreRecord,
                        conversation: list[dict[str, Any]], answer: str) -> tuple[ScoreRecord, int]:
        s = metric["spec"]
        pinned = absolute_judge_version(model=s["model"], rubric=s["rubric_text"], scale=tuple(s["scale"]),
                                        temperature=s["temperature"], max_tokens=s["max_tokens"])
        if pinned != metric["version"]:  # never another version's score
            return replace(base, status="error", detail=json.dumps({"error": "judge_version_mismatch"})), 0
        resolved = self._resolve(s["model"])
        if resolved.price is None or resolved.provider not in self._providers:
            return replace(base, status="error", detail=json.dumps({"error": "judge_unavailable"})), 0
        group = await self._store.get_comparison(attempt.comparison_id)
        if group is not None and not self._authorized(group.created_by):  # no new grading: the starter lost its rights
            return replace(base, status="error", detail=json.dumps({"error": STARTER_UNAUTHORIZED})), 0
        worst = absolute_worst_case(resolved.price, metric, conversation, len(answer.encode("utf-8")))
        if not await self._store.top_up(attempt.comparison_id, attempt.id, worst):
            return replace(base, status="error", detail=json.dumps({"error": "cap_reached"})), 0
        completer = ProviderCompleter(self._providers[resolved.provider], resolved.upstream,
                                      {self.settings.shadow_header: "1"})
        value, error, completions = await absolute_rating(completer, s, conversation, answer)
        self.calls += len(completions)
        cost, charge = judge_charge(resolved.price, completions, worst // ABSOLUTE_CALLS)
        scored = replace(base, cost_micros=cost.known_micros, cost_coverage=cost.coverage)
        if value is None:
            return replace(scored, status="error", detail=json.dumps({"error": error})), charge
        return replace(scored, value=float(value)), charge

    async def _judge_pair(self, state: _GroupState, item: Item, metric: Mapping[str, Any],
                          b: AttemptRecord, c: AttemptRecord) -> None:
        plan = state.plan
        cid = plan.comparison.id
        spec = paired_spec(metric)
        base = ScoreRecord(c.id, cid, metric["name"], metric["kind"], metric["version"], metric["direction"],
                           "pending", paired_with=b.id, owner=self.settings.owner,
                           lease_until=self._clock() + self.settings.lease_s)
        resolved = self._resolve(spec.model)
        if judge_version(spec).id != metric["version"]:
            mismatch = json.dumps({"error": "judge_version_mismatch"})
            if await self._store.claim_judgment(replace(base, reserved_micros=0)) == "claimed":
                await self._store.finish_judgment(replace(base, status="error", detail=mismatch), charge_micros=0)
            state.judged.add((c.id, metric["name"]))
            return
        if resolved.price is None or resolved.provider not in self._providers:
            return
        conversation = plan.baseline.judged_messages(item)
        worst = paired_worst_case(resolved.price, metric, conversation, b.output or "", c.output or "")
        claimed = await self._store.claim_judgment(replace(base, reserved_micros=worst))
        if claimed == "cap":
            state.cap_hit = True
            return
        state.judged.add((c.id, metric["name"]))
        if claimed == "exists":
            return
        judge = PairedJudge(ProviderCompleter(self._providers[resolved.provider], resolved.upstream,
                                              {self.settings.shadow_header: "1", "X-Shadowtrial-Comparison": cid}),
                            spec)
        order = presentation_order(cid, f"{c.item_id}/{c.revision_id}/{c.repetition}/{c.arm}", key=ORDER_KEY)
        judgment = await judge.judge(conversation, b.output or "", c.output or "", order)
        self.calls += len(judgment.completions)
        cost, charge = judge_charge(resolved.price, judgment.completions, worst // MAX_CALLS_PER_JUDGMENT)
        detail: dict[str, Any] = {"order": order, "label": judgment.label, "strong": judgment.strong, "error": judgment.error}
        done = replace(base, status="scored" if judgment.outcome == "verdict" else "error",
                       value=None if judgment.score is None else float(judgment.score), detail=json.dumps(detail),
                       cost_micros=cost.known_micros, cost_coverage=cost.coverage)
        await self._store.finish_judgment(done, charge_micros=charge)
