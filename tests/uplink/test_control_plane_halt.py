"""The control plane's word flows back (issue 25 item 5): a control-plane trial reaches
``cap_reached`` at the collector; the next batch's answer names it, the sidecar takes the
status as any status change is recorded (its row, its ``trial_spec``), so its tap samples the
trial no more at once and its forwarder forwards nothing more of it (what it still held is
counted ``cap_reached`` here); the two sites' funnels add up to what was sampled. An exchange the
collector refuses (its team's content is not permitted there) gets its one outcome at the
sidecar, ``not_at_site``, instead of vanishing from both."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import msgspec

from sidecar.collector.server import CollectorServer
from sidecar.export.answers import ControlPlaneAnswers
from sidecar.ingest.claims import Claim
from sidecar.ingest.wire import Exchange
from tests.harness import Harness, exchange, wait_for
from tests.uplink.kit import UplinkKit
from tests.uplink.test_control_plane_e2e import Collector, _cut_over, sidecar_toml
from uplink.schema import Ack


async def test_a_cap_reached_at_the_collector_stops_the_sidecars_forwarding_and_its_funnel_counts_it(
    tmp_path: Path,
) -> None:
    kit = UplinkKit(tmp_path, content_teams=("team-a",))
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        # Routing refreshed rarely: the forwarder's stop is what this test watches, not the tap's.
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), refresh_seconds=60.0) as h:
            assert h.admin and h.runtime.forwarder is not None
            await _cut_over(h, True)
            t = await h.create_trial(spend_cap_usd=0.02, audit_share=0.0)
            tid = t["id"]
            assert t["execution_site"] == "control_plane"

            # 1. Forwarded and run at the collector until its cap is reached there.
            assert (await h.send([exchange(i) for i in range(20)]))["sampled"] == 20
            view: dict[str, Any] = {}

            async def capped() -> bool:
                view.update(await c.trial(tid) or {})
                return view.get("status") == "cap_reached" and sum(view["funnel"].values()) == 20

            await wait_for(capped, timeout=60, what="cap_reached at the collector, all 20 counted")
            assert (await h.trial(tid))["status"] == "running", "the sidecar has not heard yet"

            # 2. The next batch's answer names the trial: the sidecar takes the status.
            assert (await h.send([exchange(i) for i in range(20, 25)]))["sampled"] == 5

            async def heard() -> bool:
                return bool((await h.trial(tid))["status"] == "cap_reached")

            await wait_for(heard, what="the sidecar to take the collector's cap_reached")
            assert h.runtime.forwarder.halted == {tid: "cap_reached"}

            # 3. Recorded as any status change is: the tap samples it no more at once (the routing
            #    is refreshed only every 60 s), and its trial_spec says so to the control plane.
            forwarded = h.runtime.forwarder.forwarded
            assert tid not in h.runtime.routing.current, "the trial left the tap's routes with the answer"
            assert (await h.send([exchange(i) for i in range(25, 35)]))["sampled"] == 0, "sampled no more"
            assert h.runtime.forwarder.forwarded == forwarded, "nothing forwarded after the answer"

            async def spec_sent() -> bool:
                return any(b'"status":"cap_reached"' in body for _, body in kit.held("trial_spec"))

            await wait_for(spec_sent, what="the sidecar's cap_reached trial_spec at the collector")

            # 4. Claims the tap had sampled before the answer and the forwarder not yet written:
            #    forwarded no more, each counted here with the collector's outcome.
            in_flight = [Claim(tid, msgspec.convert(exchange(i), Exchange)) for i in range(35, 38)]
            assert h.runtime.forwarder.handoff.offer_many(in_flight) == 3
            local: dict[str, Any] = {}

            async def all_counted() -> bool:
                view.update(await c.trial(tid) or {})
                local.update(await h.trial(tid))
                return (int(sum(view["funnel"].values())) == 25
                        and local["funnel"]["outcomes"].get("cap_reached", 0) == 3)

            await wait_for(all_counted, what="the 5 forwarded before the answer counted at the collector, the 3 "
                                             "held here counted here")
            assert h.runtime.forwarder.forwarded == forwarded
    at_collector = Counter({k: n for k, n in view["funnel"].items() if n})
    at_sidecar = Counter({k: n for k, n in local["funnel"]["outcomes"].items() if n})
    print(f"\ncap reached at the control plane: collector funnel {dict(at_collector)}; sidecar funnel "
          f"{dict(at_sidecar)} (stopped forwarding); {sum(at_collector.values()) + sum(at_sidecar.values())} "
          "of 28 sampled")
    assert at_collector["cap_reached"] >= 1 and at_sidecar == Counter({"cap_reached": 3})
    assert sum(at_collector.values()) + sum(at_sidecar.values()) == 28, "both sites' funnels add up"


async def test_an_exchange_refused_at_the_collector_is_counted_at_the_sidecar(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path, content_teams=("team-b",))  # the collector's second fence leaves team-a out
    async with CollectorServer(kit.cfg) as server:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, server.url), refresh_seconds=0.2) as h:
            assert h.admin
            await _cut_over(h, True)
            tid = (await h.create_trial())["id"]
            assert (await h.send([exchange(i) for i in range(6)]))["sampled"] == 6
            local: dict[str, Any] = {}

            async def counted() -> bool:
                local.update(await h.trial(tid))
                return bool(local["funnel"]["outcomes"].get("not_at_site", 0) == 6)

            await wait_for(counted, what="the refused exchanges counted at the sidecar")
    print(f"\nrefused at the collector: sidecar funnel {({k: n for k, n in local['funnel']['outcomes'].items() if n})}")
    assert {k: n for k, n in local["funnel"]["outcomes"].items() if n} == {"not_at_site": 6}


async def test_a_pause_at_the_collector_pauses_the_trial_here_and_its_resume_forwards_again(tmp_path: Path) -> None:
    """A pause the collector answers is recorded here as a pause: the trial leaves the tap's
    routes at once; it is not halted for good in the forwarder, so the operator's resume
    forwards its exchanges again."""
    kit = UplinkKit(tmp_path, content_teams=("team-a",))
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), refresh_seconds=60.0) as h:
            assert h.admin and h.runtime.forwarder is not None
            await _cut_over(h, True)
            tid = (await h.create_trial())["id"]
            rt = h.runtime
            answers = ControlPlaneAnswers(rt.store, rt.forwarder, rt.funnel, clock=rt.clock, routing=rt.routing)
            await answers(Ack(acked=[], trials={tid: "posture_changed"}))
            assert (await h.trial(tid))["status"] == "posture_changed"
            assert tid not in rt.routing.current and rt.forwarder.halted == {}
            assert (await h.send([exchange(i) for i in range(3)]))["sampled"] == 0, "paused: sampled no more"

            r = await h.admin.post(f"/v1/trials/{tid}/resume")
            assert r.status_code == 200, r.text
            assert (await h.send([exchange(i) for i in range(3, 7)]))["sampled"] == 4

            async def held() -> bool:
                return len(kit.held("exchange")) == 4

            await wait_for(held, what="the resumed trial's 4 exchanges forwarded to the collector")
            assert (await c.trial(tid) or {}).get("status") == "running"


async def test_a_decision_at_the_collector_reads_decided_here_and_later_exchanges_count_after_decision(
    tmp_path: Path,
) -> None:
    """A control-plane trial that stopped on its decision at the collector (issue 26) is neither
    an end nor a pause here: it reads ``decided`` (never ``posture_changed``), stays routed and
    flagged, and what is sampled after it is counted ``after_decision``, never forwarded."""
    kit = UplinkKit(tmp_path, content_teams=("team-a",))
    async with Collector(kit, tmp_path / "collector") as c:
        (tmp_path / "sidecar").mkdir()
        async with Harness(tmp_path / "sidecar", extra=sidecar_toml(kit, c.url), refresh_seconds=60.0) as h:
            assert h.admin and h.runtime.forwarder is not None
            await _cut_over(h, True)
            tid = (await h.create_trial())["id"]
            rt = h.runtime
            answers = ControlPlaneAnswers(rt.store, rt.forwarder, rt.funnel, clock=rt.clock, routing=rt.routing)
            await answers(Ack(acked=[], trials={tid: "decided"}))
            assert (await h.trial(tid))["status"] == "decided"
            assert rt.forwarder.halted == {tid: "after_decision"}
            route = rt.routing.current.get(tid)
            assert route is not None and route.decided, "still routed, flagged decided"
            assert (await h.send([exchange(i) for i in range(3)]))["sampled"] == 0
            assert (await h.trial(tid))["funnel"]["outcomes"].get("after_decision", 0) == 3
            assert kit.held("exchange") == [], "nothing forwarded after the decision"
