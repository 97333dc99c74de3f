"""Control-plane execution end to end (issue 11 item 5): a real sidecar and a real collector on
loopback, each with its own fake provider, both knowing one trial.

"Never both": every sampled case of a trial pinned to the control plane is judged exactly once,
at the collector, and the sidecar's engine judges none; flipping the posture mid-trial pauses
it at both sites and no case is judged anywhere afterwards; a resume re-pins it to the local
engine, and from then on only the sidecar judges. A collector that restarts judges what it had
stored but not yet run.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import pytest

from sidecar.collector.server import CollectorServer
from sidecar.config import Config, load_config
from sidecar.demo.fake_provider import FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, Harness, default_models, exchange, wait_for, write_config
from tests.ports import reserved_port
from tests.uplink.kit import AUDIENCE, ISSUER, KID, UplinkKit

TEAM_POSTURE = "/v1/teams/team-a/posture"


def sidecar_toml(kit: UplinkKit, url: str) -> str:
    """Gateway gw-1 serves team-a with content uplink on; results and exchanges go to ``url``."""
    return ('[sidecar]\ngateway = "gw-1"\n[teams.team-a]\nprompt_retention = true\n'
            + kit.uplink_toml(url) + "content = true\n")


def collector_config(kit: UplinkKit, tmp: Path, base_url: str | None, store_url: str = "") -> Config:
    """The collector's whole config: its ``[collector]`` table (its records in SQLite, or in
    PostgreSQL at ``store_url``), and — with ``base_url`` — its own provider, models and judge
    (the fake provider at ``base_url``)."""
    tmp.mkdir(exist_ok=True)
    table = (f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{kit.db}"\nstore_url = "{store_url}"\n'
             f'audience = "{AUDIENCE}"\n'
             f'issuers = ["{ISSUER}"]\ncontent_teams = ["team-a"]\n'
             f'[[collector.keys]]\nkid = "{KID}"\npath = "{kit.public}"\n')
    if base_url is None:
        path = tmp / "collector.toml"
        path.write_text(table)
    else:
        path = write_config(tmp, base_url, extra=table, db="collector-unused.db")
    return load_config(str(path), {})


class Collector:
    """A collector with its own fake provider (None: no providers, it runs no trial)."""

    def __init__(
        self, kit: UplinkKit, tmp: Path, *, providers: bool = True, port: int | None = None, store_url: str = "",
    ) -> None:
        self.fake: FakeProvider | None = FakeProvider(default_models(), seed=7) if providers else None
        self.kit, self.tmp, self.port, self.store_url = kit, tmp, port, store_url
        self.server: CollectorServer | None = None
        self.http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Collector:
        if self.fake is not None:
            await self.fake.start()
        config = collector_config(self.kit, self.tmp, None if self.fake is None else self.fake.base_url,
                                  self.store_url)
        self.server = CollectorServer(config.collector, config=config, port=self.port,
                                      middlewares=(self.kit._capture,))
        await self.server.start()
        self.http = httpx.AsyncClient(base_url=self.server.url, timeout=30.0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server and self.http
        await self.http.aclose()
        await self.server.stop()
        if self.fake is not None:
            await self.fake.stop()
            assert self.fake.calls[INCUMBENT] == 0, "the collector called the incumbent"

    @property
    def url(self) -> str:
        assert self.server
        return self.server.url

    async def trial(self, trial_id: str) -> dict[str, Any] | None:
        """What ``GET /v1/trials`` shows of the collector's own run of the trial."""
        assert self.http
        r = await self.http.get("/v1/trials")
        assert r.status_code == 200, r.text
        for t in r.json()["trials"]:
            if t["trial_id"] == trial_id:
                cp: dict[str, Any] | None = t.get("control_plane")
                return cp
        return None

    async def cases(self, trial_id: str) -> list[dict[str, object]]:
        assert self.server and self.server.store
        return await self.server.store.cases(trial_id)

    async def pending(self) -> int:
        """Stored exchanges of running control-plane trials with no case yet."""
        assert self.server and self.server.store
        return len(await self.server.store.pending_exchanges(limit=1000))


