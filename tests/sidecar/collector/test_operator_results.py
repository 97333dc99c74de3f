"""The control plane's ``GET /v1/results`` and its console's traffic pages (issue 25, item 1):
what two sidecars report of one trial and the corpus evidence of the same team, in two lists
never interleaved, each in its own words, seen only by the teams a token may read."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import msgspec
import pytest
import pytest_asyncio

from sidecar.collector.server import CollectorServer
from sidecar.config import load_config
from tests.harness import CANDIDATE, INCUMBENT, AuthKit, write_config
from tests.uplink.kit import AUDIENCE, ISSUER, KID, UplinkKit
from uplink.schema import AlertRecord, CaseResult, Interval, SegmentState, TrialState, encode_batch

pytestmark = pytest.mark.asyncio(loop_scope="session")


def collector_config(tmp: Path, kit: UplinkKit, auth: AuthKit, base_url: str = "http://127.0.0.1:9") -> Path:
    table = (f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{kit.db}"\naudience = "{AUDIENCE}"\n'
             f'issuers = ["{ISSUER}"]\n[[collector.keys]]\nkid = "{KID}"\npath = "{kit.public}"\n')
    return write_config(tmp, base_url, extra=table, db="collector-unused.db", auth=auth.toml())


def state(trial_id: str, rev: int, *, team: str = "team-a", status: str = "running", verdict: str = "inconclusive",
          cases: int = 0) -> TrialState:
    return TrialState(id=f"trial:{trial_id}:{rev}", trial_id=trial_id, team=team, revision=rev, status=status,
                      at=time.time(), incumbent_model=INCUMBENT, candidate_model=CANDIDATE, execution_site="local",
                      judge_version_id="jv_1", verdict=verdict, cases=cases, cap_micros=5_000_000,
                      spent_micros=12_000, known_micros=12_000)


def case(trial_id: str, i: int, team: str = "team-a") -> CaseResult:
    return CaseResult(id=f"case:{trial_id}:{i}", trial_id=trial_id, case_id=f"c{i}", exchange_id=f"x{i}", team=team,
                      outcome="judged", finished_at=time.time(), score=1.0)


async def deliver(kit: UplinkKit, url: str, sidecar_id: str, records: list[Any]) -> None:
    body = gzip.compress(encode_batch(sidecar_id, time.time(), records))
    async with httpx.AsyncClient() as client:
        r = await client.post(url + "/v1/uplink/batches", content=body, headers={
            "Authorization": f"Bearer {kit.signer().token()}", "Content-Encoding": "gzip"})
    assert r.status_code == 200, r.text


@pytest_asyncio.fixture(loop_scope="session")
async def reported(tmp_path: Path) -> AsyncIterator[tuple[CollectorServer, UplinkKit, AuthKit]]:
    """A collector to which sidecars gw-1/a and gw-1/b reported trial tr_1 (team-a), and gw-2/c
    reported tr_2 (team-b) with a firing alert."""
    kit, auth = UplinkKit(tmp_path), AuthKit(tmp_path)
    config = load_config(str(collector_config(tmp_path, kit, auth)), {})
    async with CollectorServer(config.collector, config=config) as server:
        await deliver(kit, server.url, "gw-1/a", [state("tr_1", 1), case("tr_1", 1), case("tr_1", 2)])
        await deliver(kit, server.url, "gw-1/b", [case("tr_1", 3), state("tr_1", 2, verdict="not_worse", cases=3)])
        await deliver(kit, server.url, "gw-2/c", [
            state("tr_2", 1, team="team-b", verdict="regression", status="stopped", cases=40), case("tr_2", 1, "team-b"),
            AlertRecord(id="alert:al_1:1", alert_id="al_1", watch_id="wa_1", team="team-b", state="firing",
                        at=time.time(), statistic=5.2, threshold=4.0)])
        yield server, kit, auth


async def get(server: CollectorServer, auth: AuthKit, path: str, *, teams: tuple[str, ...] = ("team-a",),
              roles: tuple[str, ...] = ("viewer",), **params: str) -> httpx.Response:
    token = auth.token(roles=roles, teams=teams)
    async with httpx.AsyncClient(base_url=server.url) as client:
        return await client.get(path, params=params, headers={"Authorization": f"Bearer {token}"})


async def test_results_holds_one_row_per_trial_with_each_reporting_sidecar(
        reported: tuple[CollectorServer, UplinkKit, AuthKit]) -> None:
    server, _kit, auth = reported
    r = await get(server, auth, "/v1/results")
    assert r.status_code == 200, r.text
    body = r.json()
    assert list(body)[:2] == ["traffic", "corpus"] and body["corpus"] == []
    [row] = body["traffic"]  # team-a's token: tr_2 of team-b is not there
    assert (row["id"], row["evidence"], row["status"], row["cases"]) == ("tr_1", "traffic", "running", 3)
    assert row["verdict"]["wording"] == "Adoptable"  # the highest revision, sent by gw-1/b
    assert {s["sidecar_id"]: s["case_results"] for s in row["sidecars"]} == {"gw-1/a": 2, "gw-1/b": 1}
    assert row["case_results"] == 3

    admin = (await get(server, auth, "/v1/results", roles=("platform_admin",), teams=())).json()
    assert sorted(t["id"] for t in admin["traffic"]) == ["tr_1", "tr_2"]
    stopped = next(t for t in admin["traffic"] if t["id"] == "tr_2")
    assert stopped["verdict"]["wording"] == "Rejected"
    narrowed = await get(server, auth, "/v1/results", roles=("platform_admin",), teams=(), team="team-b",
                         status="stopped")
    assert [t["id"] for t in narrowed.json()["traffic"]] == ["tr_2"]


async def test_results_refuses_bad_filters_and_anonymous_readers(
        reported: tuple[CollectorServer, UplinkKit, AuthKit]) -> None:
    server, _kit, auth = reported
    bad = await get(server, auth, "/v1/results", since="yesterday")
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "since", bad.text
    unknown = await get(server, auth, "/v1/results", colour="red")
    assert unknown.status_code == 400 and unknown.json()["error"]["field"] == "colour", unknown.text
    async with httpx.AsyncClient(base_url=server.url) as client:
        anonymous = await client.get("/v1/results")
    assert anonymous.status_code == 401, anonymous.text


async def test_console_traffic_pages_show_every_gateway_in_one_navigation(
        reported: tuple[CollectorServer, UplinkKit, AuthKit]) -> None:
    server, _kit, auth = reported
    live = await get(server, auth, "/console/live", roles=("platform_admin",), teams=())
    assert live.status_code == 200, live.text
    for screen in ("Live", "Results", "Trials", "Watches", "Experiments", "Datasets", "Comparisons"):
        assert f">{screen}</a>" in live.text, screen
    assert 'data-tile="alerts">1<' in live.text and "wa_1" in live.text
    assert 'data-refresh="/console/live/fragment"' in live.text
    fragment = await get(server, auth, "/console/live/fragment", roles=("platform_admin",), teams=())
    assert fragment.status_code == 200 and 'data-tile="running">1<' in fragment.text and "<nav" not in fragment.text
    trial = await get(server, auth, "/console/trials/tr_1")
    assert trial.status_code == 200 and "gw-1/a" in trial.text and "gw-1/b" in trial.text
    assert (await get(server, auth, "/console/trials/tr_2")).status_code == 404  # another team's
    watches = await get(server, auth, "/console/watches", roles=("platform_admin",), teams=())
    assert "wa_1" in watches.text and "gw-2/c" in watches.text
    experiments = await get(server, auth, "/console/experiments")  # a viewer: no way to start one
    assert experiments.status_code == 200 and "No experiment yet" in experiments.text
    assert 'id="new-experiment"' not in experiments.text
    results = await get(server, auth, "/console/results")
    assert results.status_code == 200
    traffic, corpus = results.text.split('id="corpus-evidence"')
    assert "tr_1" in traffic and "Adoptable" in traffic and "tr_1" not in corpus


async def test_console_rows_and_trial_page_name_a_reported_trials_rejected_segments(
        reported: tuple[CollectorServer, UplinkKit, AuthKit]) -> None:
    """Issue 27: a trial a sidecar reports Adoptable overall but Rejected on a segment says so in
    the control plane's Results and Trials rows and on its page."""
    server, kit, auth = reported
    segments = [SegmentState(key="tag:tier=fast", judged=30, decision="not_worse", interval=Interval(0.7, 0.95)),
                SegmentState(key="tag:tier=reasoning", judged=10, decision="regression", interval=Interval(0.0, 0.2))]
    tiered = msgspec.structs.replace(state("tr_3", 1, verdict="not_worse", cases=40), segments=segments,
                                     segments_rejected=["tag:tier=reasoning"])
    await deliver(kit, server.url, "gw-1/a", [tiered])
    flag = 'data-segments-rejected="tr_3">overall; Rejected on tag:tier=reasoning</span>'
    for path in ("/console/results", "/console/trials"):
        page = await get(server, auth, path)
        assert page.status_code == 200 and flag in page.text, path
        assert 'data-segments-rejected="tr_1"' not in page.text, path  # a trial without segments: no flag
    trial = await get(server, auth, "/console/trials/tr_3")
    assert trial.status_code == 200
    assert ('<dd id="trial-segments"><span class="segments-rejected">Rejected on tag:tier=reasoning</span> '
            "(tag:tier=fast: Adoptable, 30 judged; tag:tier=reasoning: Rejected, 10 judged)</dd>") in trial.text
