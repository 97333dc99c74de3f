"""Gates that rollout controllers call (issue 26, item 1; docs/promotion.md).

Two kinds of caller ask shadowtrial for a decision over HTTP, and this module answers both from
the same views the API and the console read (no second reading of the evidence):

- **Argo Rollouts' ``web`` metric** GETs a gate document and reads it with ``jsonPath``:
  :func:`trial_gate` (``GET /v1/trials/{id}/gate``) and :func:`watch_gate`
  (``GET /v1/watches/{id}/gate``). Their fields are stable and typed: booleans are always
  booleans, counts integers, bounds numbers, so ``successCondition: result.adoptable == true``
  and ``failureCondition: result.rejected == true`` hold whatever the trial's state, and
  anything else (still collecting, paused) is neither: an *Inconclusive* measurement.
- **Flagger's webhooks** POST ``{"name", "namespace", "phase", "metadata": {...}}`` and read
  only the status code: :meth:`GateService.confirm_promotion` answers 200 only when the named
  trial is Adoptable, and promotes it (creating its watch) — once: a retry, or a trial an
  operator promoted already, answers 200 with the same watch; :meth:`GateService.rollback`
  answers 200 when the watch born of that trial's promotion has an unresolved alert (firing,
  or acknowledged but not yet resolved). Every other answer is ``409`` in the API's error shape
  (``gate_held``, ``no_alert``), which Flagger reads as "not yet".

Who may ask: a reader of the trial's team for the documents and the rollback gate; a writer
(the promote right) for ``confirm-promotion``, which promotes.
"""

from __future__ import annotations

from typing import Any, Mapping

import msgspec

from policies.promotion import ADOPTABLE_CODES, DEFAULT_WATCH_SAMPLE_RATE
from policies.roles import Principal
from sidecar.errors import BadRequest, Conflict, PromotionRefused
from sidecar.services.access import require
from sidecar.ingest.wire import split_path
from sidecar.services.promotion import PromoteBody, PromotionService
from sidecar.services.trials import TrialService
from sidecar.services.watches import WatchService

#: Phases of a trial's gate (``phase``): what a controller may do now.
PHASES = ("collecting", "adoptable", "rejected", "adopted", "paused", "inconclusive")
#: Alert statuses the rollback gate answers 200 for: drift seen and not resolved.
UNRESOLVED = ("firing", "acknowledged")


class FlaggerPayload(msgspec.Struct, frozen=True):
    """Flagger's webhook payload (its ``CanaryWebhookPayload``). Unknown fields are ignored: a
    newer Flagger must not break the gate. ``metadata`` is the webhook's own ``metadata`` map
    (strings): ``trial`` names the trial; ``daily_cap_usd``, ``sample_rate`` and ``min_judged``
    set the watch ``confirm-promotion`` creates; ``token`` may carry the bearer token, since a
    Flagger webhook sends no headers of its own."""

    name: str
    namespace: str
    phase: str = ""
    metadata: dict[str, str] = msgspec.field(default_factory=dict)


_payload = msgspec.json.Decoder(FlaggerPayload)


def decode_flagger(raw: bytes) -> FlaggerPayload:
    try:
        return _payload.decode(raw)
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        raise BadRequest(message, field=path) from None
    except msgspec.DecodeError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None


def _trial_named(payload: FlaggerPayload) -> str:
    trial = payload.metadata.get("trial", "")
    if not trial:
        raise BadRequest("name the trial in the webhook's metadata: metadata.trial", field="$.metadata.trial")
    return trial


def _number(metadata: Mapping[str, str], key: str, default: float | None) -> float | None:
    text = metadata.get(key)
    if text is None:
        return default
    try:
        return float(text)
    except ValueError:
        raise BadRequest(f"metadata.{key} must be a number, got {text!r}", field=f"$.metadata.{key}") from None


