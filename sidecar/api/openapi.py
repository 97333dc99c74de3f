"""The OpenAPI document served at ``/openapi.json``.

Request schemas come from the msgspec Structs themselves
(``msgspec.json.schema_components``), so the document cannot drift from what
the decoders accept.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

from sidecar.trials.create import (
    IDEMPOTENCY_KEY, KEY_PATTERN, MAX_KEY_CHARS, MAX_NAME_CHARS, NAME_PATTERN, NAME_RULE, STATUSES, TrialCreate,
)
from sidecar.ingest.wire import Exchange, TapReply
from sidecar.services.compare import CompareRequest
from sidecar.services.posture import PostureIn

_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": ["string", "null"]},
                "reason": {"type": "string", "description": "409 promotion_refused only: why (docs/alerts.md)"},
            },
            "required": ["code", "message"],
        }
    },
}


#: Operations any caller may use: content-free, for probes and scrapers.
PUBLIC_PATHS = frozenset(("/healthz", "/readyz", "/metrics", "/openapi.json"))

SECURITY_SCHEMES: dict[str, Any] = {
    "adminBearer": {
        "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
        "description": "A JWT signed by a key configured under [auth] (algorithms pinned per key), with exp, iat, "
                       "aud, iss and sub; roles, teams and content claims decide what it may do. A missing or "
                       "refused token is 401 unauthorized with WWW-Authenticate: Bearer.",
    },
    "tapToken": {
        "type": "http", "scheme": "bearer",
        "description": "The tap listener's shared token (tap.token_env), when one is configured.",
    },
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json_body(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    return {str(c): {"description": "error", **_json_body(_ref("Error"))} for c in codes}


@lru_cache(maxsize=1)
def openapi_document() -> dict[str, Any]:
    from sidecar.api.openapi_gates import gate_paths
    from sidecar.api.openapi_watches import watch_paths
    from sidecar.services.promotion import PromoteBody

    (create, exchange, reply, posture, compare, promote), components = msgspec.json.schema_components(
        [TrialCreate, Exchange, TapReply, PostureIn, CompareRequest, PromoteBody],
        ref_template="#/components/schemas/{name}"
    )
    components["Error"] = _ERROR
    trial_id = [{"name": "trial_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    idem = [{
        "name": IDEMPOTENCY_KEY, "in": "header", "required": False,
        "description": "the same key with the same body returns the original trial (200); with another body, "
                       "409 request_key_conflict",
        "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_CHARS, "pattern": KEY_PATTERN},
    }]
    team_schema = {"type": "string", "minLength": 1, "maxLength": MAX_NAME_CHARS, "pattern": NAME_PATTERN,
                   "description": NAME_RULE}
    team_param = [{"name": "team", "in": "path", "required": True, "schema": team_schema}]
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "shadowtrial", "version": "0.1.0"},
        "paths": {
            "/v1/exchanges": {
                "post": {
                    "summary": "Hand over served exchanges (tap listener): one object, a JSON array, or NDJSON",
                    "requestBody": {"content": {
                        "application/json": {"schema": {"oneOf": [exchange, {"type": "array", "items": exchange}]}},
                        "application/x-ndjson": {"schema": {"type": "string"}},
                    }},
                    "responses": {"202": {"description": "accepted", **_json_body(reply)}, **_errors(400, 401, 403, 408, 413, 415)},
                }
            },
            "/v1/integrations/litellm": {
                "post": {
                    "summary": "Hand over LiteLLM StandardLoggingPayloads (tap listener; LiteLLM's generic API "
                               "logger): a JSON array, one object, or NDJSON",
                    "description": "The team is the team parameter (or a single-team gateway JWT's), never the "
                                   "payload's. Entries that are not successful chat completions, or incomplete, "
                                   "are skipped and counted by reason.",
                    "parameters": [
                        {"name": "team", "in": "query", "required": False, "schema": team_schema},
                        {"name": "gateway", "in": "query", "required": False, "schema": team_schema},
                    ],
                    "requestBody": {"content": {
                        "application/json": {"schema": {"oneOf": [
                            {"type": "object"}, {"type": "array", "items": {"type": "object"}},
                        ]}},
                        "application/x-ndjson": {"schema": {"type": "string"}},
                    }},
                    "responses": {
                        "202": {"description": "accepted: accepted, sampled, shed, refused, and skipped by reason"},
                        **_errors(400, 401, 403, 408, 413, 415),
                    },
                }
            },
            "/v1/traces": {
                "post": {
                    "summary": "Hand over OTLP/HTTP trace exports (tap listener): GenAI chat spans become "
                               "exchanges (docs/integrations.md)",
                    "description": "An ExportTraceServiceRequest, protobuf or JSON, gzip or not. The answer is an "
                                   "ExportTraceServiceResponse in the request's encoding, with partial_success "
                                   "naming rejected spans. The team is a configured resource attribute or a "
                                   "single-team gateway JWT's, never a span attribute unless configured.",
                    "requestBody": {"content": {
                        "application/x-protobuf": {"schema": {"type": "string", "format": "binary"}},
                        "application/json": {"schema": {"type": "object"}},
                    }},
                    "responses": {
                        "200": {"description": "ExportTraceServiceResponse (partial_success when spans were rejected)"},
                        **_errors(400, 401, 403, 408, 413, 415),
                    },
                }
            },
            "/v1/trials": {
                "post": {
                    "summary": "Create a trial",
                    "parameters": idem,
                    "requestBody": _json_body(create),
                    "responses": {
                        "201": {"description": "created"},
                        "200": {"description": "the trial first created with this Idempotency-Key"},
                        **_errors(400, 409, 413, 415, 422),
                    },
                },
                "get": {
                    "summary": "List trials",
                    "description": "Any other query parameter, or one given twice, is 400 naming it. Each item "
                                   "has segments_rejected (the rejected segment keys, [] when none) and "
                                   "segments_summary (e.g. 'Adoptable overall; Rejected on tag:tier=reasoning'; "
                                   "null for a trial read by no segment), as /v1/live and /v1/results items do.",
                    "parameters": [
                        {"name": "status", "in": "query", "schema": {"type": "string", "enum": list(STATUSES)}},
                        {"name": "team", "in": "query", "schema": team_schema},
                    ],
                    "responses": {"200": {"description": "trials"}, **_errors(400)},
                },
            },
            "/v1/trials/{trial_id}": {
                "get": {"summary": "Show a trial",
                        "description": "With segments (issue 27), a segments block: by, cap, min_cases, "
                                       "per_segment_alpha, control (family-wise), rejected (keys), values "
                                       "[{segment, value, key, judged, win_rate, lower, upper, code, verdict, "
                                       "cost_ratio, latency_ratio}], pooled_other (judged cases pooled as other) "
                                       "and summary (\"Adoptable overall; Rejected on tag:tier=reasoning\"); "
                                       "null for a trial read by no segment.",
                        "parameters": trial_id,
                        "responses": {"200": {"description": "trial"}, **_errors(404)}}
            },
            "/v1/trials/{trial_id}/stop": {
                "post": {"summary": "Stop a trial", "parameters": trial_id,
                         "responses": {"200": {"description": "trial"}, **_errors(403, 404, 409)}}
            },
            "/v1/trials/{trial_id}/resume": {
                "post": {"summary": "Resume a paused trial (starter_unauthorized, posture_changed); "
                                    "the caller becomes its starter",
                         "parameters": trial_id,
                         "responses": {"200": {"description": "trial"}, **_errors(403, 404, 409)}}
            },
            "/v1/teams/{team}/posture": {
                "get": {
                    "summary": "A team's posture: prompt retention, cut-over, each gateway's content-uplink report "
                               "(with last_seen and whether it still counts), and the execution site a new trial "
                               "gets; the ETag is its revision",
                    "description": "Any role on the team; a team the caller does not see is 404.",
                    "parameters": team_param,
                    "responses": {"200": {"description": "posture"}, **_errors(400, 404)},
                },
                "put": {
                    "summary": "Set a team's prompt retention and cut-over; running trials the change moves are "
                               "paused posture_changed (listed in paused_trials)",
                    "description": "tenant_admin on the team or platform_admin. The same values again change "
                                   "nothing (idempotent). If-Match: \"<revision>\" applies only over that revision "
                                   "(\"0\": only if none is stored), else 412 revision_mismatch.",
                    "parameters": [*team_param, {
                        "name": "If-Match", "in": "header", "required": False,
                        "schema": {"type": "string", "pattern": '^(W/)?"?[0-9]{1,18}"?$'},
                    }],
                    "requestBody": _json_body(posture),
                    "responses": {"200": {"description": "posture after"}, **_errors(400, 403, 404, 412, 413, 415)},
                },
            },
            "/v1/compare": {
                "post": {
                    "summary": "One prompt, 2 to 6 models, side by side, scored by the absolute judge; no content is kept",
                    "description": "Server-sent events as results arrive: answer (per model, arrival order), "
                                   "score (absolute rubric family, 1-10, never a delta), done (spend and the "
                                   "POST /v1/trials body for any two of the models). Needs the write role and "
                                   "the content permission. Only its spend is kept (counted in /v1/live's evaluation "
                                   "spend); no route lists or shows a past compare.",
                    "requestBody": _json_body(compare),
                    "responses": {"200": {"description": "event stream",
                                          "content": {"text/event-stream": {"schema": {"type": "string"}}}},
                                  **_errors(400, 401, 403, 404, 409, 422)},
                }
            },
            "/v1/live": {"get": {"summary": "Running trials, watches, alerts, evaluation spend",
                                 "responses": {"200": {"description": "live view"}}}},
            "/metrics": {"get": {"summary": "Prometheus metrics (content-free)",
                                 "responses": {"200": {"description": "text exposition"}}}},
            "/healthz": {"get": {"summary": "Liveness", "responses": {"200": {"description": "ok"}}}},
            "/readyz": {"get": {"summary": "Readiness", "responses": {"200": {"description": "ready"}, **_errors(503)}}},
            "/openapi.json": {"get": {"summary": "This OpenAPI document",
                                      "responses": {"200": {"description": "OpenAPI 3.1 document"}}}},
        },
        "components": {"schemas": components, "securitySchemes": SECURITY_SCHEMES},
        # (promotion, watches, alerts and results are merged in below)
        # Every admin operation needs a bearer JWT unless it says otherwise (docs/security.md);
        # with auth.mode = "off" (loopback only) none is asked for.
        "security": [{"adminBearer": []}],
    }
    document["paths"].update(watch_paths(promote, _errors))
    document["paths"].update(gate_paths(_errors))
    for path, item in document["paths"].items():
        for operation in item.values():
            if path in PUBLIC_PATHS:
                operation["security"] = []
            elif path in ("/v1/exchanges", "/v1/integrations/litellm", "/v1/traces"):
                operation["security"] = [{"tapToken": []}, {}]
            else:
                operation["responses"].update(_errors(401))
    return document
