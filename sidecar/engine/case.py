"""The engine: takes sampled (exchange, trial) jobs off the intake queue and runs
each as one case — reserve, dispatch the candidate, judge the pair, settle.

Contract:
- Only the candidate and the judge are ever called; the incumbent's answer is
  the one the gateway served.
- Nothing is dispatched without a reservation that covers the worst case; a
  reservation that does not fit moves the trial to ``cap_reached``.
- Every job ends in exactly one funnel outcome (a duplicate delivery of the
  same exchange to the same trial is not a new job and counts nothing).
- Failures of the candidate or the judge are outcomes, never scores.
- On shutdown, workers finish the case in hand within the drain deadline;
  queued jobs nobody claimed are counted ``shed_stopped``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from judge.completer import Completion
from judge.order import audit_selected, presentation_order, swapped
from judge.paired import MAX_CALLS_PER_JUDGMENT, PairedJudgment, judge_input_upper_bound
from policies.money import Cost, Price, add_costs, input_tokens_upper_bound, price_usage, worst_case_micros
from policies.reservation import judge_worst_case, plan_case
from sidecar.ingest.funnel import FunnelCounter
from sidecar.engine.handoff import Intake
from sidecar.providers.base import ChatRequest, ProviderResult
from sidecar.engine.registry import ActiveTrial, Registry
from sidecar.store.base import Store
from sidecar.store.records import CaseFinish, CaseStart, JudgmentRow
from sidecar.ingest.wire import Exchange

log = logging.getLogger("shadowtrial.engine")

#: The key of the presentation-order and audit hashes. Fixed and public on
#: purpose: anyone holding the trial id and case id can recompute the order.
ORDER_KEY = b"shadowtrial-order-v1"

#: Request parameters that must not reach the candidate as served.
_DROP_PARAMS = frozenset({"stream", "stream_options", "n", "model", "messages"})


@dataclass(frozen=True, slots=True)
class Job:
    trial: ActiveTrial
    exchange: Exchange


def case_id_for(trial_id: str, exchange_id: str) -> str:
    """Deterministic case id: the same exchange in the same trial is the same case."""
    h = hashlib.blake2b(digest_size=12, person=b"st-case-v1")
    h.update(trial_id.encode() + b"\x1f" + exchange_id.encode())
    return h.hexdigest()


def candidate_request(trial: ActiveTrial, exchange: Exchange, headers: dict[str, str]) -> tuple[ChatRequest, int]:
    """The served request with the model swapped and the output bounded."""
    params = {k: v for k, v in exchange.request.params.items() if k not in _DROP_PARAMS}
    max_tokens = params.pop("max_completion_tokens", None) or params.get("max_tokens") or trial.record.candidate_max_tokens
    max_tokens = int(max_tokens)
    params["max_tokens"] = max_tokens
    return ChatRequest(model=trial.candidate_upstream, messages=exchange.request.messages, params=params, headers=headers), max_tokens


def incumbent_cost(exchange: Exchange, price: Price | None) -> Cost:
    usage = exchange.response.usage
    if usage.cost_usd is not None:
        return Cost(round(usage.cost_usd * 1_000_000), "complete", "gateway")
    return price_usage(price, usage.inputs(), usage.outputs())


class Engine:
    def __init__(
        self,
        *,
        store: Store,
        registry: Registry,
        intake: Intake[Job],
        funnel: FunnelCounter,
        workers: int,
        shadow_header: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.registry = registry
        self.intake = intake
        self.funnel = funnel
        self.workers = workers
        self.shadow_header = shadow_header
        self.clock = clock
        self._tasks: list[asyncio.Task[None]] = []
        self.in_flight = 0
        #: Set whenever a case finishes; tests and the demo wait on it.
        self.progress = asyncio.Event()

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        for i in range(self.workers):
            self._tasks.append(asyncio.create_task(self._worker(), name=f"shadowtrial-worker-{i}"))

    async def drain(self, deadline_s: float) -> None:
        """Stop taking new work once the queue is empty or the deadline passes."""
        self.intake.close()
        try:
            await asyncio.wait_for(self.intake.join(), timeout=deadline_s)
        except asyncio.TimeoutError:
            log.warning("drain deadline passed with %d queued and %d in flight", self.intake.depth, self.in_flight)
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()
        for job in self.intake.drain_remaining():
            self.funnel.add(job.trial.id, "shed_stopped")

    async def _worker(self) -> None:
        while True:
            job = await self.intake.take()
            self.in_flight += 1
            try:
                await self.run_case(job)
            except asyncio.CancelledError:
                # The case stays reserved/dispatched in the store; the next start marks it indeterminate.
                raise
            except Exception:
                log.exception("case failed unexpectedly (trial %s)", job.trial.id)
            finally:
                self.in_flight -= 1
                self.intake.done()
                self.progress.set()

    # -- one case ------------------------------------------------------------

    async def run_case(self, job: Job) -> None:
        trial, exchange = job.trial, job.exchange
        rec = trial.record
        status = self.registry.status(trial.id)
        if status != "running":
            self.funnel.add(trial.id, "cap_reached" if status == "cap_reached" else "shed_stopped")
            return

        case_id = case_id_for(trial.id, exchange.exchange_id)
        headers = {self.shadow_header: "1", "X-Shadowtrial-Trial": trial.id}
        request, max_tokens = candidate_request(trial, exchange, headers)
        conversation = exchange.request.messages
        incumbent_answer = exchange.response.content or ""
        audited = audit_selected(trial.id, case_id, rec.audit_share, key=ORDER_KEY)
        judge_calls = MAX_CALLS_PER_JUDGMENT * (2 if audited else 1)
        spec = trial.judge_spec

        candidate_input_bound = input_tokens_upper_bound(
            json.dumps(request.messages, ensure_ascii=False),
            json.dumps(request.params.get("tools") or [], ensure_ascii=False),
            messages=len(request.messages),
        )
        plan = plan_case(
            candidate_price=trial.candidate_price,
            candidate_input_bound=candidate_input_bound,
            candidate_max_tokens=max_tokens,
            judge_price=trial.judge_price,
            judge_input_bound_without_candidate=judge_input_upper_bound(conversation, incumbent_answer, "", spec),
            judge_max_tokens=spec.max_tokens,
            judge_calls=judge_calls,
        )
        inc_cost = incumbent_cost(exchange, trial.incumbent_price)
        now = self.clock()
        outcome = await self.store.reserve_case(
            CaseStart(
                case_id=case_id,
                trial_id=trial.id,
                exchange_id=exchange.exchange_id,
                reserve_micros=plan.total,
                incumbent_latency_ms=exchange.latency_ms,
                incumbent_output_tokens=exchange.response.usage.outputs(),
                incumbent_cost_micros=inc_cost.known_micros,
                incumbent_cost_coverage=inc_cost.coverage,
                created_at=now,
            )
        )
        if outcome == "duplicate":
            return
        if outcome == "cap_reached":
            self.registry.set_status(trial.id, "cap_reached")
            self.funnel.add(trial.id, "cap_reached")
            return
        if outcome == "not_running":
            self.funnel.add(trial.id, "shed_stopped")
            return

        await self.store.mark_dispatched(case_id)
        result = await trial.candidate.chat(request)
        finish = await self._after_candidate(
            trial, case_id, plan.candidate_micros, plan.judge_micros, judge_calls, audited,
            conversation, incumbent_answer, result,
        )
        await self.store.finish_case(finish)
        if finish.trial_status is not None:
            self.registry.set_status(trial.id, finish.trial_status)

    async def _after_candidate(
        self,
        trial: ActiveTrial,
        case_id: str,
        candidate_reserved: int,
        judge_reserved: int,
        judge_calls: int,
        audited: bool,
        conversation: list[dict[str, Any]],
        incumbent_answer: str,
        result: ProviderResult,
    ) -> CaseFinish:
        rec = trial.record
        spec = trial.judge_spec

        # Candidate spend. A call whose cost cannot be priced holds its worst case.
        if result.ok or result.may_have_billed:
            cand_cost = price_usage(trial.candidate_price, result.input_tokens, result.output_tokens)
        else:
            cand_cost = Cost.zero()  # refused before any work: nothing was billed
        if result.unknown_fate_attempts and cand_cost.coverage == "complete":
            # An earlier attempt of this call may also have been billed: not all of it is known.
            cand_cost = Cost(cand_cost.known_micros, "partial")
        cand_charge = cand_cost.known_micros if cand_cost.coverage == "complete" else max(candidate_reserved, cand_cost.known_micros)
        unknown_calls = 0 if cand_cost.coverage == "complete" else 1
        priced_calls = 1 if cand_cost.coverage != "unknown" and (result.ok or result.may_have_billed) else 0

        def finish(outcome: str, **kw: Any) -> CaseFinish:
            base: dict[str, Any] = dict(
                case_id=case_id,
                trial_id=trial.id,
                outcome=outcome,
                charged_micros=cand_charge,
                known_micros=cand_cost.known_micros,
                unknown_calls=unknown_calls,
                priced_calls=priced_calls,
                candidate_cost_micros=cand_cost.known_micros,
                candidate_cost_coverage=cand_cost.coverage,
                judge_cost_micros=0,
                judge_cost_coverage="complete",
                candidate_latency_ms=result.latency_ms if result.ok else None,
                candidate_output_tokens=result.output_tokens,
                score=None,
                error=None,
                finished_at=self.clock(),
            )
            base.update(kw)
            return CaseFinish(**base)

        if not result.ok:
            return finish("candidate_failed", error=f"candidate: {result.error}")

        candidate_answer = result.content or ""
        exact_in = judge_input_upper_bound(conversation, incumbent_answer, candidate_answer, spec)
        judge_need = judge_worst_case(
            judge_price=trial.judge_price, judge_input_bound=exact_in, judge_max_tokens=spec.max_tokens, judge_calls=judge_calls
        )
        if judge_need > judge_reserved:
            if not await self.store.top_up(case_id, trial.id, judge_need - judge_reserved):
                return finish("cap_reached", error="judge reservation does not fit", trial_status="cap_reached")
        per_call_worst = worst_case_micros(trial.judge_price, exact_in, spec.max_tokens)

        order = presentation_order(trial.id, case_id, key=ORDER_KEY)
        judgments: list[tuple[PairedJudgment, bool]] = [
            (await trial.judge.judge(conversation, incumbent_answer, candidate_answer, order), False)
        ]
        if audited:
            judgments.append((await trial.judge.judge(conversation, incumbent_answer, candidate_answer, swapped(order)), True))

        judge_cost = Cost.zero()
        judge_charge = 0
        j_unknown = 0
        j_priced = 0
        for pj, _ in judgments:
            for c in pj.completions:
                cost = self._judge_call_cost(trial, c)
                judge_cost = add_costs(judge_cost, cost)
                if cost.coverage == "complete":
                    judge_charge += cost.known_micros
                else:
                    judge_charge += max(per_call_worst, cost.known_micros)
                    j_unknown += 1
                if cost.coverage != "unknown":
                    j_priced += 1

        rows: list[JudgmentRow] = []
        now = self.clock()
        valid: list[int] = []
        longer = _longer(incumbent_answer, candidate_answer)
        for pj, is_audit in judgments:
            if pj.outcome == "verdict" and pj.score is not None:
                valid.append(pj.score)
            rows.append(
                JudgmentRow(
                    judgment_id=uuid.uuid4().hex,
                    case_id=case_id,
                    trial_id=trial.id,
                    judge_version_id=rec.judge_version_id,
                    order=pj.order,
                    is_audit=is_audit,
                    outcome=pj.outcome,
                    score=pj.score,
                    strong=bool(pj.strong),
                    winner_slot=pj.winner,
                    error=pj.error,
                    longer_won=_longer_won(pj, longer),
                    created_at=now,
                )
            )
        bodies = None
        if rec.prompt_retention:
            bodies = json.dumps(
                {"messages": conversation, "incumbent": incumbent_answer, "candidate": candidate_answer}, ensure_ascii=False
            )
        common = dict(
            charged_micros=cand_charge + judge_charge,
            known_micros=cand_cost.known_micros + judge_cost.known_micros,
            unknown_calls=unknown_calls + j_unknown,
            priced_calls=priced_calls + j_priced,
            judge_cost_micros=judge_cost.known_micros,
            judge_cost_coverage=judge_cost.coverage,
            judgments=rows,
            bodies_json=bodies,
        )
        if not valid:
            errors = "; ".join(pj.error or "error" for pj, _ in judgments)
            return finish("judge_failed", error=f"judge: {errors}", **common)
        return finish("judged", score=sum(valid) / len(valid), **common)

    @staticmethod
    def _judge_call_cost(trial: ActiveTrial, c: Completion) -> Cost:
        if not c.ok and c.error != "timeout" and c.input_tokens is None and c.output_tokens is None:
            return Cost.zero()  # refused before any work (429/5xx/connection): not billed
        return price_usage(trial.judge_price, c.input_tokens, c.output_tokens)


def _longer(incumbent: str, candidate: str) -> str | None:
    if len(incumbent) == len(candidate):
        return None
    return "candidate" if len(candidate) > len(incumbent) else "incumbent"


def _longer_won(pj: PairedJudgment, longer: str | None) -> bool | None:
    if pj.outcome != "verdict" or pj.score in (None, 0) or longer is None:
        return None
    winner = "candidate" if (pj.score or 0) > 0 else "incumbent"
    return winner == longer
