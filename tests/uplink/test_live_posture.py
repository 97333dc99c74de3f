"""Live trust (issue 25 item 5): the collector takes a team's content (``exchange`` records)
on the word of the ``posture`` records its sidecars send, the latest one counting; the static
``content_teams`` list stays as an optional second fence, and alone decides for a team no
sidecar has sent a posture for. A sidecar with an uplink sends its teams' posture from its
heartbeat, so a control-plane trial's exchanges reach a collector that lists no team."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness import Harness, exchange, wait_for
from tests.ports import reserved_port
from tests.uplink.kit import UplinkKit
from tests.uplink.test_collector import exchange_record, post
from tests.uplink.test_control_plane_e2e import _cut_over, sidecar_toml
from uplink.schema import PostureRecord, encode_batch


def posture(team: str, revision: int, site: str) -> PostureRecord:
    return PostureRecord(id=f"posture:{team}:gw-1:{revision}", team=team, gateway="gw-1", revision=revision, at=1.0,
                         content_uplink=site == "control_plane", prompt_retention=True, site=site)


async def test_the_latest_posture_record_decides_and_the_static_list_is_a_second_fence(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path / "live")  # no static list: only the live posture lets content in
    async with kit.collector() as c:
        refused = await post(kit, c.url, encode_batch("s1", 1.0, [exchange_record(1, "team-a")]))
        assert refused.status_code == 403, "no posture heard, not listed: refused"
        r = await post(kit, c.url, encode_batch("s1", 1.0, [posture("team-a", 10, "control_plane"),
                                                            exchange_record(2, "team-a")]))
        assert r.status_code == 200 and r.json()["acked"] == ["posture:team-a:gw-1:10", "exchange:t1:x2"], r.text
        r = await post(kit, c.url, encode_batch("s1", 1.0, [posture("team-a", 20, "local"), exchange_record(3, "team-a")]))
        assert r.json()["refused"] == {"exchange:t1:x3": "content_not_permitted"}, "content off since revision 20"
        r = await post(kit, c.url, encode_batch("s1", 1.0, [posture("team-a", 15, "control_plane"),
                                                            exchange_record(4, "team-a")]))
        assert r.json()["refused"] == {"exchange:t1:x4": "content_not_permitted"}, "a late, older record counts not"
    assert [rid for rid, _ in kit.held("exchange")] == ["exchange:t1:x2"]

    fenced = UplinkKit(tmp_path / "fenced", content_teams=("team-b",))
    async with fenced.collector() as c:
        r = await post(fenced, c.url, encode_batch("s1", 1.0, [
            posture("team-a", 1, "control_plane"), posture("team-b", 1, "control_plane"),
            exchange_record(1, "team-a"), exchange_record(2, "team-b")]))
        assert r.json()["refused"] == {"exchange:t1:x1": "content_not_permitted"}, "team-a is not in the fence"
        r = await post(fenced, c.url, encode_batch("s1", 1.0, [posture("team-b", 2, "local"), exchange_record(3, "team-b")]))
        assert r.json()["refused"] == {"exchange:t1:x3": "content_not_permitted"}, "listed, but its posture says no"


async def test_a_sidecar_sends_its_posture_and_a_collector_listing_no_team_takes_its_trials_exchanges(
    tmp_path: Path,
) -> None:
    kit = UplinkKit(tmp_path)  # the collector lists no team
    async with kit.collector() as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), refresh_seconds=0.2,
                           lease_seconds=0.6) as h:
            await _cut_over(h, True)
            tid = (await h.create_trial())["id"]

            async def posture_heard() -> bool:
                bodies = [b for _, b in kit.held("posture")]
                return any(b'"site":"control_plane"' in b for b in bodies)

            await wait_for(posture_heard, what="the sidecar's control_plane posture at the collector")
            assert (await h.send([exchange(i) for i in range(5)]))["sampled"] == 5

            async def stored() -> bool:
                return len(kit.held("exchange")) == 5

            await wait_for(stored, what="the 5 exchanges held at the collector")
            view: dict[str, Any] = await h.trial(tid)
    postures = [b for _, b in kit.held("posture")]
    print(f"\nlive posture: {len(postures)} posture record(s) held, the last {postures[-1].decode()}; "
          f"exchanges held {len(kit.held('exchange'))}")
    assert view["funnel"]["outcomes"].get("not_at_site", 0) == 0


async def test_a_collector_restarted_with_an_empty_store_learns_the_posture_with_no_change_at_the_sidecar(
    tmp_path: Path,
) -> None:
    """The posture is sent again every few heartbeats, changed or not: a collector that lost it
    (restarted on an empty store here; a lost record alike) learns it again, no trial needed."""
    kit = UplinkKit(tmp_path)
    with reserved_port() as port:  # kept for the restart below
        await _restarted_empty(kit, tmp_path, port)


async def _restarted_empty(kit: UplinkKit, tmp_path: Path, port: int) -> None:
    collector = kit.collector(port=port)
    await collector.start()
    try:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, collector.url), lease_seconds=0.6) as h:
            await _cut_over(h, True)

            async def heard() -> bool:
                return any(b'"site":"control_plane"' in b for _, b in kit.held("posture"))

            await wait_for(heard, what="the sidecar's posture at the collector")
            await collector.stop()
            for path in tmp_path.glob(kit.db.name + "*"):  # its database and its journal files
                path.unlink()
            assert kit.held("posture") == []
            collector = kit.collector(port=port)  # back on the same port, its posture table empty
            await collector.start()
            await wait_for(heard, what="the unchanged posture sent again to the restarted collector")
    finally:
        await collector.stop()