async def _cut_over(h: Harness, on: bool) -> dict[str, Any]:
    assert h.admin
    r = await h.admin.put(TEAM_POSTURE, json={"prompt_retention": True, "cut_over": on})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _judged_at_collector(c: Collector, trial_id: str, n: int) -> list[dict[str, object]]:
    cases: list[dict[str, object]] = []

    async def done() -> bool:
        nonlocal cases
        cases = await c.cases(trial_id)
        return len(cases) >= n and all(x["state"] == "finished" for x in cases)

    await wait_for(done, timeout=60, what=f"{n} cases finished at the collector")
    return cases


def _candidate_calls(fake: FakeProvider | None) -> int:
    return 0 if fake is None else fake.calls[CANDIDATE]


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[UplinkKit]:
    yield UplinkKit(tmp_path, content_teams=("team-a",))


@pytest.mark.parametrize("isolation", ["thread", "process"])
async def test_never_both_each_case_judged_once_at_the_pinned_site(
    tmp_path: Path, kit: UplinkKit, isolation: str,
) -> None:
    """The sidecar's engine on a thread of its own, or in a process of its own."""
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), isolation=isolation,
                           refresh_seconds=0.2) as h:
            assert h.admin
            assert (await _cut_over(h, True))["execution_site"] == "control_plane"
            t = await h.create_trial()
            assert t["execution_site"] == "control_plane" and t["prompt_retention"] is True
            tid = t["id"]

            # 1. Pinned to the control plane: forwarded, judged at the collector only, once each.
            reply = await h.send([exchange(i) for i in range(20)])
            assert reply["sampled"] == 20 and reply["shed"] == 0
            cases = await _judged_at_collector(c, tid, 20)
            assert sorted(str(x["exchange_id"]) for x in cases) == sorted(f"ex-{i}" for i in range(20))
            outcomes = Counter(str(x["outcome"]) for x in cases)
            assert outcomes["judged"] >= 1 and sum(outcomes.values()) == 20
            assert _candidate_calls(c.fake) == outcomes["judged"] + outcomes["judge_failed"] + outcomes[
                "candidate_failed"] and _candidate_calls(c.fake) <= 20
            assert h.fake.calls[CANDIDATE] == 0, "the sidecar's engine dispatched a control-plane case"
            assert await h.runtime.store.cases(tid) == [], "the sidecar claimed a control-plane case"
            view = await c.trial(tid)
            assert view is not None and view["status"] == "running" and view["execution_site"] == "control_plane"
            assert sum(view["funnel"].values()) >= 20 and view["verdict"]["code"]
            assert view["spend"]["charged_micros"] > 0 and view["spend"]["remaining_micros"] >= 0

            # 2. The posture flips mid-trial: paused at the sidecar and, in outbox order, at the collector.
            flipped = await _cut_over(h, False)
            assert flipped["paused_trials"] == [tid]
            assert (await h.trial(tid))["status"] == "posture_changed"

            async def paused_at_collector() -> bool:
                v = await c.trial(tid)
                return v is not None and v["status"] == "posture_changed"

            await wait_for(paused_at_collector, what="the pause at the collector")
            before = (_candidate_calls(c.fake), h.fake.calls[CANDIDATE], len(await c.cases(tid)))
            reply = await h.send([exchange(i) for i in range(20, 30)])
            assert reply["sampled"] == 0, "a paused trial samples nothing at either site"
            assert c.server and c.server.control_plane
            assert await c.server.control_plane.offer_pending() == 0
            assert (_candidate_calls(c.fake), h.fake.calls[CANDIDATE], len(await c.cases(tid))) == before

            # 3. A resume re-pins the site (local now): only the sidecar judges from then on.
            r = await h.admin.post(f"/v1/trials/{tid}/resume")
            assert r.status_code == 200, r.text
            assert r.json()["execution_site"] == "local" and r.json()["status"] == "running"

            async def repinned_at_collector() -> bool:
                v = await c.trial(tid)
                return v is not None and (v["status"], v["execution_site"]) == ("running", "local")

            await wait_for(repinned_at_collector, what="the re-pin at the collector")
            reply = await h.send([exchange(i) for i in range(30, 40)])
            assert reply["sampled"] == 10
            local = await h.settle(tid, 10)
            assert local["funnel"]["outcomes"].get("not_at_site", 0) == 0
            local_cases = await h.runtime.store.cases(tid)
            assert sorted(str(x["exchange_id"]) for x in local_cases) == sorted(f"ex-{i}" for i in range(30, 40))
            assert h.fake.calls[CANDIDATE] >= 1
            assert (_candidate_calls(c.fake), len(await c.cases(tid))) == before[::2], \
                "the collector judged a case after the flip"
            print(f"\ncollector: {outcomes} ({_candidate_calls(c.fake)} candidate calls); sidecar after the resume: "
                  f"{local['funnel']['outcomes']} ({h.fake.calls[CANDIDATE]} candidate calls); verdict at the "
                  f"collector: {view['verdict']}")
            # Every exchange went to exactly one site: 20 at the collector, 10 locally, 10 to neither.
            at_collector = {str(x["exchange_id"]) for x in await c.cases(tid)}
            assert not at_collector & {str(x["exchange_id"]) for x in local_cases}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_restarted_collector_judges_what_it_stored_but_had_not_run(
    tmp_path: Path, kit: UplinkKit, backend: str, request: pytest.FixtureRequest,
) -> None:
    """A collector without providers keeps a control-plane trial's exchanges and runs none; the
    next life, with providers, judges each of them once. Its store is SQLite or PostgreSQL."""
    (tmp_path / "sidecar").mkdir()
    store_url = ""
    if backend == "postgres":
        pg = request.getfixturevalue("pg_server")
        store_url = pg.create_database()
        request.addfinalizer(lambda: pg.drop_database(store_url))
    with reserved_port() as port:  # kept for the second life
        await _two_lives(tmp_path, kit, store_url, port)


