"""Issue 21 item 8: exchanges forwarded just before a pause get their one outcome.

A control-plane trial's sampled exchange has exactly one funnel outcome across both sites: the
sidecar counts what it never forwarded; the collector counts what it holds. An exchange the
collector holds for a trial that paused (or was re-pinned to the local engine by a resume)
before it ran is recorded ``shed_stopped`` in the collector's funnel of the trial, once, and
never runs later: as the sidecar's own engine sheds the claims it holds when a trial pauses.

Two ways to get there, each a real sidecar and a real collector on loopback: the collector is
unreachable while the exchanges are sampled and the trial paused, then comes back; and, with no
outage, the exchanges reach the collector in the same batch as the pause.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from tests.harness import CANDIDATE, Harness, exchange, wait_for
from tests.ports import reserved_port
from tests.uplink.kit import UplinkKit
from tests.uplink.test_control_plane_e2e import Collector, _cut_over, sidecar_toml

N = 10


@pytest.fixture
async def kit(tmp_path: Path) -> AsyncIterator[UplinkKit]:
    yield UplinkKit(tmp_path, content_teams=("team-a",))


def _sidecar_outcomes(view: dict[str, Any]) -> dict[str, int]:
    return {k: v for k, v in view["funnel"]["outcomes"].items() if v and k != "not_sampled"}


async def _accounted(h: Harness, c: Collector, tid: str, n: int) -> tuple[dict[str, int], dict[str, int]]:
    """Wait until the sidecar's outbox is delivered and the two sites' funnels hold ``n`` outcomes
    with nothing in flight; the two funnels (sidecar, collector)."""
    sidecar: dict[str, int] = {}
    collector: dict[str, int] = {}

    async def done() -> bool:
        nonlocal sidecar, collector
        view = await h.trial(tid)
        sidecar = _sidecar_outcomes(view)
        copy = await c.trial(tid)
        collector = {} if copy is None else {k: v for k, v in copy["funnel"].items() if v}
        return (await h.runtime.store.outbox_depth() == 0 and view["funnel"]["in_flight"] == 0
                and sum(sidecar.values()) + sum(collector.values()) >= n)

    try:
        await wait_for(done, timeout=15, what=f"{n} outcomes across both sites")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: sidecar {sidecar}, collector {collector}") from None
    return sidecar, collector


async def _assert_never_run_later(h: Harness, c: Collector, tid: str, collector_before: dict[str, int]) -> None:
    """A resume re-pins the trial to the local engine: what the collector holds stays as counted."""
    assert h.admin
    r = await h.admin.post(f"/v1/trials/{tid}/resume")
    assert r.status_code == 200, r.text
    assert r.json()["execution_site"] == "local"

    async def repinned() -> bool:
        v = await c.trial(tid)
        return v is not None and (v["status"], v["execution_site"]) == ("running", "local")

    await wait_for(repinned, what="the re-pin at the collector")
    assert c.server and c.server.control_plane
    assert await c.server.control_plane.settle_unrunnable() == 0
    assert await c.server.control_plane.offer_pending() == 0
    copy = await c.trial(tid)
    assert copy is not None and {k: v for k, v in copy["funnel"].items() if v} == collector_before
    cases = await c.cases(tid)
    assert len(cases) == N and all(x["state"] == "finished" for x in cases)
    assert len({str(x["exchange_id"]) for x in cases}) == N, "one case per exchange"


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_exchanges_held_while_the_collector_was_away_and_the_trial_paused_are_counted_once(
    tmp_path: Path, kit: UplinkKit, backend: str, request: pytest.FixtureRequest,
) -> None:
    """The collector's store is SQLite or PostgreSQL."""
    store_url = ""
    if backend == "postgres":
        pg = request.getfixturevalue("pg_server")
        store_url = pg.create_database()
        request.addfinalizer(lambda: pg.drop_database(store_url))
    await _away_then_back(tmp_path, kit, store_url, resumed_while_away=False)


async def test_exchanges_held_while_the_collector_was_away_and_the_trial_was_re_pinned_are_counted_once(
    tmp_path: Path, kit: UplinkKit,
) -> None:
    """Paused and resumed (re-pinned to the local engine) before the collector is back: the
    collector's copy starts running locally, and what it holds of the trial is never run."""
    await _away_then_back(tmp_path, kit, "", resumed_while_away=True)