def promote_body(metadata: Mapping[str, str]) -> PromoteBody:
    """The promotion a ``confirm-promotion`` webhook asks for, from its metadata (strings)."""
    cap = _number(metadata, "daily_cap_usd", None)
    if cap is None:
        raise BadRequest("metadata.daily_cap_usd (the watch's daily spend cap) is required to promote",
                         field="$.metadata.daily_cap_usd")
    rate = _number(metadata, "sample_rate", DEFAULT_WATCH_SAMPLE_RATE)
    min_judged = _number(metadata, "min_judged", 30)
    assert rate is not None and min_judged is not None
    if min_judged != int(min_judged):
        raise BadRequest("metadata.min_judged must be a whole number", field="$.metadata.min_judged")
    from sidecar.services.promotion import decode_promote  # its checks, with the API's messages

    body: dict[str, Any] = {"daily_cap_usd": cap, "sample_rate": rate, "min_judged": int(min_judged),
                            "note": "promoted by a Flagger confirm-promotion webhook"}
    ack = acknowledged_segments(metadata)
    if ack:
        body["acknowledge_segments"] = ack
    return decode_promote(msgspec.json.encode(body))


def acknowledged_segments(metadata: Mapping[str, str]) -> list[str]:
    """The rejected segment keys a webhook acknowledges: ``metadata.acknowledge_segments``, the
    keys separated by commas (Flagger's metadata holds strings only)."""
    text = metadata.get("acknowledge_segments", "")
    return [k.strip() for k in text.split(",") if k.strip()]


def trial_phase(status: str, code: str) -> str:
    """The gate's phase of a trial in ``status`` with verdict ``code``."""
    if status == "adopted":
        return "adopted"
    if status in ("posture_changed", "starter_unauthorized"):
        return "paused"
    if code in ADOPTABLE_CODES:
        return "adoptable"
    if code == "regression":
        return "rejected"
    return "collecting" if status == "running" else "inconclusive"


def trial_gate(view: Mapping[str, Any], watch_id: str | None) -> dict[str, Any]:
    """The gate document of a trial from its view (:func:`sidecar.services.views.trial_view`)."""
    v = view["verdict"]
    bounds = v.get("decision_bounds") or {}
    phase = trial_phase(view["status"], v["code"])
    return {
        "kind": "trial",
        "trial_id": view["id"],
        "team": view["team"],
        "status": view["status"],
        "phase": phase,
        "adoptable": phase in ("adoptable", "adopted"),
        "rejected": phase == "rejected",
        "decided": v["code"] != "inconclusive",
        "verdict": v["code"],
        "wording": v["wording"],
        "judged": int(v.get("cases") or 0),
        "decision_bounds": {"lower": float(bounds.get("lower", 0.0)), "upper": float(bounds.get("upper", 1.0))},
        "tolerance": float(v.get("tolerance", 0.0)),
        "watch_id": watch_id,
        # The trial's rejected segment values (issue 27): promotion needs them acknowledged.
        "segments_rejected": list((view.get("segments") or {}).get("rejected") or []),
    }


def watch_gate(view: Mapping[str, Any], alert_status: str | None) -> dict[str, Any]:
    """The gate document of a watch from its view (:meth:`WatchService.view`): ``drifting`` is
    true while the current period has an unresolved alert."""
    drifting = alert_status in UNRESOLVED
    detector = view["detector"]
    return {
        "kind": "watch",
        "watch_id": view["id"],
        "trial_id": view["trial_id"],
        "team": view["team"],
        "status": view["status"],
        "drifting": drifting,
        "healthy": view["status"] == "active" and not drifting,
        "alert_id": (view.get("alert") or {}).get("id"),
        "alert_status": alert_status,
        "period": int(view["period"]["number"]),
        "judged": int(view["judged"]),
        "old_win_rate": view["old_win_rate"],
        "statistic": float(detector["statistic"]),
        "threshold": float(detector["threshold"]),
    }