async def _two_lives(tmp_path: Path, kit: UplinkKit, store_url: str, port: int) -> None:
    async with Collector(kit, tmp_path / "collector", providers=False, port=port, store_url=store_url) as first:
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, first.url)) as h:
            await _cut_over(h, True)
            t = await h.create_trial()
            tid = t["id"]
            assert (await h.send([exchange(i) for i in range(12)]))["sampled"] == 12

            async def all_stored() -> bool:
                return await first.pending() == 12 and await h.runtime.store.outbox_depth() == 0

            await wait_for(all_stored, what="12 exchanges stored at the collector")
            assert await first.cases(tid) == [], "a collector with no providers runs nothing"
            spec = await first.trial(tid)
            assert spec is not None and spec["status"] == "running" and spec["run_here"] is False
    async with Collector(kit, tmp_path / "collector", port=port, store_url=store_url) as second:
        cases = await _judged_at_collector(second, tid, 12)
        assert sorted(str(x["exchange_id"]) for x in cases) == sorted(f"ex-{i}" for i in range(12))
        assert len({str(x["exchange_id"]) for x in cases}) == 12
        view = await second.trial(tid)
        assert view is not None and view["run_here"] is True and sum(view["funnel"].values()) >= 12


async def test_the_collector_runs_a_control_plane_trial_under_its_cap(tmp_path: Path, kit: UplinkKit) -> None:
    """The collector's spend ledger holds the trial's cap; once reached, each further exchange is
    still counted once (``cap_reached``) and none is dispatched."""
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url)) as h:
            await _cut_over(h, True)
            t = await h.create_trial(spend_cap_usd=0.02)
            tid = t["id"]
            assert (await h.send([exchange(i) for i in range(30)]))["sampled"] == 30
            cases = await _judged_at_collector(c, tid, 30)
            outcomes = Counter(str(x["outcome"]) for x in cases)
            view = await c.trial(tid)
            assert view is not None
            print(f"\ncap 0.02 USD: {dict(outcomes)}, spend {view['spend']}")
            assert outcomes["cap_reached"] >= 1 and sum(outcomes.values()) == 30, outcomes
            assert view["spend"]["remaining_micros"] >= 0 and view["spend"]["reserved_micros"] == 0
            assert 0 < view["spend"]["charged_micros"] <= view["spend"]["cap_micros"] == 20_000
            assert _candidate_calls(c.fake) < 30 and h.fake.calls[CANDIDATE] == 0


