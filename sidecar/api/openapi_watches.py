"""The OpenAPI paths of promotion, watches, alerts and results (merged by :mod:`sidecar.api.openapi`)."""

from __future__ import annotations

from typing import Any, Callable

from sidecar.trials.create import IDEMPOTENCY_KEY, KEY_PATTERN, MAX_KEY_CHARS, STATUSES


def watch_paths(promote_schema: dict[str, Any], errors: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    def path(name: str) -> list[dict[str, Any]]:
        return [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}]

    def query(name: str, enum: list[str] | None = None, description: str = "") -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "string"}
        if enum is not None:
            schema["enum"] = enum
        return {"name": name, "in": "query", "schema": schema, "description": description}

    idem = {
        "name": IDEMPOTENCY_KEY, "in": "header", "required": False,
        "description": "the same key with the same body returns the watch first created (200); with another body, "
                       "409 request_key_conflict",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": KEY_PATTERN},
    }
    return {
        "/v1/trials/{trial_id}/promote": {"post": {
            "summary": "Promote an Adoptable traffic trial: it becomes Adopted and a watch starts",
            "description": "Refused with 409 promotion_refused and error.reason: corpus_evidence, already_promoted, "
                           "not_running_or_ended, not_adoptable, sentinel_unavailable, spend_unbounded, "
                           "segments_unacknowledged (the trial is Rejected on a segment not listed in "
                           "acknowledge_segments; error.field names it; the acknowledgement is recorded with the "
                           "promotion).",
            "parameters": [*path("trial_id"), idem],
            "requestBody": {"content": {"application/json": {"schema": promote_schema}}},
            "responses": {"201": {"description": "the new watch"},
                          "200": {"description": "the watch first created with this Idempotency-Key"},
                          **errors(400, 403, 404, 409, 413, 415)},
        }},
        "/v1/watches": {
            "get": {"summary": "List watches", "parameters": [query("status", ["active", "stopped"])],
                    "responses": {"200": {"description": "watches"}, **errors(400)}},
            "post": {"summary": "Not allowed: watches are created only by promotion",
                     "responses": errors(405)},
        },
        "/v1/watches/{watch_id}": {"get": {
            "summary": "A watch: its detector period, that period's judged cases, old-model win rate, detector "
                       "statistic and threshold and alert, spend today",
            "parameters": path("watch_id"), "responses": {"200": {"description": "watch"}, **errors(404)}}},
        "/v1/watches/{watch_id}/stop": {"post": {
            "summary": "Stop a watch", "parameters": path("watch_id"),
            "responses": {"200": {"description": "watch"}, **errors(403, 404, 409)}}},
        "/v1/alerts": {"get": {
            "summary": "Alerts, firing first; each with its watch's detector period (past periods' resolved "
                       "alerts are listed too)", "parameters": [query("status", ["firing", "acknowledged", "resolved"])],
            "responses": {"200": {"description": "alerts"}, **errors(400)}}},
        "/v1/alerts/{alert_id}/ack": {"post": {
            "summary": "Acknowledge a firing alert", "parameters": path("alert_id"),
            "responses": {"200": {"description": "alert"}, **errors(403, 404, 409)}}},
        "/v1/alerts/{alert_id}/resolve": {"post": {
            "summary": "Resolve a firing or acknowledged alert",
            "description": "Resolving re-arms the alert's watch (if active): a new detector period starts now from "
                           "a zero state, with the baseline of the promotion's evidence; its alarm is a new alert "
                           "<watch id>.alert.<period>.",
            "parameters": path("alert_id"),
            "responses": {"200": {"description": "alert"}, **errors(403, 404, 409)}}},
        "/v1/results": {"get": {
            "summary": "Results in two lists never interleaved: traffic (trials, replay trials) and corpus "
                       "(experiments)",
            "parameters": [query("team"), query("status", list(STATUSES)), query("model", None, "either arm"),
                           query("since", None, "UTC date YYYY-MM-DD"), query("until", None, "UTC date YYYY-MM-DD")],
            "responses": {"200": {"description": "results"}, **errors(400)}}},
    }
