"""Team isolation in the trial service, against a real sidecar and its real store.

Two teams whose trials carry canary strings (in the team name, route, gateway and
starter). Every service method, called as each role of team A, never returns team B's
data (the results' JSON is scanned for B's canaries and B's trial id), and B's trial
answers exactly as a missing one does; readers' writes are forbidden; ``platform_admin``
sees both. A second test drives the same over HTTP with real tokens: each role of team A
signs in with a JWT the sidecar verifies, and every endpoint is called.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable

import httpx
import pytest

from policies.roles import READERS, ROLES, WRITERS, Principal
from sidecar.errors import ApiError, Forbidden, NotFound
from sidecar.ingest.wire import encode
from sidecar.services.trials import TrialService
from sidecar.trials.create import TrialCreate
from tests.harness import CANDIDATE, INCUMBENT, Harness, exchange

TEAM_A, A_CANARY = "team-alpha-cnryaa11", "cnryaa11"
TEAM_B, B_CANARY = "team-bravo-cnryb9b1", "cnryb9b1"
MISSING = "tr_0000000000000000"
ROLE_ORDER = sorted(ROLES)


def body(team: str, canary: str, **over: Any) -> TrialCreate:
    values: dict[str, Any] = dict(
        team=team, incumbent_model=INCUMBENT, candidate_model=CANDIDATE, spend_cap_usd=10.0, sample_rate=1.0,
        route=f"/chat-{canary}", gateway=f"gw-{canary}",
    )
    values.update(over)
    return TrialCreate(**values)


def member(role: str, team: str = TEAM_A) -> Principal:
    return Principal.of(f"{role}@{team}", [role], [team])


class World:
    """Two teams' trials, with settled cases (so spend differs between them)."""

    def __init__(self, h: Harness, svc: TrialService, a_id: str, b_id: str) -> None:
        self.h, self.svc, self.a_id, self.b_id = h, svc, a_id, b_id

    def b_secrets(self) -> tuple[str, ...]:
        return (B_CANARY, self.b_id)


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with Harness(tmp_path, auth=True) as h:
        svc = TrialService(h.runtime.contexts.trials)
        alice = Principal.of(f"alice-{A_CANARY}", ["developer"], [TEAM_A])
        bob = Principal.of(f"bob-{B_CANARY}", ["developer"], [TEAM_B])
        a_body, b_body = body(TEAM_A, A_CANARY), body(TEAM_B, B_CANARY)
        a_view, created_a = await svc.create(alice, a_body, encode(a_body), None)
        b_view, created_b = await svc.create(bob, b_body, encode(b_body), None)
        assert created_a and created_b
        assert (a_view["started_by"], b_view["started_by"]) == (alice.subject, bob.subject)
        await h.send([exchange(1, team=TEAM_A, gateway=f"gw-{A_CANARY}", route=f"/chat-{A_CANARY}")])
        await h.send(
            [exchange(i, team=TEAM_B, gateway=f"gw-{B_CANARY}", route=f"/chat-{B_CANARY}") for i in range(2, 5)]
        )
        await h.settle(a_view["id"], 1)
        await h.settle(b_view["id"], 3)
        yield World(h, svc, a_view["id"], b_view["id"])


