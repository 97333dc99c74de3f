"""No content in telemetry: cases whose prompts, served answers, parameters, tools, candidate
answers and even trace context carry a canary string run through every path (judged, judge
errors, candidate faults, unusable parameters), for a team that keeps prompts and one that
does not; every span, event, link, status, resource and metric point exported is searched for
the canary, and it appears nowhere (DESIGN.md section 12, rule 8). The engine on a thread is
read through the SDK's in-memory exporter and reader; the engine in its own process through
the raw OTLP/HTTP bodies a loopback receiver got."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange
from tests.sidecar.telemetry.test_telemetry import Captured, named, traceparent
from tests.sidecar.telemetry.test_telemetry_export import Receiver, telemetry_table

CANARY = "CANARY-5be21d"

TEAMS = '[teams.team-a]\nprompt_retention = false\n[teams.team-b]\nprompt_retention = true\n'


def models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(),
        # The candidate answers with a tool call whose arguments carry the canary, and fails sometimes.
        CANDIDATE: FakeModel(quality=0.6, rate_500=0.1, rate_malformed=0.1, tool_arguments={"q": CANARY}),
        JUDGE: FakeModel(judge=True, rate_no_label=0.2, rate_conflicting_labels=0.1, rate_503=0.05),
    }


def canary_exchange(i: int, team: str, **over: Any) -> dict[str, Any]:
    ex = exchange(i, team=team, content=f"served answer {CANARY} ⟨q=0.500⟩", gateway=f"gw-{CANARY}",
                  route=f"route-{CANARY}", traceparent=traceparent() if i % 3 else f"00-{CANARY}")
    ex["exchange_id"] = f"{team}-{i}"
    ex["request"]["messages"] = [
        {"role": "system", "content": f"system {CANARY}"},
        {"role": "user", "content": f"question {i} {CANARY}"},
    ]
    ex["request"]["params"].update(
        user=CANARY, stop=[CANARY], metadata={"k": CANARY}, tool_choice="required",
        tools=[{"type": "function", "function": {"name": "lookup", "description": CANARY,
                                                 "parameters": {"type": "object"}}}],
    )
    ex.update(over)
    return ex


def odd_params(team: str, base: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ``max_tokens`` the tap refuses (400, before any span), and a ``temperature`` it passes
    on: the candidate's provider refuses that one (a failed case, traced)."""
    refused, passed = canary_exchange(base + 50, team), canary_exchange(base + 51, team)
    refused["request"]["params"]["max_tokens"] = CANARY
    passed["request"]["params"]["temperature"] = CANARY
    return refused, passed


async def run(h: Harness) -> list[dict[str, Any]]:
    trials = [await h.create_trial(team=t, audit_share=0.5) for t in ("team-a", "team-b")]
    assert h.tap is not None
    for team, base in (("team-a", 0), ("team-b", 1000)):
        refused, passed = odd_params(team, base)
        await h.send([canary_exchange(base + i, team) for i in range(20)] + [passed])
        assert (await h.tap.post("/v1/exchanges", json=[refused])).status_code == 400
    await h.runtime.idle()
    views = [await h.trial(t["id"]) for t in trials]
    for view in views:
        outcomes = {k for k, v in view["funnel"]["outcomes"].items() if v}
        assert "judged" in outcomes and len(outcomes) > 1, outcomes  # the happy and the error paths ran
    assert h.admin is not None
    text = (await h.admin.get("/metrics")).text
    assert CANARY not in text
    return views


async def test_no_span_event_attribute_resource_or_metric_carries_content_engine_on_a_thread(tmp_path: Path) -> None:
    cap = Captured()
    try:
        async with Harness(tmp_path, models=models(), extra=TEAMS, telemetry=cap.telemetry) as h:
            views = await run(h)
            metrics = cap.reader.get_metrics_data()
            assert any(CANARY in json.dumps(r.body) for r in h.fake.requests), "the providers did get the content"
        spans = cap.finished()
        dump = "\n".join(s.to_json() for s in spans)  # names, attributes, events, links, status, resource
        assert metrics is not None
        dump += metrics.to_json()
        assert CANARY not in dump
        # Not vacuous: each team's cases were traced, on every path.
        cases = named(spans, "shadowtrial.case")
        for view in views:
            mine = [c for c in cases if (c.attributes or {})["shadowtrial.trial.id"] == view["id"]]
            assert len(mine) == view["funnel"]["total"]
            assert {(c.attributes or {})["shadowtrial.case.outcome"] for c in mine} == {
                k for k, v in view["funnel"]["outcomes"].items() if v}
        assert named(spans, "shadowtrial.judge") and named(spans, f"chat {CANDIDATE}") and named(spans, f"chat {JUDGE}")
        assert any(s.status.status_code.name == "ERROR" for s in spans)
        assert any(e.name == "gen_ai.evaluation.result" for s in spans for e in s.events)
    finally:
        cap.close()


async def test_no_otlp_body_of_either_process_carries_content(tmp_path: Path) -> None:
    async with Receiver() as rx:
        async with Harness(tmp_path, models=models(), extra=TEAMS + telemetry_table(rx.url), isolation="process") as h:
            views = await run(h)
    traces = b"".join(b for p, b, _ in rx.bodies if p == "/v1/traces")
    metrics = b"".join(b for p, b, _ in rx.bodies if p == "/v1/metrics")
    cases = [s for req in rx.traces() for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans
             if s.name == "shadowtrial.case"]
    assert len(cases) == sum(v["funnel"]["total"] for v in views)
    assert b"shadowtrial.judgments" in metrics
    for body in (traces, metrics):
        assert CANARY.encode() not in body
        assert CANARY.encode("utf-16-le") not in body  # not in any other encoding either
