"""One case, for any subject: claim, reserve, dispatch the candidate, judge the pair, settle.

Contract of :meth:`CaseRunner.run`:

- Only the candidate and the judge are ever called; the incumbent's answer is
  the one the gateway served.
- Nothing is dispatched without a reservation covering its worst case, made
  atomically against the cap by the store. What a refused reservation means
  is :func:`policies.spend.refusal`'s decision: wait (bounded) for other
  cases to release theirs, shed this case (``shed_cap_busy``), end this case
  (``cap_reached``), or end the trial (``cap_reached``, trial status too).
- A case is charged at most what it reserved (:func:`policies.spend.charge_call`).
- Every claimed case ends in exactly one funnel outcome, counted by the store
  in the transaction that finishes it — an unexpected error included (as
  ``indeterminate``, with its reason). A re-delivery of the same exchange to
  the same subject, on this process or a peer, is a ``duplicate`` and counts
  nothing. Outcomes decided before a claim go to the funnel counter.
- Failures of the candidate or the judge are outcomes, never scores.
- The post-finish hooks' effects are written in the finishing transaction.
- Each case is a span (with ``tracer``), its candidate call and each judgment child spans
  (:mod:`sidecar.telemetry.spans`); its outcome and its judgments are added to ``tally``
  once the store has them. Neither carries any text of the exchange.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import random
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any, Awaitable, Callable, Sequence, TypeVar

from opentelemetry.trace import Span, Tracer

from judge.order import Order, audit_selected, presentation_order, swapped
from judge.paired import MAX_CALLS_PER_JUDGMENT, JudgeInputBound, PairedJudgment
from policies import spend
from policies.money import Cost, Price, input_tokens_upper_bound, price_usage, worst_case_micros
from policies.reservation import CasePlan, judge_worst_case, plan_case
from sidecar.seal import Sealer, seal_case_bodies
from sidecar.engine.subjects import FinishHook, Subject
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.wire import Exchange
from sidecar.providers.base import ChatRequest, ProviderResult
from sidecar.store.base import Store
from sidecar.redact import describe
from sidecar.store.records import CaseFinish, CaseStart, Effect, JudgmentRow, LedgerKind, ended_outcome
from sidecar.telemetry import spans
from sidecar.telemetry.names import judgment_outcome
from sidecar.telemetry.tally import Tally
from sidecar.trials.segments import case_segments

log = logging.getLogger("shadowtrial.engine")

T = TypeVar("T")

#: The key of the presentation-order and audit hashes. Fixed and public on
#: purpose: anyone holding the trial id and case id can recompute the order.
ORDER_KEY = b"shadowtrial-order-v1"

#: Request parameters that must not reach the candidate as served.
_DROP_PARAMS = frozenset({"stream", "stream_options", "n", "model", "messages"})

#: How many recent first reservations a subject's "typical case" is the median of.
TYPICAL_WINDOW = 64


def case_id_for(trial_id: str, exchange_id: str) -> str:
    """Deterministic case id: the same exchange in the same trial is the same case."""
    h = hashlib.blake2b(digest_size=12, person=b"st-case-v1")
    h.update(trial_id.encode() + b"\x1f" + exchange_id.encode())
    return h.hexdigest()


def candidate_request(subject: Subject, exchange: Exchange, headers: dict[str, str]) -> tuple[ChatRequest, int]:
    """The served request with the model swapped and the output bounded."""
    params = {k: v for k, v in exchange.request.params.items() if k not in _DROP_PARAMS}
    max_tokens = params.pop("max_completion_tokens", None) or params.get("max_tokens") or subject.record.candidate_max_tokens
    max_tokens = int(max_tokens)
    params["max_tokens"] = max_tokens
    return ChatRequest(model=subject.candidate_upstream, messages=exchange.request.messages, params=params, headers=headers), max_tokens


def incumbent_cost(exchange: Exchange, price: Price | None) -> Cost:
    """What the served call cost, for the paired cost view.

    The trial's configured price (its ``incumbent_price``, else the config's list price)
    wins over a cost the gateway reports: a gateway's figure can be set by one caller for
    every team (LiteLLM re-prices a model for its whole process from one request body), the
    operator's price cannot. With a price but no token counts the cost is unknown — the
    gateway's figure cannot be checked against the price. The gateway's cost is taken only
    for a trial with no price at all."""
    usage = exchange.response.usage
    if price is not None:
        return price_usage(price, usage.inputs(), usage.outputs())
    if usage.cost_usd is not None:
        return Cost(round(usage.cost_usd * 1_000_000), "complete", "gateway")
    return Cost.unknown()


class _Shed(Exception):
    """A reservation ended the case before dispatch (or before judging)."""

    def __init__(self, outcome: str, error: str, trial_status: str | None = None) -> None:
        super().__init__(error)
        self.outcome = outcome
        self.error = error
        self.trial_status = trial_status


@dataclass
class _Case:
    """The case in hand: what it has reserved, and whether its candidate was dispatched."""

    subject: Subject
    case_id: str
    #: What the case was started with: its exchange id and the incumbent's figures.
    start: CaseStart | None = None
    reserved: int = 0
    dispatched: bool = False
    charges: list[spend.Charge] = field(default_factory=list)


class CaseRunner:
    """Runs cases on the engine's loop against the engine's own store.

    ``reserve_wait_s`` bounds how long a case waits for room that other cases'
    reservations hold. Waiting cases of a subject form a line; a case of this
    process that releases a reservation wakes the head of every line, and a
    head also retries after ``poll_s``, so a peer's releases are seen.
    """

    def __init__(
        self,
        *,
        store: Store,
        owner: str,
        funnel: FunnelCounter,
        shadow_header: str,
        hooks: Sequence[FinishHook] = (),
        reserve_wait_s: float = 30.0,
        poll_s: float = 0.5,
        clock: Callable[[], float] = time.time,
        authorise: Callable[[Subject], Awaitable[str | None]] | None = None,
        may_spend: Callable[[Subject], bool] | None = None,
        tally: Tally | None = None,
        tracer: Tracer | None = None,
        sample_ratio: float = 1.0,
        sealer: Sealer | None = None,
    ) -> None:
        #: Seals the bodies a retention-on case keeps (the retention key); None: kept as JSON text.
        self.sealer = sealer
        #: Asked right before each dispatch: None, or why the subject may no longer spend
        #: (the engine pauses the trial; the case is shed, its reservation released).
        self.authorise = authorise
        #: Without side effects: whether ``authorise`` would let the subject spend now (None:
        #: unknown, so every case asks ``authorise`` after its reservation).
        self.may_spend = may_spend
        self.store = store
        self.owner = owner
        self.funnel = funnel
        self.shadow_header = shadow_header
        self.hooks = tuple(hooks)
        self.reserve_wait_s = reserve_wait_s
        self.poll_s = poll_s
        self.clock = clock
        self.tally = tally if tally is not None else Tally()
        self.tracer = tracer
        self.sample_ratio = sample_ratio
        self._room = asyncio.Condition()
        self._lines: dict[str, asyncio.Lock] = {}
        self._recent: dict[str, deque[int]] = {}

    async def run(self, subject: Subject, exchange: Exchange) -> str:
        """Run one case; returns its outcome (``duplicate`` when it was not a new case)."""
        if self.tracer is None:
            return await self._run(subject, exchange, spans.NOT_TRACED)
        rec = subject.record
        with spans.case_span(
            self.tracer, sample_ratio=self.sample_ratio, trial_id=subject.id, case_id=case_id_for(subject.id, exchange.exchange_id),
            kind=subject.kind, judge_version=rec.judge_version_id, traceparent=exchange.traceparent,
        ) as span:
            return await self._run(subject, exchange, span)

    async def _run(self, subject: Subject, exchange: Exchange, span: Span) -> str:
        try:
            prepared = self._prepare(subject, exchange)
        except Exception as exc:  # an exchange the engine cannot turn into a request
            log.warning("exchange %s cannot be dispatched for %s: %s", exchange.exchange_id, subject.id, describe(exc))
            spans.unexpected(span, exc)
            self.funnel.add(subject.id, "indeterminate")
            spans.end_case(span, "indeterminate")
            return "indeterminate"
        request, max_tokens, plan, audited, judge_calls, start, judge_bound = prepared
        # The common case claims, reserves and marks itself dispatched in one store write: when
        # no case of its subject waits in line for room (it would jump the line) and its starter
        # may spend (asked now, right before that write and the dispatch that follows it; a
        # starter who may not goes the long way, where ``authorise`` pauses the trial).
        combined = not self._line_busy(subject) and self._may_spend(subject)
        try:
            if combined:
                claimed, dispatched = await _persist(
                    lambda: self.store.claim_and_reserve(start, plan.total, at=self.clock()))
            else:
                claimed, dispatched = await _persist(lambda: self.store.claim_case(start)), False
        except Exception as exc:  # the store refused the claim: nothing of the case is stored
            log.error("case %s of %s could not be claimed (%s); counted indeterminate",
                      start.case_id, subject.id, type(exc).__name__)
            spans.unexpected(span, exc)
            self.funnel.add(subject.id, "indeterminate")
            spans.end_case(span, "indeterminate")
            return "indeterminate"
        if claimed == "duplicate":
            spans.end_case(span, "duplicate")
            return "duplicate"
        if claimed == "not_running":  # the trial ended meanwhile; the store recorded and counted the case
            # As the store counted it, from the trial's status as this engine last read it.
            counted = ended_outcome(subject.record.status) or "shed_stopped"
            self.tally.outcome(counted)
            spans.end_case(span, counted)
            return "not_running"
        case = _Case(subject, start.case_id, start)
        if dispatched:
            case.reserved, case.dispatched = plan.total, True
        try:
            finish = await self._run_claimed(case, exchange, request, max_tokens, plan, audited, judge_calls,
                                             judge_bound)
        except _Shed as shed:
            finish = self._finish(case, shed.outcome, error=shed.error, trial_status=shed.trial_status)
        except asyncio.CancelledError:
            raise  # the case stays in flight with our owner; retire or a peer's recovery settles it
        except Exception as exc:
            log.error("case %s of %s failed unexpectedly: %s", case.case_id, subject.id, describe(exc))
            spans.unexpected(span, exc)
            finish = self._unexpected(case, exc)
        finish = _with_effects(finish, self._effects(subject, finish))
        # A store that keeps failing leaves the case in flight under our owner: retire (at
        # stop) or a peer's sweep (after our lease) gives it its outcome; it is never lost.
        await _persist(lambda: self.store.finish_case(finish, self.owner))
        self._count(finish)
        spans.end_case(span, finish.outcome, audited=audited, reserved=case.reserved, charged=finish.charged_micros)
        if case.reserved:
            async with self._room:  # its reservation is released: the heads of the lines try again
                self._room.notify_all()
        return finish.outcome

    def _count(self, finish: CaseFinish) -> None:
        """The finished case's outcome and judgments, for the metrics (now that the store has them)."""
        self.tally.outcome(finish.outcome)
        for row in finish.judgments:
            self.tally.judgment(row.outcome, row.score, row.error)

    async def record_unrun(self, subject: Subject, exchange_id: str) -> str:
        """A case sampled before a crash whose content was not kept (retention off): it cannot
        run, so it is claimed and finished ``shed_stopped`` — or, if the previous life had
        claimed it, recognised as the same case and left alone."""
        start = CaseStart(
            case_id=case_id_for(subject.id, exchange_id), trial_id=subject.id, exchange_id=exchange_id,
            owner=self.owner, incumbent_latency_ms=None, incumbent_output_tokens=None,
            incumbent_cost_micros=0, incumbent_cost_coverage="unknown", created_at=self.clock(),
        )
        claimed = await self.store.claim_case(start)
        if claimed in ("duplicate", "not_running"):
            return claimed
        case = _Case(subject, start.case_id, start)
        finish = self._finish(case, "shed_stopped", error="the sidecar stopped before it ran; its content was not kept")
        finish = _with_effects(finish, self._effects(subject, finish))
        await _persist(lambda: self.store.finish_case(finish, self.owner))
        self._count(finish)
        return finish.outcome

    def _effects(self, subject: Subject, finish: CaseFinish) -> tuple[Effect, ...]:
        """What the post-finish hooks add; a hook that raises is logged and adds nothing, so
        the case still ends with its outcome."""
        out: list[Effect] = []
        for hook in self.hooks:
            try:
                out.extend(hook(subject, finish))
            except Exception as exc:
                log.error("post-finish hook %s failed for case %s (%s); the case is recorded without it",
                          getattr(hook, "__name__", hook), finish.case_id, type(exc).__name__)
        return tuple(out)

    # -- steps ---------------------------------------------------------------

    def _prepare(
        self, subject: Subject, exchange: Exchange
    ) -> tuple[ChatRequest, int, CasePlan, bool, int, CaseStart, JudgeInputBound]:
        rec = subject.record
        case_id = case_id_for(subject.id, exchange.exchange_id)
        headers = {self.shadow_header: "1", "X-Shadowtrial-Trial": subject.id}
        request, max_tokens = candidate_request(subject, exchange, headers)
        audited = audit_selected(subject.id, case_id, rec.audit_share, key=ORDER_KEY)
        judge_calls = MAX_CALLS_PER_JUDGMENT * (2 if audited else 1)
        incumbent_answer = exchange.response.content or ""
        judge_bound = JudgeInputBound(exchange.request.messages, subject.judge_spec)  # rendered once, used throughout
        candidate_input_bound = input_tokens_upper_bound(
            json.dumps(request.messages, ensure_ascii=False),
            json.dumps(request.params.get("tools") or [], ensure_ascii=False),
            messages=len(request.messages),
        )
        plan = plan_case(
            candidate_price=subject.candidate_price,
            candidate_input_bound=candidate_input_bound,
            candidate_max_tokens=max_tokens,
            judge_price=subject.judge_price,
            judge_input_bound_without_candidate=judge_bound.bound(incumbent_answer, ""),
            judge_max_tokens=subject.judge_spec.max_tokens,
            judge_calls=judge_calls,
        )
        inc_cost = incumbent_cost(exchange, subject.incumbent_price)
        start = CaseStart(
            case_id=case_id,
            trial_id=subject.id,
            exchange_id=exchange.exchange_id,
            owner=self.owner,
            incumbent_latency_ms=exchange.latency_ms,
            incumbent_output_tokens=exchange.response.usage.outputs(),
            incumbent_cost_micros=inc_cost.known_micros,
            incumbent_cost_coverage=inc_cost.coverage,
            created_at=self.clock(),
            segment_values=case_segments(rec, exchange),
            segment_cap=rec.segment_cap,
        )
        return request, max_tokens, plan, audited, judge_calls, start, judge_bound

    def _line_busy(self, subject: Subject) -> bool:
        """Whether cases of ``subject`` wait in line for room under its cap."""
        line = self._lines.get(subject.id)
        return line is not None and line.locked()

    def _may_spend(self, subject: Subject) -> bool:
        if self.authorise is None:
            return True
        return self.may_spend is not None and self.may_spend(subject)

    async def _reserve(self, case: _Case, amount: int, *, kind: LedgerKind, typical: int) -> None:
        """Reserve ``amount`` for ``case`` or raise :class:`_Shed`.

        While only other cases' reservations stand in the way, the case waits in
        its subject's line (first come, first served): only the head of the line
        retries against the store, so a full cap costs one attempt per release or
        ``poll_s``, not one per waiting case."""
        deadline = time.monotonic() + self.reserve_wait_s
        line = self._lines.setdefault(case.subject.id, asyncio.Lock())
        if not line.locked() and await self._try_reserve(case, amount, kind=kind, typical=typical):
            return
        try:
            await asyncio.wait_for(line.acquire(), timeout=max(deadline - time.monotonic(), 0))
        except asyncio.TimeoutError:
            raise _Shed("shed_cap_busy", "no room under the cap opened within the wait bound") from None
        try:
            while not await self._try_reserve(case, amount, kind=kind, typical=typical):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise _Shed("shed_cap_busy", "no room under the cap opened within the wait bound")
                async with self._room:
                    try:
                        await asyncio.wait_for(self._room.wait(), timeout=min(self.poll_s, left))
                    except asyncio.TimeoutError:
                        pass
        finally:
            line.release()

    async def _try_reserve(self, case: _Case, amount: int, *, kind: LedgerKind, typical: int) -> bool:
        """One attempt: True when reserved, False when it is worth waiting; raises :class:`_Shed` otherwise."""
        result = await self.store.reserve(case.subject.id, case.case_id, amount, kind=kind, at=self.clock())
        if result.applied:
            case.reserved += amount
            return True
        why = spend.refusal(
            status=result.status, cap=result.cap_micros, spent=result.spent_micros, amount=amount, typical=typical
        )
        if why == "not_running":
            raise _Shed(ended_outcome(result.status) or "shed_stopped", f"trial is {result.status}")
        if why == "trial_exhausted":
            raise _Shed("cap_reached", "the remaining cap cannot cover a typical case", trial_status="cap_reached")
        if why == "case_too_large":
            raise _Shed("cap_reached", f"this case's worst case ({amount} µ$) exceeds what is left of the cap")
        return False

    def _typical(self, subject: Subject, amount: int) -> int:
        """The subject's typical worst case. A case that could not fit even in the whole cap
        is an outlier: it is refused on its own (``case_too_large``) and never becomes the
        typical case, so one huge request cannot end a trial (0 while there is no history)."""
        recent = self._recent.setdefault(subject.id, deque(maxlen=TYPICAL_WINDOW))
        if amount <= subject.record.cap_micros:
            recent.append(amount)
        return spend.typical_worst_case(recent, 0)

    async def _run_claimed(
        self,
        case: _Case,
        exchange: Exchange,
        request: ChatRequest,
        max_tokens: int,
        plan: CasePlan,
        audited: bool,
        judge_calls: int,
        judge_bound: JudgeInputBound,
    ) -> CaseFinish:
        subject = case.subject
        spec = subject.judge_spec
        typical = self._typical(subject, plan.total)
        if not case.dispatched:  # else reserved and dispatched with its claim (see _run)
            await self._reserve(case, plan.total, kind="reserve", typical=typical)
            if self.authorise is not None:
                refused = await self.authorise(subject)
                if refused is not None:
                    raise _Shed("shed_stopped", refused)
            if not await self.store.mark_dispatched(case.case_id, self.owner):
                raise _Shed("indeterminate", "the case was recovered by a peer before dispatch")
            case.dispatched = True
        result = await subject.candidate.chat(request)
        case.charges.append(_candidate_charge(subject, result, plan.candidate_micros))
        if not result.ok:
            return self._finish(case, "candidate_failed", error=f"candidate: {result.error}", result=result)

        conversation = exchange.request.messages
        incumbent_answer = exchange.response.content or ""
        candidate_answer = result.content or ""
        exact_in = judge_bound.bound(incumbent_answer, candidate_answer)
        judge_need = judge_worst_case(
            judge_price=subject.judge_price, judge_input_bound=exact_in, judge_max_tokens=spec.max_tokens, judge_calls=judge_calls
        )
        if judge_need > plan.judge_micros:
            try:
                await self._reserve(case, judge_need - plan.judge_micros, kind="top_up", typical=typical)
            except _Shed as shed:
                return self._finish(case, shed.outcome, error=f"judge not run: {shed.error}", result=result,
                                    trial_status=shed.trial_status)
        per_call_worst = worst_case_micros(subject.judge_price, exact_in, spec.max_tokens)

        order = presentation_order(subject.id, case.case_id, key=ORDER_KEY)
        rendered = judge_bound.conversation_text  # the conversation rendered once for every judge call
        judgments: list[tuple[PairedJudgment, bool]] = [
            (await self._judge(subject, conversation, rendered, incumbent_answer, candidate_answer, order, audit=False),
             False)
        ]
        if audited:
            judgments.append(
                (await self._judge(subject, conversation, rendered, incumbent_answer, candidate_answer, swapped(order),
                                   audit=True), True)
            )
        judge_charges: list[spend.Charge] = []
        for pj, _ in judgments:
            for c in pj.completions:
                if not c.ok and not c.may_have_billed and c.input_tokens is None and c.output_tokens is None:
                    continue  # refused before any work (429/5xx/connection): not billed
                judge_charges.append(spend.charge_usage(subject.judge_price, c.input_tokens, c.output_tokens,
                                                        per_call_worst, disputed=c.usage_disputed))
        case.charges.extend(judge_charges)

        rows = _judgment_rows(subject, case.case_id, judgments, incumbent_answer, candidate_answer, self.clock())
        bodies = None
        if subject.record.prompt_retention:
            bodies = json.dumps(
                {"messages": conversation, "incumbent": incumbent_answer, "candidate": candidate_answer}, ensure_ascii=False
            )
            if self.sealer is not None:  # with the retention key, kept bodies are sealed at rest
                bodies = seal_case_bodies(self.sealer, bodies, team=subject.record.team, case_id=case.case_id)
        _, judge_cost, _, _, _ = spend.total(judge_charges)
        valid = [pj.score for pj, _ in judgments if pj.outcome == "verdict" and pj.score is not None]
        common: dict[str, Any] = dict(
            result=result,
            judge_cost=judge_cost,
            judgments=rows,
            bodies_json=bodies,
        )
        if not valid:
            errors = "; ".join(pj.error or "error" for pj, _ in judgments)
            return self._finish(case, "judge_failed", error=f"judge: {errors}", **common)
        return self._finish(case, "judged", score=sum(valid) / len(valid), **common)

    async def _judge(
        self, subject: Subject, conversation: list[dict[str, Any]], rendered: str, incumbent: str, candidate: str,
        order: Order, *, audit: bool,
    ) -> PairedJudgment:
        """One judgment, in its own span (the judge's model calls are its children)."""
        if self.tracer is None:
            return await subject.judge.judge(conversation, incumbent, candidate, order, rendered=rendered)
        with spans.judge_span(self.tracer, order=order, audit=audit,
                              judge_version=subject.record.judge_version_id) as span:
            pj = await subject.judge.judge(conversation, incumbent, candidate, order, rendered=rendered)
            spans.end_judgment(span, outcome=judgment_outcome(pj.outcome, pj.score, pj.error), score=pj.score,
                               calls=len(pj.completions))
            return pj

    # -- settling ------------------------------------------------------------

    def _finish(
        self,
        case: _Case,
        outcome: str,
        *,
        error: str | None = None,
        result: ProviderResult | None = None,
        judge_cost: Cost | None = None,
        judgments: list[JudgmentRow] | None = None,
        bodies_json: str | None = None,
        score: float | None = None,
        trial_status: str | None = None,
    ) -> CaseFinish:
        charged, cost, unknown, priced, disputed = spend.total(case.charges)
        assert charged <= case.reserved, "a case is never charged more than it reserved"
        cand = case.charges[0].cost if case.charges else Cost.zero()
        if disputed:
            error = (error + "; " if error else "") + f"{disputed} disputed usage report(s): charged at the worst case"
        return CaseFinish(
            case_id=case.case_id,
            trial_id=case.subject.id,
            outcome=outcome,
            charged_micros=charged,
            known_micros=cost.known_micros,
            unknown_calls=unknown,
            priced_calls=priced,
            candidate_cost_micros=cand.known_micros,
            candidate_cost_coverage=cand.coverage,
            judge_cost_micros=(judge_cost or Cost.zero()).known_micros,
            judge_cost_coverage=(judge_cost or Cost.zero()).coverage,
            candidate_latency_ms=result.latency_ms if result is not None and result.ok else None,
            candidate_output_tokens=result.output_tokens if result is not None else None,
            score=score,
            error=error,
            finished_at=self.clock(),
            judgments=judgments or [],
            bodies_json=bodies_json,
            trial_status=trial_status,
            trial_status_reason="the remaining cap cannot cover a typical case" if trial_status == "cap_reached" else None,
            disputed_calls=disputed,
            exchange_id=case.start.exchange_id if case.start is not None else "",
            incumbent_latency_ms=case.start.incumbent_latency_ms if case.start is not None else None,
            incumbent_cost_micros=case.start.incumbent_cost_micros if case.start is not None else None,
            incumbent_cost_coverage=case.start.incumbent_cost_coverage if case.start is not None else "unknown",
        )

    def _unexpected(self, case: _Case, exc: Exception) -> CaseFinish:
        """An error nobody planned for is an outcome too. A dispatched case may have
        been billed for anything up to its reservation: that is held, as unknown."""
        if case.dispatched:
            case.charges = [spend.Charge(case.reserved, Cost.unknown())]
        return self._finish(case, "indeterminate", error=f"internal error: {describe(exc)}")


