"""The OpenAPI paths of the gates rollout controllers call (merged by :mod:`sidecar.api.openapi`;
docs/promotion.md)."""

from __future__ import annotations

from typing import Any, Callable

#: Flagger's webhook payload (its CanaryWebhookPayload); unknown fields are ignored.
FLAGGER_PAYLOAD: dict[str, Any] = {
    "type": "object",
    "required": ["name", "namespace"],
    "properties": {
        "name": {"type": "string"}, "namespace": {"type": "string"}, "phase": {"type": "string"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"},
                     "description": "trial (required); token (the bearer token, when no Authorization header "
                                    "is sent); confirm-promotion: daily_cap_usd (required), sample_rate, min_judged"},
    },
}


def gate_paths(errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    def path(name: str) -> list[dict[str, Any]]:
        return [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}]

    body = {"content": {"application/json": {"schema": FLAGGER_PAYLOAD}}}
    return {
        "/v1/trials/{trial_id}/gate": {"get": {
            "summary": "A trial's gate document for Argo Rollouts' web metric: adoptable, rejected, decided, phase, "
                       "verdict, judged, decision_bounds (typed, stable), segments_rejected",
            "parameters": path("trial_id"),
            "responses": {"200": {"description": "the gate document"}, **errors(401, 404)},
        }},
        "/v1/watches/{watch_id}/gate": {"get": {
            "summary": "A watch's gate document: drifting, healthy, alert_status, judged, statistic, threshold",
            "parameters": path("watch_id"),
            "responses": {"200": {"description": "the gate document"}, **errors(401, 404)},
        }},
        "/v1/gates/flagger/confirm-promotion": {"post": {
            "summary": "Flagger confirm-promotion webhook: 200 once the named trial is Adoptable (promoted, once; "
                       "its watch created), 409 gate_held before, or while a Rejected segment is not listed in "
                       "metadata.acknowledge_segments (comma-separated keys)",
            "requestBody": body,
            "responses": {"200": {"description": "promoted (now or before)"}, **errors(400, 401, 403, 404, 409)},
        }},
        "/v1/gates/flagger/rollback": {"post": {
            "summary": "Flagger rollback webhook: 200 while the watch of the trial's promotion has an unresolved "
                       "alert, 409 no_alert otherwise",
            "requestBody": body,
            "responses": {"200": {"description": "roll back"}, **errors(400, 401, 404, 409)},
        }},
        "/v1/gates/flagger/pre-rollout": {"post": {
            "summary": "Flagger pre-rollout webhook: 200 while the named trial exists and is not Rejected, "
                       "409 trial_rejected once it is",
            "requestBody": body,
            "responses": {"200": {"description": "the trial's gate document: advance"}, **errors(400, 401, 404, 409)},
        }},
        "/v1/gates/flagger/rollout": {"post": {
            "summary": "Flagger rollout webhook (each analysis iteration): 200 while the named trial is not "
                       "Rejected, 409 trial_rejected once it is (the canary halts, then rolls back)",
            "requestBody": body,
            "responses": {"200": {"description": "the trial's gate document: advance"}, **errors(400, 401, 404, 409)},
        }},
    }