async def _away_then_back(tmp_path: Path, kit: UplinkKit, store_url: str, *, resumed_while_away: bool) -> None:
    # A port the collector will listen on once it is back: it is away while the trial runs and pauses.
    with reserved_port() as port:  # kept while the collector is away
        await _away_on(tmp_path, kit, store_url, port, resumed_while_away=resumed_while_away)


async def _away_on(tmp_path: Path, kit: UplinkKit, store_url: str, port: int, *, resumed_while_away: bool) -> None:
    async with Collector(kit, tmp_path / "collector-probe", providers=False, port=port, store_url=store_url) as probe:
        assert probe.server
        url = probe.url
    (tmp_path / "sidecar").mkdir()
    async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, url), refresh_seconds=0.2) as h:
        assert h.admin
        assert (await _cut_over(h, True))["execution_site"] == "control_plane"
        tid = (await h.create_trial())["id"]
        reply = await h.send([exchange(i) for i in range(N)])
        assert reply["sampled"] == N and reply["shed"] == 0

        async def forwarded() -> bool:  # the trial's spec and its N exchanges wait in the outbox
            return await h.runtime.store.outbox_depth() >= N + 1

        await wait_for(forwarded, what="the exchanges in the outbox")
        assert (await _cut_over(h, False))["paused_trials"] == [tid]
        if resumed_while_away:
            r = await h.admin.post(f"/v1/trials/{tid}/resume")
            assert r.status_code == 200 and r.json()["execution_site"] == "local", r.text

        async with Collector(kit, tmp_path / "collector", port=port, store_url=store_url) as c:
            sidecar, collector = await _accounted(h, c, tid, N)
            print(f"\ncollector away, then back ({'resumed' if resumed_while_away else 'paused'}): {N} sampled; "
                  f"sidecar {sidecar}, collector {collector}")
            assert sum(sidecar.values()) + sum(collector.values()) == N, (sidecar, collector)
            assert collector == {"shed_stopped": N} and sidecar == {}
            assert c.fake is not None and c.fake.calls[CANDIDATE] == 0, "a paused trial's exchange was run"
            if resumed_while_away:
                cases = await c.cases(tid)
                assert len(cases) == N and {(x["state"], x["outcome"]) for x in cases} == {("finished", "shed_stopped")}
            else:
                await _assert_never_run_later(h, c, tid, collector)
        assert h.fake.calls[CANDIDATE] == 0


async def test_exchanges_in_the_same_batch_as_the_pause_are_counted_once(tmp_path: Path, kit: UplinkKit) -> None:
    kit.gate = asyncio.Event()  # every batch's answer is held until set: what follows is one batch
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), refresh_seconds=0.2) as h:
            assert (await _cut_over(h, True))["execution_site"] == "control_plane"
            tid = (await h.create_trial())["id"]

            async def first_batch_held() -> bool:  # the trial's spec, stored, its answer held
                return kit.held_answers >= 1

            await wait_for(first_batch_held, what="the first batch in flight")
            reply = await h.send([exchange(i) for i in range(N)])
            assert reply["sampled"] == N and reply["shed"] == 0

            async def forwarded() -> bool:
                return await h.runtime.store.outbox_depth() >= N + 1

            await wait_for(forwarded, what="the exchanges in the outbox")
            assert (await _cut_over(h, False))["paused_trials"] == [tid]
            depth = await h.runtime.store.outbox_depth()
            kit.gate.set()
            sidecar, collector = await _accounted(h, c, tid, N)
            bodies = [b for b in kit.bodies if b"exchange:" in b]
            assert len(bodies) == 1 and b'"posture_changed"' in bodies[0], "exchanges and pause in one batch"
            print(f"\nsame batch as the pause ({depth} records): {N} sampled; sidecar {sidecar}, collector {collector}")
            assert sum(sidecar.values()) + sum(collector.values()) == N, (sidecar, collector)
            assert sidecar == {} and set(collector) <= {"shed_stopped", "judged", "candidate_failed", "judge_failed"}
            await _assert_never_run_later(h, c, tid, collector)
