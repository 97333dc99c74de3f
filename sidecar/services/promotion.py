"""Promotion: an *Adoptable* traffic verdict becomes *Adopted*, and a watch is born.

``POST /v1/trials/{id}/promote`` (and ``shadowtrial trials promote``) on behalf of a
principal who writes the trial's team. The rules are :func:`policies.promotion.refusal`;
this module gathers their inputs (the evidence kind, the trial's status, its verdict now)
and answers a refusal with ``409 promotion_refused`` and the ``reason``.

Evidence kind. A trial is traffic evidence. The request may *declare* what it promotes
from with ``evidence`` (``traffic``, the default, or ``corpus``); the rule takes the
declared kind and the subject's own kind, and refuses if either is corpus — so a client
that promotes from an experiment's result (once experiments exist) is refused by the API
itself, and the same rule will guard ``/v1/experiments/{id}/promote``.

One store transaction (:meth:`~sidecar.store.base.WatchStore.promote`) marks the trial
``adopted``, records the promotion (who, when, the evidence snapshot: verdict, intervals,
judge version, funnel, spend) and inserts the watch with its first day row. An
``Idempotency-Key`` makes a deployment pipeline's retry safe: the same key and body
return the first watch; another body is ``409 request_key_conflict``.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any, Literal

import msgspec

from policies.money import Price
from policies.promotion import DEFAULT_WATCH_SAMPLE_RATE, PROMOTABLE, refusal, utc_day
from policies.roles import Principal
from policies.segments import MAX_CAP, MAX_TAG_KEY_CHARS, MAX_TAG_VALUE_CHARS
from sidecar.services.views import read_trial, trial_view
from sidecar.errors import BadRequest, NotFound, PromotionRefused
from sidecar.ingest.wire import split_path
from sidecar.services.context import PromotionContext
from sidecar.services.access import require
from sidecar.store.watch_records import PromotionRecord, WatchRecord
from sidecar.trials.watch_rows import first_day_row

_WORDS = {
    "corpus_evidence": "corpus evidence (an experiment over a dataset) never promotes; only traffic evidence does",
    "already_promoted": "the trial is adopted already",
    "not_running_or_ended": "the trial is paused; resume or stop it before promoting",
    "not_adoptable": "the verdict is not Adoptable",
    "segments_unacknowledged": "the trial is Rejected on a segment; acknowledge it (acknowledge_segments) to promote",
}
#: The refusal reasons of :func:`policies.promotion.refusal` in words (the console shows them).
REFUSAL_WORDS: dict[str, str] = _WORDS


class PromoteBody(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``POST /v1/trials/{id}/promote``. ``daily_cap_usd`` is the sentinel's own spend cap per
    UTC day, approved here; ``sample_rate`` its share of matching traffic (default 1%)."""

    daily_cap_usd: float
    sample_rate: float = DEFAULT_WATCH_SAMPLE_RATE
    min_judged: int = 30
    evidence: Literal["traffic", "corpus"] = "traffic"
    note: str | None = None
    #: The rejected segment keys of the trial (its view's ``segments.rejected``) the promoter
    #: acknowledges (issue 27): a trial Rejected on any segment is promoted only with all of
    #: them listed here; the acknowledgement is recorded with the promotion.
    acknowledge_segments: list[str] | None = None


_decoder = msgspec.json.Decoder(PromoteBody)


def decode_promote(raw: bytes) -> PromoteBody:
    try:
        body = _decoder.decode(raw or b"{}")
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        raise BadRequest(message, field=path) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not (body.daily_cap_usd > 0 and body.daily_cap_usd <= 1_000_000):
        raise BadRequest("daily_cap_usd must be above 0 and at most 1000000", field="$.daily_cap_usd")
    if not 0 < body.sample_rate <= 1:
        raise BadRequest("sample_rate must be above 0 and at most 1", field="$.sample_rate")
    if not 1 <= body.min_judged <= 100_000:
        raise BadRequest("min_judged must be 1 to 100000", field="$.min_judged")
    if body.note is not None and len(body.note) > 500:
        raise BadRequest("note must be at most 500 characters", field="$.note")
    ack = body.acknowledge_segments or []
    if len(ack) > MAX_CAP + 1 or any(not 1 <= len(k) <= MAX_KEY_CHARS for k in ack):
        raise BadRequest(f"acknowledge_segments lists at most {MAX_CAP + 1} segment keys of 1 to {MAX_KEY_CHARS} "
                         "characters", field="$.acknowledge_segments")
    return body


#: The longest segment key (``tag:NAME=VALUE``).
MAX_KEY_CHARS = 4 + MAX_TAG_KEY_CHARS + 1 + MAX_TAG_VALUE_CHARS


def unacknowledged(view: dict[str, Any], acknowledged: list[str] | None) -> list[str]:
    """The trial's rejected segments (its view's ``segments.rejected``) not in ``acknowledged``."""
    rejected: list[str] = (view.get("segments") or {}).get("rejected") or []
    return [k for k in rejected if k not in set(acknowledged or ())]


def segments_refusal(trial_id: str, view: dict[str, Any], missing: list[str]) -> PromotionRefused:
    """The refusal of a promotion that does not acknowledge every rejected segment."""
    return PromotionRefused(
        f"promotion of {trial_id} refused: {view['segments']['summary']}; to promote anyway, acknowledge the "
        f"rejected segments: acknowledge_segments {json.dumps(missing)}",
        reason="segments_unacknowledged", field="$.acknowledge_segments",
    )


