"""A running trial's starter is re-checked before each dispatch (issue 9, item 4): once the
starter's subject is revoked (auth.revoked_subjects_file), the trial pauses
``starter_unauthorized`` before its next dispatch — no candidate call after the revocation —
every sampled case still gets its outcome, and the revoked subject's tokens are refused."""

from __future__ import annotations

from pathlib import Path

from tests.harness import CANDIDATE, INCUMBENT, AuthKit, Harness, exchange


async def test_a_revoked_starter_pauses_the_trial_before_its_next_dispatch(tmp_path: Path) -> None:
    revoked = tmp_path / "revoked-subjects.txt"

    def auth(kit: AuthKit) -> str:
        return kit.toml().replace("leeway_seconds", f'revoked_subjects_file = "{revoked}"\nleeway_seconds', 1)

    async with Harness(tmp_path, auth=auth) as h:
        assert h.admin is not None
        dev = {"Authorization": f"Bearer {h.token(subject='dev-1', roles=['developer'], teams=['team-a'])}"}
        r = await h.admin.post("/v1/trials", headers=dev, json={
            "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
            "spend_cap_usd": 10.0, "sample_rate": 1.0})
        assert r.status_code == 201, r.text
        trial = r.json()
        assert trial["started_by"] == "dev-1"
        await h.send([exchange(i) for i in range(5)])
        assert (await h.settle(trial["id"], 5))["funnel"]["outcomes"]["judged"] == 5
        dispatched = h.fake.calls[CANDIDATE]

        revoked.write_text("# revoked by the identity team\ndev-1\n")
        await h.send([exchange(100 + i) for i in range(5)])
        view = await h.settle(trial["id"], 10)
        assert view["status"] == "starter_unauthorized", view["status"]
        assert "dev-1" in view["status_reason"]
        assert h.fake.calls[CANDIDATE] == dispatched, "a candidate call after the revocation"
        outcomes = view["funnel"]["outcomes"]
        assert outcomes["judged"] == 5 and outcomes["shed_stopped"] == 5 and view["funnel"]["total"] == 10
        # The paused trial is matched no more, and the revoked subject is refused at the door.
        assert (await h.send([exchange(200)]))["sampled"] == 0
        assert (await h.admin.get(f"/v1/trials/{trial['id']}", headers=dev)).status_code == 401

        # Another writer of the team takes the trial on: it runs again, with them as its starter.
        dev2 = {"Authorization": f"Bearer {h.token(subject='dev-2', roles=['developer'], teams=['team-a'])}"}
        viewer = {"Authorization": f"Bearer {h.token(subject='v-1', roles=['viewer'], teams=['team-a'])}"}
        assert (await h.admin.post(f"/v1/trials/{trial['id']}/resume", headers=viewer)).status_code == 403
        r = await h.admin.post(f"/v1/trials/{trial['id']}/resume", headers=dev2)
        assert r.status_code == 200 and (r.json()["status"], r.json()["started_by"]) == ("running", "dev-2"), r.text
        again = await h.admin.post(f"/v1/trials/{trial['id']}/resume", headers=dev2)
        assert again.status_code == 409 and again.json()["error"]["code"] == "trial_not_paused"
        await h.send([exchange(300 + i) for i in range(3)])
        view = await h.settle(trial["id"], 13)
        assert view["status"] == "running" and view["funnel"]["outcomes"]["judged"] == 8
