"""A trial that knows when to stop (issue 26, item 2).

A real sidecar judges real cases through the fake provider, whose call counts are the
witness. The candidate wins every case (the incumbent's planted quality is 0.0), so the
verdict is decided (``candidate_better``) after a few dozen cases. One engine worker, so no
case is in flight beside the one that decides.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for

N = 120


def models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(quality=0.5),
        CANDIDATE: FakeModel(quality=0.5, quality_noise=0.0),
        JUDGE: FakeModel(judge=True),
    }


def won(i: int) -> dict[str, Any]:
    return exchange(i, content=f"incumbent answer {i} ⟨q=0.000⟩")


def spend(view: dict[str, Any]) -> Any:
    s = view["spend"]
    return {k: s[k] for k in s if k != "remaining_usd"} if isinstance(s, dict) else s


async def test_a_stopping_trial_dispatches_nothing_after_its_decision(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), workers=1) as h:
        trial = await h.create_trial(audit_share=0.0, on_decision="stop")
        tid = trial["id"]
        assert trial["on_decision"] == "stop"
        await h.send([won(i) for i in range(N)])
        view = await h.settle(tid, N)
        assert view["status"] == "decided", view["status"]
        # The first decision stops it: Adoptable (not worse by more than the tolerance, or better:
        # the betting sequence of issue 31 may reach "better" at its first decision).
        v, f = view["verdict"], view["funnel"]
        assert v["code"] in ("not_worse", "candidate_better") and v["wording"] == "Adoptable"
        assert view["status_reason"].startswith(f"decided: {v['code']} at ")
        judged = f["outcomes"]["judged"]
        assert 0 < judged < N and v["decided_at"] is not None and judged <= v["decided_at"] + 1
        # Every case after the decision is counted in its own outcome, and the funnel adds up.
        assert f["outcomes"]["after_decision"] == N - judged
        assert f["total"] == sum(f["outcomes"].values()) == N
        # The witness: the fake provider saw one candidate and one judge call per judged case, none after.
        calls = (h.fake.calls[CANDIDATE], h.fake.calls[JUDGE])
        assert calls == (judged, judged)
        frozen = spend(view)

        # Later exchanges: still matched and counted, never dispatched; decision and spend frozen.
        await h.send([won(i) for i in range(N, N + 40)])
        after = await h.settle(tid, N + 40)
        assert (h.fake.calls[CANDIDATE], h.fake.calls[JUDGE]) == calls
        assert spend(after) == frozen
        assert after["funnel"]["outcomes"]["judged"] == judged
        assert after["funnel"]["outcomes"]["after_decision"] == N + 40 - judged
        assert after["funnel"]["total"] == sum(after["funnel"]["outcomes"].values()) == N + 40
        assert after["verdict"]["code"] == v["code"] and after["verdict"]["cases"] == v["cases"]
        print(f"\nstopping trial: decided {v['code']} at {v['decided_at']} judged cases; {judged} judged, "
              f"{after['funnel']['outcomes']['after_decision']} after_decision of {N + 40} sent; candidate/judge calls "
              f"{calls} before, {(h.fake.calls[CANDIDATE] - calls[0], h.fake.calls[JUDGE] - calls[1])} after; "
              f"charged {frozen['charged_micros']} µ$ then {spend(after)['charged_micros']} µ$")

        # A decided trial may be promoted, and an operator's stop ends its counting.
        r = await h.admin.post(f"/v1/trials/{tid}/stop")
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "stopped"


async def test_a_continuing_trial_keeps_narrowing_after_its_decision(tmp_path: Path) -> None:
    async with Harness(tmp_path, models=models(), workers=1) as h:
        trial = await h.create_trial(audit_share=0.0, on_decision="continue")
        tid = trial["id"]
        assert trial["on_decision"] == "continue"
        await h.send([won(i) for i in range(N)])
        view = await h.settle(tid, N)
        assert view["status"] == "running"
        # It went on past its first decision (not_worse) and narrowed to a better one.
        assert view["verdict"]["code"] == "candidate_better"
        assert view["funnel"]["outcomes"]["judged"] == N and view["funnel"]["outcomes"]["after_decision"] == 0
        assert h.fake.calls[CANDIDATE] == N


async def test_on_decision_defaults_to_stop_and_is_validated(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.admin is not None
        r = await h.admin.post("/v1/trials", json={
            "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE, "spend_cap_usd": 1.0,
        })
        assert r.status_code == 201 and r.json()["on_decision"] == "stop", r.text
        r = await h.admin.post("/v1/trials", json={
            "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
            "spend_cap_usd": 1.0, "on_decision": "pause",
        })
        assert r.status_code == 400
        assert r.json()["error"]["field"] == "$.on_decision"


async def test_a_decided_trial_is_listed_by_its_status(tmp_path: Path) -> None:
    """``GET /v1/trials?status=decided`` finds a trial that stopped on its decision."""
    async with Harness(tmp_path, models=models(), workers=1) as h:
        tid = (await h.create_trial(audit_share=0.0, on_decision="stop"))["id"]
        await h.send([won(i) for i in range(N)])
        assert h.admin is not None

        async def listed_decided() -> bool:
            assert h.admin is not None
            r = await h.admin.get("/v1/trials", params={"status": "decided"})
            return r.status_code == 200 and any(t["id"] == tid for t in r.json()["trials"])

        await wait_for(listed_decided, what="the trial listed as decided")
