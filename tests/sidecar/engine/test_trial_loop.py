"""The trial loop end to end: tap → sample → candidate → judge → verdict."""

from __future__ import annotations

from pathlib import Path

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange


async def test_loop_judges_sampled_exchanges_and_never_calls_the_incumbent(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        reply = await h.send([exchange(i) for i in range(40)])
        assert reply == {"accepted": 40, "sampled": 40, "shed": 0}
        view = await h.settle(trial["id"], 40)
        outcomes = view["funnel"]["outcomes"]
        assert outcomes["judged"] == 40
        assert view["funnel"]["total"] == 40
        assert view["verdict"]["cases"] == 40
        assert view["spend"]["known_micros"] > 0
        assert view["spend"]["coverage"] == "complete"
        assert view["spend"]["reserved_micros"] == 0
        assert h.fake.calls[CANDIDATE] == 40
        assert h.fake.calls[JUDGE] >= 40
        # Every candidate call carries the shadow tag and the served request's messages.
        cand = [q for q in h.fake.requests if q.model == CANDIDATE]
        assert all(q.headers.get("X-Shadowtrial-Shadow") == "1" for q in cand)
        assert {q.body["messages"][0]["content"] for q in cand} == {f"question {i}" for i in range(40)}
    assert h.fake.calls[INCUMBENT] == 0


async def test_funnel_counts_add_up_to_matched_exchanges(tmp_path: Path) -> None:
    models = {
        INCUMBENT: FakeModel(),
        CANDIDATE: FakeModel(quality=0.6, rate_500=0.15),
        JUDGE: FakeModel(judge=True, rate_no_label=0.2, rate_no_label_retry=0.5, rate_conflicting_labels=0.1),
    }
    async with Harness(tmp_path, models=models) as h:
        t1 = await h.create_trial(sample_rate=0.5)
        t2 = await h.create_trial(sample_rate=1.0, team="team-b")
        batch = [exchange(i) for i in range(120)]
        batch += [exchange(1000 + i, redacted=True) for i in range(10)]
        batch += [exchange(2000 + i, team="team-b") for i in range(30)]
        batch += [exchange(3000 + i, model="some-other-model") for i in range(15)]  # matches nothing
        await h.send(batch)
        v1 = await h.settle(t1["id"], 130)
        v2 = await h.settle(t2["id"], 30)
        o1 = v1["funnel"]["outcomes"]
        assert sum(o1.values()) == 130 == v1["funnel"]["total"]
        assert o1["skipped_redacted"] == 10
        assert o1["not_sampled"] > 0 and o1["judged"] > 0
        assert o1["candidate_failed"] > 0 and o1["judge_failed"] >= 0
        assert sum(v2["funnel"]["outcomes"].values()) == 30
        # A failed generation is not a loss and a judge error is not a tie: neither is scored.
        assert v1["verdict"]["cases"] == o1["judged"]


async def test_metrics_endpoint_counts_without_content(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=1.0)
        await h.send([exchange(i, content="secret answer ⟨q=0.500⟩") for i in range(3)])
        await h.settle(trial["id"], 3)
        assert h.admin is not None
        r = await h.admin.get("/metrics")
    assert r.status_code == 200
    assert "shadowtrial_exchanges_received_total 3" in r.text
    assert "shadowtrial_cases_sampled_total 3" in r.text
    assert "secret" not in r.text and "question" not in r.text


async def test_prompt_retention_off_keeps_no_body(tmp_path: Path) -> None:
    extra = '[teams.team-a]\nprompt_retention = false\n[teams.team-b]\nprompt_retention = true\n'
    async with Harness(tmp_path, extra=extra) as h:
        off = await h.create_trial(sample_rate=1.0)
        on = await h.create_trial(sample_rate=1.0, team="team-b")
        await h.send([exchange(i, content=f"PRIVATE-ANSWER-{i} ⟨q=0.500⟩") for i in range(5)])
        await h.send([exchange(100 + i, team="team-b", content=f"KEPT-ANSWER-{i} ⟨q=0.500⟩") for i in range(5)])
        # The intake journal holds both teams' sampled cases until they are done: one team's
        # as exchange ids only.
        journal = b"".join(p.read_bytes() for p in tmp_path.glob("trials.db.intake/segment-*.bin"))
        assert b"KEPT-ANSWER" in journal and b"PRIVATE-ANSWER" not in journal and b"question 0" not in journal
        v_off = await h.settle(off["id"], 5)
        v_on = await h.settle(on["id"], 5)
    assert v_off["prompt_retention"] is False and v_on["prompt_retention"] is True
    assert v_off["funnel"]["outcomes"]["judged"] == 5
    raw = b"".join(p.read_bytes() for p in tmp_path.rglob("trials.db*") if p.is_file())
    assert b"PRIVATE-ANSWER" not in raw and b"question 0" not in raw
    assert b"KEPT-ANSWER" in raw
