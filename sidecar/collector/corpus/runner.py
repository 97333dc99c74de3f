"""The runner of comparison groups (issue 13, items 3 and 4), in the control plane.

:class:`CorpusRunner` runs every ``admitted`` or ``running`` group, oldest first, on the
collector's event loop with the collector's store and provider clients. A started group's
arms all launch together: for each item in dataset order the runner dispatches every
repetition of every arm (corpus evidence: nobody ran those inputs, so *both* arms are
called, at twice the cost), the arms' order rotating from item to item, then grades. Up to
``items_in_flight`` items are in hand at once.

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

**Crashes.** Claims carry the runner's ``owner`` and a lease it refreshes. After a hard
crash nothing refreshes them: once a lease has ended, :meth:`expire_claims` makes the claim
``invocation_indeterminate`` (identity kept, cost unknown, its reservation held as spent).
An identity that has any attempt is never claimed again by the scheduler; only an explicit
linked retry (``POST /v1/comparisons/{id}/retry``) queues a new attempt, which the runner
then runs. A graceful :meth:`stop` takes no new item and drains the items in hand within
``drain_s`` — every item the runner took before the stop began, the one it was taking at
that moment included (issue 21 item 11): their claimed invocations finish and are graded;
what is still in hand at the deadline is made indeterminate at once.

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
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Mapping

from judge.order import presentation_order
from judge.absolute import MAX_CALLS as ABSOLUTE_CALLS
from judge.paired import MAX_CALLS_PER_JUDGMENT, PairedJudge
from judge.version import judge_version
from policies.graders import absolute_judge_version
from policies.money import Cost
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

Key = tuple[str, str, str, int]  # arm, item id, revision id, repetition


@dataclass(frozen=True, slots=True)
class RunnerSettings:
    owner: str = field(default_factory=lambda: f"runner-{uuid.uuid4().hex[:12]}")
    lease_s: float = 15.0
    drain_s: float = 10.0
    items_in_flight: int = 4
    shadow_header: str = "X-Shadowtrial-Shadow"


@dataclass
class _GroupState:
    plan: GroupPlan
    latest: dict[Key, AttemptRecord]
    judged: set[tuple[str, str]]
    cancelled: set[str]
    cap_hit: bool = False


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
        self._in_hand: set[asyncio.Task[Any]] = set()
        #: Provider calls made (generations and judge calls), for tests and logs.
        self.calls = 0
        #: Passes over the runnable groups completed (a test waits on one).
        self.passes = 0

    async def start(self) -> None:
        self._providers = self._open_providers()
        self._wake = asyncio.Event()
        self._stopping = False
        await self._store.expire_claims(now=self._clock())
        # Both restarted if they die: the driver reads runnable groups from the store again; the
        # lease refresher must not stay dead, or a peer takes items still in hand here.
        sup = self._supervisor
        self._task = sup.task("corpus-runner", self._drive, RESTART, expected_end=lambda: self._stopping)
        self._refresher = sup.task("corpus-leases", self._refresh, RESTART)

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    @property
    def stopping(self) -> bool:
        """True from the moment :meth:`stop` is called: no new item is taken."""
        return self._stopping

    async def stop(self) -> None:
        """Take no new item; drain the items in hand within ``drain_s``; what is left is retired.

        The drain waits for the driver as well as the items in hand: the driver takes no new
        item once stopping and returns only when the items it took are done, so an item it was
        taking as the stop began (created after a snapshot of the items in hand would have been
        taken) is drained too, never cancelled with its invocations claimed."""
        self._stopping = True
        self.wake()
        waiting = {t for t in (self._task, *self._in_hand) if t is not None and not t.done()}
        if waiting:
            await asyncio.wait(waiting, timeout=self.settings.drain_s)
        for t in (self._task, self._refresher, *self._in_hand):
            if t is not None:
                t.cancel()
        await asyncio.gather(*(t for t in (self._task, self._refresher, *self._in_hand) if t is not None),
                             return_exceptions=True)
        self._task = self._refresher = None
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
                await self._store.expire_claims(now=self._clock())
                for comparison in await self._store.runnable_comparisons():
                    if self._stopping:
                        break
                    await self.run_group(comparison)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("running comparison groups failed; trying again")
            self.passes += 1
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=POLL_S)
            except asyncio.TimeoutError:
                pass

    # -- one group ---------------------------------------------------------------------

    async def _starter_may_run(self, comparison: ComparisonRecord) -> bool:
        """The starter's rights, checked again: when lost, the group ends ``starter_unauthorized``."""
        if self._authorized(comparison.created_by):
            return True
        if await self._store.set_comparison_status(comparison.id, STARTER_UNAUTHORIZED,
                                                   allowed_from=("admitted", "running"), now=self._clock(), final=True):
            log.warning("group %s stopped: its starter may no longer run it (%s)", comparison.id, STARTER_UNAUTHORIZED)
        return False

    async def run_group(self, comparison: ComparisonRecord) -> None:
        if not await self._starter_may_run(comparison):
            return
        plan = await load_plan(self._store, comparison)
        cap = int(json.loads(comparison.readiness).get("spend", {}).get("cap_micros") or 0)
        run = await self._store.begin_run(comparison.id, cap_micros=cap, now=self._clock())
        if run is None:
            return
        state = _GroupState(plan, {}, set(), set(json.loads(run.cancelled_arms)))
        for a in await self._store.run_attempts(comparison.id):
            key = (a.arm, a.item_id, a.revision_id, a.repetition)
            if key not in state.latest or state.latest[key].attempt < a.attempt:
                state.latest[key] = a
        state.judged = {(s.attempt_id, s.metric) for s in await self._store.run_scores(comparison.id)}
        slots = asyncio.Semaphore(self.settings.items_in_flight)
        pending: list[asyncio.Task[None]] = []
        for index, item in enumerate(plan.items):
            if self._stopping:
                break
            if not self._has_work(state, item):
                continue
            await slots.acquire()
            if self._stopping:
                slots.release()
                break
            if not await self._starter_may_run(comparison):  # no new item once the starter lost its rights
                slots.release()
                break
            fresh = await self._store.get_run(comparison.id)
            if self._stopping:  # the stop began while this item was being taken: it claims nothing
                slots.release()
                break
            if fresh is not None:
                state.cancelled = set(json.loads(fresh.cancelled_arms))
            task = asyncio.create_task(self._item_in_hand(state, index, item, slots))
            self._in_hand.add(task)
            task.add_done_callback(self._in_hand.discard)
            pending.append(task)
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self._stopping or not self._authorized(comparison.created_by):
            return
        await self._conclude(state)

    async def _item_in_hand(self, state: _GroupState, index: int, item: Item, slots: asyncio.Semaphore) -> None:
        try:
            await self.run_item(state, index, item)
        except Exception:
            log.exception("an item of group %s failed to run", state.plan.comparison.id)
        finally:
            slots.release()

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

    async def _conclude(self, state: _GroupState) -> None:
        """The group is completed when nothing is left to run or in hand anywhere; ``cap_reached``
        when what is left does not fit the cap with nothing reserved."""
        cid = state.plan.comparison.id
        attempts = await self._store.run_attempts(cid)
        if any(a.status in ("claimed", "queued") for a in attempts):
            return  # someone's claim, or a retry: later
        if any(s.status == "pending" for s in await self._store.run_scores(cid)):
            return
        left = [item for item in state.plan.items if self._has_work(state, item)]
        if left:
            run = await self._store.get_run(cid)
            need = self._next_worst_case(state, left[0])
            # Only with nothing reserved, and when the next invocation's worst case does not fit what is left:
            # a claim refused while others held reservations is tried again on the next pass.
            if state.cap_hit and run is not None and run.reserved_micros == 0 and need is not None \
                    and run.spent_micros + need > run.cap_micros:
                await self._store.set_comparison_status(cid, "cap_reached", allowed_from=("running",),
                                                        now=self._clock(), final=True)
            return
        await self._store.set_comparison_status(cid, "completed", allowed_from=("running",), now=self._clock(),
                                                final=True)

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