def _missing(trial_id: str) -> str:
    return f"no trial {trial_id!r}"


def _wins(judgments: Any) -> tuple[int, int]:
    """Decisive primary judgments of the promotion trial: (incumbent wins, candidate wins)."""
    inc = sum(1 for j in judgments if not j.is_audit and j.outcome == "verdict" and (j.score or 0) < 0)
    cand = sum(1 for j in judgments if not j.is_audit and j.outcome == "verdict" and (j.score or 0) > 0)
    return inc, cand


class PromotionService:
    def __init__(self, ctx: PromotionContext) -> None:
        self._ctx = ctx

    async def promote(
        self, principal: Principal, trial_id: str, body: PromoteBody, raw: bytes, idempotency_key: str | None
    ) -> tuple[WatchRecord, bool]:
        """(the watch, created now). Raises :class:`PromotionRefused` with the rule's reason."""
        ctx = self._ctx
        read = await read_trial(ctx.views, trial_id)
        if read is None or read.record.kind != "trial":
            raise NotFound(_missing(trial_id))
        record = read.record
        require(principal, record.team, "read", not_found=_missing(trial_id), forbidden=_missing(trial_id))
        require(principal, record.team, "write", not_found=_missing(trial_id),
                forbidden=f"your roles may read trial {trial_id!r} but not promote it")
        view = await trial_view(ctx.views, read)
        verdict = view["verdict"]["code"]
        evidence = "corpus" if body.evidence == "corpus" or view["verdict"].get("evidence") == "corpus" else "traffic"
        why = refusal(evidence=evidence, status=record.status, verdict=verdict)
        if why is not None and not (why == "already_promoted" and idempotency_key is not None):
            raise PromotionRefused(f"promotion of {trial_id} refused: {_WORDS[why]}", reason=why)
        missing = unacknowledged(view, body.acknowledge_segments) if why is None else []
        if missing:
            raise segments_refusal(trial_id, view, missing)
        rejected_segments = (view.get("segments") or {}).get("rejected") or []

        now = ctx.clock()
        try:
            old = ctx.resolve(record.incumbent_model)
        except LookupError:
            raise PromotionRefused(
                f"the replaced model {record.incumbent_model!r} no longer resolves on this sidecar, so it cannot "
                "run as the watch's sentinel", reason="sentinel_unavailable",
            ) from None
        old_price = old.price
        if old_price is None and record.incumbent_price_in is not None and record.incumbent_price_out is not None:
            old_price = Price(record.incumbent_price_in, record.incumbent_price_out)
        if old_price is None:
            raise PromotionRefused(
                f"the replaced model {record.incumbent_model!r} has no list price, so the sentinel's spend "
                "could not be bounded; add one to the config", reason="spend_unbounded",
            )
        inc_wins, cand_wins = _wins(read.snapshot.judgments)
        from policies import cusum  # numpy: imported on the first promotion, not with the sidecar

        baseline = cusum.baseline_from_promotion(inc_wins, cand_wins)
        design = cusum.design(baseline, min_judged=body.min_judged)
        watch_id = "wa_" + uuid.uuid4().hex[:16]
        daily_cap = round(body.daily_cap_usd * 1_000_000)
        first = first_day_row(
            record, watch_id=watch_id, sample_rate=body.sample_rate, daily_cap_micros=daily_cap,
            old_price=old_price, now=now, started_by=principal.subject,
        )
        watch = WatchRecord(
            id=watch_id, team=record.team, trial_id=record.id, old_model=record.incumbent_model,
            new_model=record.candidate_model, route=record.route, gateway=record.gateway,
            sample_rate=body.sample_rate, daily_cap_micros=daily_cap, judge_version_id=record.judge_version_id,
            baseline=baseline, design_json=json.dumps(design.to_dict()), created_at=now,
            created_by=principal.subject, current_day=utc_day(now), current_trial_id=first.id,
        )
        snapshot = {
            "verdict": view["verdict"], "judge": view["judge"],
            "funnel": view.get("funnel"), "spend": view.get("spend"),
            "decisive_primary_judgments": {"incumbent_wins": inc_wins, "candidate_wins": cand_wins},
            "note": body.note,
            "segments": view.get("segments"),
            "acknowledged_segments": rejected_segments,
        }
        promotion = PromotionRecord(
            id="pr_" + uuid.uuid4().hex[:16], trial_id=record.id, watch_id=watch_id, team=record.team,
            promoted_by=principal.subject, promoted_at=now, evidence_json=json.dumps(snapshot, default=str),
            acknowledged_segments=json.dumps(rejected_segments) if rejected_segments else None,
        )
        key = None if idempotency_key is None else f"promote\x1f{trial_id}\x1f{idempotency_key}"
        body_hash = None if key is None else hashlib.sha256(raw).hexdigest()
        result = await ctx.store.promote(
            promotion, watch, first, promotable=PROMOTABLE, idempotency_key=key, body_hash=body_hash
        )
        if result.watch is None:
            status = result.trial_status
            if status is None:
                raise NotFound(_missing(trial_id))
            why = refusal(evidence="traffic", status=status, verdict=verdict) or "already_promoted"
            raise PromotionRefused(f"promotion of {trial_id} refused: {_WORDS[why]}", reason=why)
        if result.created:
            ctx.routing.remove(record.id)  # the adopted trial samples nothing more
            ctx.routing.add(first)  # the sentinel's first day: matched at once; peers on their refresh
        return result.watch, result.created