async def refusal(call: Awaitable[Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await call
    return caught.value


def same_as_missing(got: ApiError, missing: ApiError, trial_id: str) -> bool:
    """Whether ``got`` (for ``trial_id``) is indistinguishable from ``missing`` (for :data:`MISSING`)."""
    def shape(e: ApiError, tid: str) -> tuple[object, ...]:
        return type(e), e.status, e.code, e.field, e.message.replace(tid, "<id>")

    return shape(got, trial_id) == shape(missing, MISSING)


async def test_every_role_of_team_a_sees_nothing_of_team_b(world: World) -> None:
    svc = world.svc
    fleet = await svc.fleet_spend()
    b_view = await svc.get(member("platform_admin"), world.b_id)
    a_view = await svc.get(member("platform_admin"), world.a_id)
    assert b_view["spend"]["charged_micros"] > a_view["spend"]["charged_micros"] > 0
    assert fleet["spent"] == a_view["spend"]["charged_micros"] + b_view["spend"]["charged_micros"]

    for role in ROLE_ORDER:
        p = member(role)
        sees_a = role in READERS or role == "platform_admin"
        writes_a = role in WRITERS or role == "platform_admin"
        seen: list[Any] = []

        # Reads.
        seen.append(await svc.list(p))
        seen.append(await svc.list(p, status="running"))
        seen.append(await svc.live(p))
        seen.append(await svc.spend(p))
        if sees_a:
            seen.append(await svc.get(p, world.a_id))
            mine = await svc.list(p, team=TEAM_A)  # writers before this role have added trials of A
            assert world.a_id in {t["id"] for t in mine} and {t["team"] for t in mine} == {TEAM_A}, role
        else:  # gateway: the admin API holds nothing for it
            missing = await refusal(svc.get(p, MISSING))
            assert same_as_missing(await refusal(svc.get(p, world.a_id)), missing, world.a_id), role
            assert seen[0] == [] and seen[2]["running_trials"] == [], role

        if role == "platform_admin":
            assert {world.a_id, world.b_id} <= {t["id"] for t in seen[0]}
            assert B_CANARY in json.dumps(seen) and seen[3]["charged_micros"] == fleet["spent"]
            assert (await svc.get(p, world.b_id))["team"] == TEAM_B
            continue

        # Team B's trial is exactly a missing one, for reads and writes alike.
        missing_get, missing_stop = await refusal(svc.get(p, MISSING)), await refusal(svc.stop(p, MISSING))
        assert isinstance(missing_get, NotFound) and isinstance(missing_stop, NotFound)
        assert same_as_missing(await refusal(svc.get(p, world.b_id)), missing_get, world.b_id), role
        assert same_as_missing(await refusal(svc.stop(p, world.b_id)), missing_stop, world.b_id), role
        seen.append(await svc.list(p, team=TEAM_B))
        assert seen[-1] == [], role
        # Spend and the live view are A's alone.
        expected = a_view["spend"]["charged_micros"] if sees_a else 0
        assert seen[3]["charged_micros"] == seen[2]["evaluation_spend"]["charged_micros"] == expected, role
        # Creating for B is refused naming the team, whatever A-role the caller holds.
        b_body = body(TEAM_B, B_CANARY)
        denied = await refusal(svc.create(p, b_body, encode(b_body), None))
        assert (type(denied), denied.status, denied.code, denied.field) == (Forbidden, 403, "forbidden", "$.team"), role

        # Writes on A.
        a_body = body(TEAM_A, A_CANARY, route=f"/chat-{role}")
        if writes_a:
            view, created = await svc.create(p, a_body, encode(a_body), None)
            assert created and view["started_by"] == p.subject and view["team"] == TEAM_A, role
            stopped = await svc.stop(p, view["id"])
            assert stopped["status"] == "stopped" and stopped["started_by"] == p.subject, role
            seen += [view, stopped]
        else:
            denied = await refusal(svc.create(p, a_body, encode(a_body), None))
            assert (type(denied), denied.code, denied.field) == (Forbidden, "forbidden", "$.team"), role
            refused_stop = await refusal(svc.stop(p, world.a_id))
            if sees_a:  # a reader: sees the trial, may not stop it
                assert (type(refused_stop), refused_stop.status, refused_stop.code) == (Forbidden, 403, "forbidden")
                assert (await svc.get(p, world.a_id))["status"] == "running", role
            else:
                assert same_as_missing(refused_stop, missing_stop, world.a_id), role

        text = json.dumps(seen)
        for secret in world.b_secrets():
            assert secret not in text, f"{role} of team A saw {secret!r}"
    # Nothing of B changed under any of it.
    assert (await svc.get(member("platform_admin"), world.b_id))["status"] == "running"


async def test_every_endpoint_answers_for_the_tokens_principal(world: World) -> None:
    h = world.h
    assert h.sidecar is not None
    async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as c:
        assert (await c.get("/v1/trials")).status_code == 401  # no token, no answer
        admin = {"Authorization": f"Bearer {h.token(subject='root', roles=['platform_admin'])}"}
        listed = (await c.get("/v1/trials", headers=admin)).json()["trials"]
        assert {t["id"] for t in listed} == {world.a_id, world.b_id}
        metrics = (await c.get("/metrics")).text
        assert A_CANARY not in metrics and B_CANARY not in metrics and "team" not in metrics
        missing = (await c.get(f"/v1/trials/{MISSING}", headers=admin)).json()
        for role in ROLE_ORDER:
            if role == "platform_admin":
                continue
            token = h.token(subject=f"http-{role}", roles=[role], teams=[TEAM_A])
            headers = {"Authorization": f"Bearer {token}"}
            texts = []
            for method, path in (
                ("GET", "/v1/trials"), ("GET", f"/v1/trials?team={TEAM_B}"), ("GET", "/v1/live"),
                ("GET", f"/v1/trials/{world.a_id}"), ("GET", "/metrics"),
            ):
                r = await c.request(method, path, headers=headers)
                assert r.status_code == (404 if role == "gateway" and world.a_id in path else 200), (role, path)
                texts.append(r.text)
            for r in (
                await c.get(f"/v1/trials/{world.b_id}", headers=headers),
                await c.post(f"/v1/trials/{world.b_id}/stop", headers=headers),
            ):
                assert r.status_code == 404, (role, r.text)
                assert r.text.replace(world.b_id, MISSING) == json.dumps(missing, separators=(",", ":")), role
            # Creating for B: 403 naming $.team, worded exactly as for a team no one has (the
            # message echoes the caller's own team name, so it is not scanned).
            refused = []
            for team in (TEAM_B, "team-nobody"):
                r = await c.post("/v1/trials", headers=headers, json={
                    "team": team, "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE, "spend_cap_usd": 1.0,
                })
                assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", (role, r.text)
                assert r.json()["error"]["field"] == "$.team"
                refused.append(r.text.replace(team, "<team>"))
            assert refused[0] == refused[1], role
            if role in READERS and role not in WRITERS:
                r = await c.post(f"/v1/trials/{world.a_id}/stop", headers=headers)
                assert r.status_code == 403, (role, r.text)
                assert set(r.json()) == {"error"} and r.json()["error"]["code"] == "forbidden"
                texts.append(r.text)
            for secret in world.b_secrets():
                assert all(secret not in t for t in texts), f"{role} of team A saw {secret!r} over HTTP"

