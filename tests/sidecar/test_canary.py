"""A retention-off team's content never leaves the request that carried it: not into a log
line (at DEBUG, error paths included), an error body, a metric, the store or the intake
journal (DESIGN.md rule 9; issue 8, item 9). Every place is searched for a canary string
planted in the messages, the served answer and the request parameters."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange

CANARY = "CANARY-7f3a9c"


def canary_exchange(i: int, **params: Any) -> dict[str, Any]:
    ex = exchange(i, content=f"answer {CANARY}-{i} ⟨q=0.500⟩")
    ex["request"]["messages"] = [
        {"role": "system", "content": f"system {CANARY}"},
        {"role": "user", "content": f"question {i} {CANARY}"},
    ]
    ex["request"]["params"].update(params)
    return ex


async def test_a_retention_off_teams_content_reaches_no_log_error_metric_or_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    models = {
        INCUMBENT: FakeModel(),
        # Provider faults and judge failures: the error paths must be as quiet as the happy one.
        CANDIDATE: FakeModel(quality=0.6, rate_500=0.15, rate_malformed=0.1),
        JUDGE: FakeModel(judge=True, rate_no_label=0.2, rate_conflicting_labels=0.1),
    }
    extra = "[teams.team-a]\nprompt_retention = false\n"
    seen: list[str] = []
    async with Harness(tmp_path, models=models, extra=extra) as h:
        assert h.admin is not None and h.tap is not None
        trial = await h.create_trial(sample_rate=1.0)
        good = [canary_exchange(i, user=CANARY, stop=[CANARY]) for i in range(30)]
        # Parameters the engine cannot use: refused at the tap or failed in the engine, quietly.
        bad = [canary_exchange(100, max_tokens=CANARY), canary_exchange(101, temperature=CANARY),
               canary_exchange(102, tools=CANARY)]
        for batch in (good, bad):
            r = await h.tap.post("/v1/exchanges", json=batch)
            seen.append(r.text)
        # Malformed bodies that carry the canary.
        for body in (f'[{{"exchange_id": "{CANARY}", "team": 5}}]', f'{{"exchange_id": "x", "team": "{CANARY}"',
                     json.dumps([canary_exchange(200)]).replace('"team-a"', f'"{CANARY}" ')):
            r = await h.tap.post("/v1/exchanges", content=body, headers={"content-type": "application/json"})
            seen.append(r.text)
        await h.runtime.idle()
        for path in (f"/v1/trials/{trial['id']}", "/v1/trials", "/v1/live", "/metrics", "/readyz"):
            seen.append((await h.admin.get(path)).text)
        view = await h.trial(trial["id"])
        files = [p for p in tmp_path.rglob("*") if p.is_file() and "trials.db" in str(p)]
        stored = b"".join(p.read_bytes() for p in files)
    outcomes = {k: v for k, v in view["funnel"]["outcomes"].items() if v}
    print(f"\ncanary run: {outcomes}, {len(caplog.records)} log records, {len(seen)} answers, {len(files)} files")
    assert view["funnel"]["outcomes"]["judged"] > 0, "the happy path must have run"
    assert len(outcomes) > 1, "the error paths must have run too"
    assert CANARY not in caplog.text
    assert not [r for r in caplog.records if CANARY in r.getMessage() or (r.exc_text and CANARY in r.exc_text)]
    assert not [s for s in seen if CANARY in s]
    assert CANARY.encode() not in stored
    assert h.fake.requests, "the candidate did receive the content: that is its job"