class GateService:
    """The gates, over the trial, watch and promotion services (their access checks included)."""

    def __init__(self, trials: TrialService, watches: WatchService, promotion: PromotionService) -> None:
        self._trials = trials
        self._watches = watches
        self._promotion = promotion

    async def _watch_of(self, principal: Principal, trial_id: str) -> dict[str, Any] | None:
        for w in await self._watches.list(principal):
            if w["trial_id"] == trial_id:
                return w
        return None

    async def trial(self, principal: Principal, trial_id: str) -> dict[str, Any]:
        view = await self._trials.get(principal, trial_id)  # 404 for a trial the principal cannot see
        watch = await self._watch_of(principal, trial_id) if view["status"] == "adopted" else None
        return trial_gate(view, None if watch is None else watch["id"])

    async def watch(self, principal: Principal, watch_id: str) -> dict[str, Any]:
        view = await self._watches.get(principal, watch_id)
        return watch_gate(view, (view.get("alert") or {}).get("status"))

    async def confirm_promotion(self, principal: Principal, payload: FlaggerPayload) -> dict[str, Any]:
        """200's body when the trial is (now) Adopted; :class:`Conflict` ``gate_held`` otherwise."""
        trial_id = _trial_named(payload)
        gate = await self.trial(principal, trial_id)
        require(principal, gate["team"], "write", not_found=f"no trial {trial_id!r}",
                forbidden=f"your roles may read trial {trial_id!r} but not promote it")
        if gate["phase"] == "adopted":  # a retry, or promoted by an operator: confirmed, nothing more
            return {**gate, "promoted": False}
        if gate["phase"] != "adoptable":
            raise Conflict(f"trial {trial_id} is {gate['wording']} ({gate['phase']}): promotion held until it is "
                           "Adoptable", code="gate_held")
        body = promote_body(payload.metadata)
        missing = [k for k in gate["segments_rejected"] if k not in set(body.acknowledge_segments or ())]
        if missing:
            raise Conflict(
                f"trial {trial_id} is Adoptable overall but Rejected on {', '.join(missing)}: promotion held until "
                "the webhook's metadata.acknowledge_segments lists them (comma-separated)",
                code="gate_held", field="$.metadata.acknowledge_segments",
            )
        key = f"flagger:{payload.namespace}/{payload.name}"
        try:
            watch, created = await self._promotion.promote(principal, trial_id, body, msgspec.json.encode(body), key)
        except PromotionRefused as exc:
            if exc.reason != "already_promoted":  # a concurrent retry that lost the race is confirmed below
                raise Conflict(f"promotion of {trial_id} held: {exc.message}", code="gate_held") from None
            return {**await self.trial(principal, trial_id), "promoted": False}
        return {**await self.trial(principal, trial_id), "promoted": created, "watch_id": watch.id}

    async def advance(self, principal: Principal, payload: FlaggerPayload, hook: str) -> dict[str, Any]:
        """Flagger's ``pre-rollout`` and ``rollout`` webhooks: 200's body (the trial's gate) while
        the named trial is not Rejected — collecting, adoptable, adopted, paused, inconclusive —
        so the canary may advance; :class:`Conflict` ``trial_rejected`` once it is, which Flagger
        counts as a failed check (the canary pauses, then rolls back at its ``threshold``).
        A trial the caller cannot see is ``404`` (a failed check too)."""
        trial_id = _trial_named(payload)
        gate = await self.trial(principal, trial_id)
        if gate["phase"] == "rejected":
            raise Conflict(f"trial {trial_id} is Rejected: the {hook} gate halts the canary", code="trial_rejected")
        return gate

    async def rollback(self, principal: Principal, payload: FlaggerPayload) -> dict[str, Any]:
        """200's body when the watch of the trial's promotion has an unresolved alert;
        :class:`Conflict` ``no_alert`` otherwise (no watch yet, or no drift)."""
        trial_id = _trial_named(payload)
        await self._trials.get(principal, trial_id)  # 404 for a trial the principal cannot see
        watch = await self._watch_of(principal, trial_id)
        if watch is None:
            raise Conflict(f"trial {trial_id} has no watch (it was not promoted): nothing to roll back",
                           code="no_alert")
        gate = watch_gate(watch, (watch.get("alert") or {}).get("status"))
        if not gate["drifting"]:
            raise Conflict(f"watch {watch['id']} of trial {trial_id} has no unresolved alert", code="no_alert")
        return gate
