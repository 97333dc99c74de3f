"""The Prometheus endpoint lists received, sampled, shed by reason, queue depth, in flight,
spend and judgments by outcome — with the engine on a thread and in its own process, whose
counts reach the sidecar's ``/metrics`` over the control pipe — and every count agrees with
the store's funnel and judgments. No series carries a team, trial or model. The same values
reach OpenTelemetry's readers (here the SDK's in-memory one)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from sidecar.demo.fake_provider import FakeModel
from sidecar.store.records import OUTCOMES
from sidecar.telemetry.names import JUDGMENT_OUTCOMES, METRICS, SHED_REASONS, judgment_outcome
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange
from tests.sidecar.telemetry.test_telemetry import Captured

_LINE = re.compile(r'^([a-z_]+)(?:\{([^}]*)\})? (\S+)$')
#: The only label names any series may have.
LABELS = {"reason", "outcome", "role", "result", "field"}


def parse(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Prometheus text → {(name, labels): value}; every sample line must parse."""
    out: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        assert m, f"unparsable line {line!r}"
        labels = frozenset(tuple(kv.split("=", 1)) for kv in m.group(2).split(",")) if m.group(2) else frozenset()
        out[(m.group(1), frozenset((k, v.strip('"')) for k, v in labels))] = float(m.group(3))
    return out


def value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def faulty_models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(),
        CANDIDATE: FakeModel(quality=0.6, rate_500=0.15, latency_ms=(5.0, 10.0)),
        JUDGE: FakeModel(judge=True, rate_500=0.1, rate_no_label=0.3, rate_no_label_retry=0.5,
                         rate_conflicting_labels=0.15),
    }


async def scrape(h: Harness) -> tuple[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    assert h.admin is not None
    r = await h.admin.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    return r.text, parse(r.text)


async def drive(h: Harness) -> tuple[list[dict[str, Any]], Counter[str]]:
    """Judged cases with judge faults, a full queue, redacted and unsampled exchanges.
    Returns the trials and the judgments the store holds, by metric outcome."""
    a = await h.create_trial(audit_share=0.3)
    b = await h.create_trial(team="team-b", sample_rate=0.0)  # its exchanges are not sampled
    first = await h.send([exchange(i) for i in range(12)])  # one batch into a queue of 4: the rest shed
    assert first["shed"] > 0
    await h.runtime.idle()
    for start in range(100, 124, 4):
        await h.send([exchange(start + i) for i in range(4)])
        await h.runtime.idle()
    await h.send([exchange(200, redacted=True)] + [exchange(300 + i, team="team-b") for i in range(5)])
    await h.runtime.idle()
    judgments: Counter[str] = Counter()
    for trial in (a, b):
        snap = await h.runtime.store.snapshot(trial["id"])
        assert snap is not None
        judgments.update(judgment_outcome(j.outcome, j.score, j.error) for j in snap.judgments)
    return [a, b], judgments


def check(text: str, samples: dict[tuple[str, frozenset[tuple[str, str]]], float],
          views: list[dict[str, Any]], judgments: Counter[str]) -> None:
    # Every family, and every series of it, is listed.
    for m in METRICS:
        for labels, _ in m.series:
            assert (m.prometheus, frozenset(labels)) in samples, (m.prometheus, labels)
    assert all(set(dict(labels)) <= LABELS for _, labels in samples)
    for view in views:
        assert view["id"] not in text and view["team"] not in text
    assert "team" not in text and CANDIDATE not in text and JUDGE not in text

    funnel: Counter[str] = Counter()
    for view in views:
        funnel.update(view["funnel"]["outcomes"])
    assert value(samples, "shadowtrial_exchanges_received_total") == 12 + 24 + 6
    for outcome in OUTCOMES:  # this sidecar decided every outcome the store holds
        assert value(samples, "shadowtrial_funnel_outcomes_total", outcome=outcome) == funnel[outcome], outcome
    for outcome, reason in SHED_REASONS.items():
        assert value(samples, "shadowtrial_cases_shed_total", reason=reason) == funnel[outcome], reason
    assert value(samples, "shadowtrial_cases_sampled_total") + funnel["shed_queue_full"] == 12 + 24
    assert funnel["not_sampled"] == 5 and funnel["skipped_redacted"] == 1
    for outcome in JUDGMENT_OUTCOMES:
        assert value(samples, "shadowtrial_judgments_total", outcome=outcome) == judgments[outcome], outcome
    assert sum(judgments.values()) > funnel["judged"] > 0
    assert judgments["no_label"] + judgments["conflicting_labels"] + judgments["call_failed"] > 0
    calls = sum(v for (name, labels), v in samples.items() if name == "shadowtrial_provider_calls_total"
                and ("role", "candidate") in labels)
    assert calls == funnel["judged"] + funnel["judge_failed"] + funnel["candidate_failed"]
    assert value(samples, "shadowtrial_intake_queue_depth") == 0
    assert value(samples, "shadowtrial_cases_in_flight") == 0
    assert value(samples, "shadowtrial_evaluation_spend_known_micros") > 0
    assert value(samples, "shadowtrial_evaluation_spend_reserved_micros") == 0


async def test_metrics_in_thread_mode_agree_with_the_store_and_reach_opentelemetry(tmp_path: Path) -> None:
    cap = Captured()
    try:
        async with Harness(tmp_path, models=faulty_models(), queue_size=4, workers=2, telemetry=cap.telemetry) as h:
            trials, judgments = await drive(h)
            views = [await h.trial(t["id"]) for t in trials]
            text, samples = await scrape(h)
            check(text, samples, views, judgments)
            data = cap.reader.get_metrics_data()
        # OpenTelemetry sees the same numbers, under its own names.
        assert data is not None
        points: dict[tuple[str, frozenset[tuple[str, Any]]], float] = {}
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for p in metric.data.data_points:
                        points[(metric.name, frozenset((p.attributes or {}).items()))] = p.value  # type: ignore[union-attr]
        for m in METRICS:
            if m.otel.startswith("shadowtrial.evaluation."):
                continue  # read by a chore at each export interval, not at this scrape
            for labels, _ in m.series:
                assert points[(m.otel, frozenset(labels))] == samples[(m.prometheus, frozenset(labels))], m.otel
    finally:
        cap.close()


async def test_metrics_in_process_mode_carry_the_engine_process_counts(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=faulty_models(), queue_size=4, workers=2, isolation="process") as h:
        engine = h.runtime.engine
        assert engine.pid is not None
        trials, judgments = await drive(h)
        views = [await h.trial(t["id"]) for t in trials]
        text, samples = await scrape(h)
    check(text, samples, views, judgments)
    assert engine.counts()["judgment.candidate_better"] + engine.counts()["judgment.tie"] > 0


@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_judgments_are_counted_after_a_stop_too(tmp_path: Path, isolation: str) -> None:
    """The engine's last counts arrive with its stop (in process mode, on the ``stopped`` message)."""
    async with Harness(tmp_path, isolation=isolation) as h:
        trial = await h.create_trial(audit_share=0.0)
        await h.send([exchange(i) for i in range(6)])
        await h.settle(trial["id"], 6)
        rt = h.runtime
    counts = rt.engine.counts()
    assert sum(counts.get(f"judgment.{o}", 0) for o in JUDGMENT_OUTCOMES) == 6
    assert counts["outcome.judged"] == 6 and counts["call.candidate.ok"] == 6
