"""Team posture over the admin API (issue 11 item 1): ``GET``/``PUT /v1/teams/{team}/posture``,
pinning a new trial's site from the stored posture, pausing running trials a change moves
(``posture_changed``: no case dispatched for them afterwards), and ``resume`` re-evaluating
the site. Real sidecars on loopback (:class:`tests.harness.Harness`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness import CANDIDATE, INCUMBENT, Harness, exchange

#: This sidecar serves gateway gw-1, whose content uplink is on, for team-a.
UPLINK_ON = '[sidecar]\ngateway = "gw-1"\n[uplink]\ncontent = true\n[teams.team-a]\nprompt_retention = true\n'
POSTURE = "/v1/teams/team-a/posture"


def trial_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
                            "spend_cap_usd": 10.0, "sample_rate": 1.0}
    body.update(over)
    return body


async def test_an_unknown_team_reads_its_default_posture(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.admin is not None
        r = await h.admin.get("/v1/teams/team-x/posture")
        assert r.status_code == 200, r.text
        assert r.headers["ETag"] == '"0"'
        view = r.json()
        assert {k: view[k] for k in ("team", "prompt_retention", "cut_over", "revision", "stored", "gateways",
                                     "execution_site")} == {
            "team": "team-x", "prompt_retention": True, "cut_over": False, "revision": 0, "stored": False,
            "gateways": [], "execution_site": "local"}
        # No retention key here: nothing is kept to replay, so replay is not offered (issue 28).
        assert view["features"]["replay"]["available"] is False
        assert "retention window is off" in view["features"]["replay"]["reason"]
        assert view["features"]["dataset_seeding"] == {"available": True, "reason": None}


async def test_config_seeds_the_posture_and_the_gateway_reports_itself(tmp_path: Path) -> None:
    async with Harness(tmp_path, extra=UPLINK_ON.replace("prompt_retention = true", "prompt_retention = false")) as h:
        assert h.admin is not None
        view = (await h.admin.get(POSTURE)).json()
        assert (view["stored"], view["revision"], view["prompt_retention"], view["cut_over"]) == (True, 1, False, False)
        [gw] = view["gateways"]
        assert (gw["gateway"], gw["content_uplink"], gw["live"]) == ("gw-1", True, True)
        assert isinstance(gw["last_seen"], float)
        assert view["execution_site"] == "local"
        assert view["features"]["dataset_seeding"]["available"] is False
        assert "retention is off" in view["features"]["replay"]["reason"]
        # Retention off keeps trials working, pinned off.
        trial = (await h.admin.post("/v1/trials", json=trial_body())).json()
        assert trial["prompt_retention"] is False and trial["execution_site"] == "local"
        await h.send([exchange(i) for i in range(3)])
        assert (await h.settle(trial["id"], 3))["funnel"]["outcomes"]["judged"] == 3


async def test_put_is_idempotent_and_if_match_guards_the_revision(tmp_path: Path) -> None:
    async with Harness(tmp_path, extra=UPLINK_ON) as h:
        assert h.admin is not None
        body = {"prompt_retention": True, "cut_over": False}
        same = await h.admin.put(POSTURE, json=body)
        assert same.status_code == 200 and same.json()["revision"] == 1 and same.json()["paused_trials"] == []
        stale = await h.admin.put(POSTURE, json={**body, "prompt_retention": False}, headers={"If-Match": '"7"'})
        assert stale.status_code == 412, stale.text
        assert stale.json()["error"]["code"] == "revision_mismatch" and stale.json()["error"]["field"] == "If-Match"
        assert (await h.admin.get(POSTURE)).json()["prompt_retention"] is True
        ok = await h.admin.put(POSTURE, json={**body, "prompt_retention": False}, headers={"If-Match": '"1"'})
        assert ok.status_code == 200 and ok.headers["ETag"] == '"2"' and ok.json()["updated_by"] == "local-development"
        again = await h.admin.put(POSTURE, json={**body, "prompt_retention": False}, headers={"If-Match": '"1"'})
        assert again.status_code == 412


async def test_a_posture_change_pauses_the_trial_and_resume_pins_the_new_site(tmp_path: Path) -> None:
    async with Harness(tmp_path, extra=UPLINK_ON) as h:
        assert h.admin is not None
        trial = await h.create_trial()
        assert trial["execution_site"] == "local"
        await h.send([exchange(i) for i in range(4)])
        assert (await h.settle(trial["id"], 4))["funnel"]["outcomes"]["judged"] == 4
        calls = h.fake.calls[CANDIDATE]

        # Cut over: every gateway of the team uplinks content and retention is on, so the site
        # becomes the control plane; the local trial is paused in the same write.
        r = await h.admin.put(POSTURE, json={"prompt_retention": True, "cut_over": True})
        assert r.status_code == 200, r.text
        assert r.json()["execution_site"] == "control_plane" and r.json()["paused_trials"] == [trial["id"]]
        view = await h.trial(trial["id"])
        assert view["status"] == "posture_changed" and "control_plane" in view["status_reason"]
        # Paused: matched no more, nothing dispatched for it.
        assert (await h.send([exchange(100 + i) for i in range(3)]))["sampled"] == 0
        assert h.fake.calls[CANDIDATE] == calls

        # This sidecar has no control-plane sink: a new trial, or resuming, is refused with the reason.
        created = await h.admin.post("/v1/trials", json=trial_body())
        assert created.status_code == 400 and "control_plane" in created.json()["error"]["message"]
        assert created.json()["error"]["field"] == "$.team"
        resumed = await h.admin.post(f"/v1/trials/{trial['id']}/resume")
        assert resumed.status_code == 409 and resumed.json()["error"]["code"] == "site_unavailable", resumed.text
        assert (await h.trial(trial["id"]))["status"] == "posture_changed"

        # Back to local, with retention off: the paused trial stays paused until resumed, then
        # runs pinned to the posture now.
        back = await h.admin.put(POSTURE, json={"prompt_retention": False, "cut_over": True})
        assert back.json()["execution_site"] == "local" and back.json()["paused_trials"] == []
        assert (await h.trial(trial["id"]))["status"] == "posture_changed"
        resumed = await h.admin.post(f"/v1/trials/{trial['id']}/resume")
        assert resumed.status_code == 200, resumed.text
        after = resumed.json()
        assert (after["status"], after["execution_site"], after["prompt_retention"]) == ("running", "local", False)
        await h.send([exchange(200 + i) for i in range(3)])
        view = await h.settle(trial["id"], 7)
        assert view["funnel"]["outcomes"]["judged"] == 7 and h.fake.calls[CANDIDATE] > calls

        # Retention on again: a change of retention alone pauses the trial too.
        r = await h.admin.put(POSTURE, json={"prompt_retention": True, "cut_over": False})
        assert r.json()["paused_trials"] == [trial["id"]]


async def test_bad_input_is_400_naming_the_field(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.admin is not None
        cases: list[tuple[dict[str, Any], str | None]] = [
            ({"content": b"{"}, None),
            ({"json": {"prompt_retention": True}}, "$.cut_over"),
            ({"json": {"prompt_retention": "yes", "cut_over": False}}, "$.prompt_retention"),
            ({"json": {"prompt_retention": 1, "cut_over": False}}, "$.prompt_retention"),
            ({"json": {"prompt_retention": True, "cut_over": False, "content_uplink": True}}, "$.content_uplink"),
            ({"json": [True, False]}, None),  # the root: no path, as for a trial body
            ({"json": {"prompt_retention": True, "cut_over": False}, "headers": {"If-Match": "abc"}}, "If-Match"),
            ({"json": {"prompt_retention": True, "cut_over": False}, "headers": {"If-Match": "-1"}}, "If-Match"),
        ]
        for kw, field in cases:
            r = await h.admin.put(POSTURE, **kw)
            assert r.status_code == 400, (kw, r.text)
            assert r.json()["error"]["field"] == field, (kw, r.json())
        for path in ("/v1/teams/%20team/posture", "/v1/teams/te%01am/posture", f"/v1/teams/{'x' * 300}/posture"):
            r = await h.admin.get(path)
            assert r.status_code == 400 and r.json()["error"]["field"] == "team", (path, r.text)
        r = await h.admin.get(POSTURE, params={"x": "1"})
        assert r.status_code == 400 and r.json()["error"]["field"] == "x"
        r = await h.admin.put(POSTURE, content=b'{"prompt_retention": true, "cut_over": false}',
                              headers={"Content-Encoding": "gzip"})
        assert r.status_code == 415
        assert (await h.admin.delete(POSTURE)).status_code == 405
        assert (await h.admin.get("/v1/teams/team-a/posture")).json()["revision"] == 0  # nothing written


async def test_roles_read_and_set(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.admin is not None

        def bearer(roles: list[str], teams: list[str], subject: str = "s") -> dict[str, str]:
            return {"Authorization": f"Bearer {h.token(subject=subject, roles=roles, teams=teams)}"}

        body = {"prompt_retention": False, "cut_over": False}
        assert (await h.admin.get(POSTURE, headers={"Authorization": ""})).status_code == 401
        for role in ("viewer", "auditor", "finops", "developer", "security_officer", "tenant_admin"):
            assert (await h.admin.get(POSTURE, headers=bearer([role], ["team-a"]))).status_code == 200, role
        for role in ("viewer", "developer", "security_officer"):
            r = await h.admin.put(POSTURE, json=body, headers=bearer([role], ["team-a"]))
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", role
        other = bearer(["tenant_admin"], ["team-b"])
        for r in (await h.admin.get(POSTURE, headers=other), await h.admin.put(POSTURE, json=body, headers=other)):
            assert r.status_code == 404 and r.json()["error"]["message"] == "no team 'team-a'"
        gateway = bearer(["gateway"], ["team-a"])
        assert (await h.admin.get(POSTURE, headers=gateway)).status_code == 404
        assert (await h.admin.get(POSTURE)).json()["revision"] == 0
        r = await h.admin.put(POSTURE, json=body, headers=bearer(["tenant_admin"], ["team-a"], subject="ta"))
        assert r.status_code == 200 and r.json()["updated_by"] == "ta" and r.json()["revision"] == 1
        r = await h.admin.put(POSTURE, json={**body, "cut_over": True})  # platform_admin (the harness's token)
        assert r.status_code == 200 and r.json()["revision"] == 2


async def test_a_posture_write_racing_a_create_still_pauses_the_new_trial(tmp_path: Path) -> None:
    """A PUT that commits after the create read the posture, but before its trial is stored,
    cannot pause a trial it does not see: the create reads the posture again and pauses it."""
    async with Harness(tmp_path, extra=UPLINK_ON) as h:
        assert h.admin is not None
        store = h.runtime.store
        create = store.create_trial

        async def create_after_a_concurrent_write(record: Any, **kw: Any) -> Any:
            written = await store.put_posture("team-a", prompt_retention=False, cut_over=False, expected_revision=None,
                                              site="local", now=record.created_at, by="racer", reason="race")
            assert written.applied and written.paused == ()
            return await create(record, **kw)

        store.create_trial = create_after_a_concurrent_write
        r = await h.admin.post("/v1/trials", json=trial_body())
        store.create_trial = create
        assert r.status_code == 201, r.text
        view = r.json()
        assert view["prompt_retention"] is True and view["status"] == "posture_changed", view["status"]
        assert (await h.send([exchange(1)]))["sampled"] == 0


async def test_an_engine_in_its_own_process_reports_its_gateway(tmp_path: Path) -> None:
    async with Harness(tmp_path, extra=UPLINK_ON, isolation="process") as h:
        assert h.admin is not None
        view = (await h.admin.get(POSTURE)).json()
        assert [(g["gateway"], g["content_uplink"], g["live"]) for g in view["gateways"]] == [("gw-1", True, True)]
        assert view["stored"] and view["execution_site"] == "local"  # not cut over