#: Store writes that fail are tried this many times in all, with these pauses between.
PERSIST_PAUSES_S = (0.5, 2.0)


async def _persist(write: Callable[[], Awaitable[T]]) -> T:
    """A store write of a case, retried a few times: a locked or briefly unreachable store
    must not cost a case its outcome."""
    for pause in PERSIST_PAUSES_S:
        try:
            return await write()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("store write failed (%s: %s); trying again in %.1f s", type(exc).__name__, exc, pause)
            await asyncio.sleep(pause)
    return await write()


def _candidate_charge(subject: Subject, result: ProviderResult, worst: int) -> spend.Charge:
    if not (result.ok or result.may_have_billed):
        return spend.NOTHING  # refused before any work: nothing was billed
    charge = spend.charge_usage(subject.candidate_price, result.input_tokens, result.output_tokens, worst,
                                disputed=result.usage_disputed)
    if result.unknown_fate_attempts and charge.cost.coverage == "complete":
        # An earlier attempt of this call may also have been billed: not all of it is known.
        charge = spend.Charge(charge.charged_micros, Cost(charge.cost.known_micros, "partial"), charge.disputed)
    return charge


def _judgment_rows(
    subject: Subject,
    case_id: str,
    judgments: list[tuple[PairedJudgment, bool]],
    incumbent_answer: str,
    candidate_answer: str,
    now: float,
) -> list[JudgmentRow]:
    longer = _longer(incumbent_answer, candidate_answer)
    return [
        JudgmentRow(
            judgment_id=_judgment_id(),
            case_id=case_id,
            trial_id=subject.id,
            judge_version_id=subject.record.judge_version_id,
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
        for pj, is_audit in judgments
    ]


#: Judgment ids: 128 random bits as 32 hex digits, from a generator seeded once from the OS
#: (``uuid4`` asked the OS each time: a system call, and a GIL handover to the store's thread).
#: A forked process seeds it from the OS again: two children of one parent would otherwise draw
#: the same ids (the engine's process is spawned, but an embedding program may fork).
_ids = random.Random()
os.register_at_fork(after_in_child=_ids.seed)


def _judgment_id() -> str:
    return f"{_ids.getrandbits(128):032x}"


def _with_effects(finish: CaseFinish, effects: tuple[Effect, ...]) -> CaseFinish:
    return replace(finish, effects=finish.effects + effects) if effects else finish


def _longer(incumbent: str, candidate: str) -> str | None:
    if len(incumbent) == len(candidate):
        return None
    return "candidate" if len(candidate) > len(incumbent) else "incumbent"


def _longer_won(pj: PairedJudgment, longer: str | None) -> bool | None:
    if pj.outcome != "verdict" or pj.score in (None, 0) or longer is None:
        return None
    winner = "candidate" if (pj.score or 0) > 0 else "incumbent"
    return winner == longer