async def test_a_dataset_is_seeded_from_the_traffic_the_control_plane_holds(tmp_path: Path, kit: UplinkKit) -> None:
    """Corpus evidence lives in the control plane, and so does a cut-over team's retained traffic:
    the exchanges forwarded for its trials seed a dataset there. Those of a trial a posture
    change paused are left out (its team may have turned retention off)."""
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), refresh_seconds=0.2) as h:
            assert (await _cut_over(h, True))["execution_site"] == "control_plane"
            t = await h.create_trial()
            await h.send([exchange(i) for i in range(12)])
            await _judged_at_collector(c, t["id"], 12)
            assert c.http
            seeded = await c.http.post("/v1/datasets/seed", json={"team": "team-a", "name": "from-traffic"})
            assert seeded.status_code == 201, seeded.text
            dataset = seeded.json()
            items = (await c.http.get(f"/v1/datasets/{dataset['id']}/versions/1/items")).json()["items"]
            assert sorted(i["id"] for i in items) == sorted(f"ex-{i}" for i in range(12))
            assert all("traffic" in i["tags"] and i["expected"] for i in items)

            await _cut_over(h, False)  # paused at the sidecar, then at the collector

            async def paused() -> bool:
                v = await c.trial(t["id"])
                return v is not None and v["status"] == "posture_changed"

            await wait_for(paused, what="the pause at the collector")
            again = await c.http.post("/v1/datasets/seed", json={"team": "team-a", "name": "after-pause"})
    assert again.status_code == 400 and again.json()["error"]["code"] == "invalid_dataset", again.text


async def test_a_control_plane_trial_is_read_by_its_segments_at_the_collector(tmp_path: Path, kit: UplinkKit) -> None:
    """Issue 27 at the control plane: the trial's segments travel in its spec and the exchange's
    tags with the exchange, so the collector's cases carry segment keys and its view of the trial
    has the same per-segment block a sidecar's does."""
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url)) as h:
            await _cut_over(h, True)
            t = await h.create_trial(audit_share=0.0, segments=["tag:tier", "route"], segment_cap=4)
            tid = t["id"]
            batch = [exchange(i, tags={"tier": "reasoning" if i % 3 == 2 else "fast"}) for i in range(9)]
            assert (await h.send(batch))["sampled"] == 9
            await _judged_at_collector(c, tid, 9)
            view = await c.trial(tid)
            assert view is not None and view["segments"] is not None, view
            seg = view["segments"]
            assert seg["by"] == ["tag:tier", "route"] and seg["cap"] == 4
            judged = {v["key"]: v["judged"] for v in seg["values"]}
            assert judged == {"tag:tier=fast": 6, "tag:tier=reasoning": 3, "route=(unset)": 9}, judged
            assert h.fake.calls[CANDIDATE] == 0


async def test_a_control_plane_trials_segment_minimum_does_not_sample_every_exchange(
    tmp_path: Path, kit: UplinkKit,
) -> None:
    """``segment_min_cases`` favours a segment value until the sidecar has judged enough of it; a
    control-plane trial's cases are judged at the collector, so the sidecar never would: it
    favours nothing for such a trial (its sample rate alone decides), rather than every exchange."""
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), refresh_seconds=0.2) as h:
            await _cut_over(h, True)
            t = await h.create_trial(audit_share=0.0, sample_rate=0.0, segments=["tag:tier"], segment_min_cases=2)
            assert t["execution_site"] == "control_plane", t
            local = await h.create_trial(team="team-b", audit_share=0.0, sample_rate=0.0, segments=["tag:tier"],
                                         segment_min_cases=2)

            async def refreshed() -> bool:  # the local trial's favour and the other's route: one reload
                route = h.runtime.routing.current.get(local["id"])
                return route is not None and route.favour is not None

            await wait_for(refreshed, timeout=30, what="the routes read with their favours")
            route = h.runtime.routing.current.get(t["id"])
            assert route is not None
            sent = await h.send([exchange(i, tags={"tier": "rare"}) for i in range(6)])
            assert sent["sampled"] == 0, sent
            assert route.favour is None
