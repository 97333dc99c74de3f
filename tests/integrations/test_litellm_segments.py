"""Per-segment verdicts through a real LiteLLM 1.80.0 proxy (issue 27): the plugin passes the
request's metadata tags and the key's alias as the exchange's ``tags``, and a trial read by
``tag:tier`` and ``tag:key_alias`` tracks the two tiers the callers tagged; with a regression planted
in one tier, the trial reads Adoptable overall but Rejected on that tier on every surface, and
promotion asks for the acknowledgement (the must-show, in a real headless Chromium)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from sidecar.demo.fake_provider import FakeModel
from tests.console.conftest import Pages
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness
from tests.integrations.test_litellm_proxy import Served, chat, exchanges_for, sidecar, token  # noqa: F401 (fixture)
from tests.litellm_proxy import Gateway


async def test_plugin_passes_metadata_tags_and_the_key_alias_to_a_segmented_trial(
    gateway: Gateway, sidecar: Harness  # noqa: F811
) -> None:
    trial = await sidecar.create_trial(team="team-a", sample_rate=1.0, audit_share=0.0,
                                       segments=["tag:tier", "tag:key_alias"])
    marker = token()
    calls = []
    for i in range(4):
        tier = "reasoning" if i % 2 else "fast"
        calls.append(await chat(gateway.plugin, "sk-team-a", f"question {i} {marker}",
                                extra_body={"metadata": {"tags": [f"tier:{tier}"]}}))
    got = await exchanges_for(gateway, calls)
    tags = [got[c.call_id]["tags"] for c in calls]
    assert [t["tier"] for t in tags] == ["fast", "reasoning", "fast", "reasoning"]
    alias = tags[0]["key_alias"]
    assert alias and all(t["key_alias"] == alias for t in tags)
    view = await sidecar.settle(trial["id"], 4)
    judged = {v["key"]: v["judged"] for v in view["segments"]["values"]}
    assert judged == {"tag:tier=fast": 2, "tag:tier=reasoning": 2, f"tag:key_alias={alias}": 4}


# --- the must-show: a planted regression in one tier, seen and acknowledged ---------------

#: The sidecar's candidate is far better than the gateway's incumbent (0.2) on every prompt but the
#: ``reasoning`` ones, where it plants 0.0; the judge calls a gap of 0.15 or more a strong preference.
TIERED_MODELS = {
    INCUMBENT: FakeModel(quality=0.5),
    CANDIDATE: FakeModel(quality=0.9, quality_noise=0.0, quality_when={"reasoning": 0.0}),
    JUDGE: FakeModel(judge=True, strong_margin=0.15),
}
REJECTED_SUMMARY = "Adoptable overall; Rejected on tag:tier=reasoning"


async def tiered_calls(gw: Gateway, marker: str, start: int, n: int) -> list[Served]:
    """``n`` calls through the plugin's proxy, every third a ``tier:reasoning`` one (its prompt
    says ``reasoning``), the rest ``tier:fast``; sixteen at a time."""
    gate = asyncio.Semaphore(16)

    async def one(i: int) -> Served:
        tier = "reasoning" if i % 3 == 2 else "fast"
        async with gate:
            return await chat(gw.plugin, "sk-team-b", f"{tier} question {i} {marker}",
                              extra_body={"metadata": {"tags": [f"tier:{tier}"]}})

    return list(await asyncio.gather(*(one(i) for i in range(start, start + n))))


@pytest.mark.asyncio(loop_scope="session")
async def test_a_regression_planted_in_one_tier_is_shown_and_must_be_acknowledged_to_promote(
    tmp_path: Path, gateway: Gateway, browser: Any
) -> None:
    """Issue 27's must-show through the real proxy: two tagged tiers, the candidate worse on one.
    The trial reads Adoptable overall and Rejected on that tier, in the API, the lists and the
    console; promotion is refused until the rejected tier is acknowledged, then recorded on the watch."""
    async with Harness(tmp_path, models=TIERED_MODELS, never_called=(), workers=4) as h:
        assert h.sidecar is not None and h.admin is not None
        gateway.relay.clear()
        gateway.relay.target = h.sidecar.tap_url
        try:
            trial = await h.create_trial(team="team-b", audit_share=0.0, segments=["tag:tier"], segment_cap=2,
                                         min_cases=10)
            tid = trial["id"]
            marker, sent = token(), 0
            view: dict[str, Any] = {}

            async def reads_rejected() -> bool:
                nonlocal view
                view = await h.trial(tid)
                return (view["segments"] or {}).get("summary") == REJECTED_SUMMARY

            # Batches of 12 through the proxy until the verdict is read (48 cases here), at most 204.
            while sent < 200:
                await exchanges_for(gateway, await tiered_calls(gateway, marker, sent, 12))
                sent += 12
                await h.settle(tid, sent)
                if await reads_rejected():
                    break
            assert view["segments"]["summary"] == REJECTED_SUMMARY, (sent, view["verdict"], view["segments"])
            assert view["verdict"]["wording"] == "Adoptable"
            by_key = {v["key"]: v for v in view["segments"]["values"]}
            assert by_key["tag:tier=fast"]["verdict"] == "Adoptable", by_key
            assert by_key["tag:tier=reasoning"]["verdict"] == "Rejected", by_key
            listed = (await h.admin.get("/v1/trials", params={"team": "team-b"})).json()
            item = next(t for t in listed["trials"] if t["id"] == tid)
            assert item["segments_rejected"] == ["tag:tier=reasoning"]
            assert item["segments_summary"] == REJECTED_SUMMARY

            # Promotion through the API without the acknowledgement is refused, naming the segment.
            r = await h.admin.post(f"/v1/trials/{tid}/promote", json={"daily_cap_usd": 5.0})
            assert r.status_code == 409, r.text
            error = r.json()["error"]
            assert (error["reason"], error["field"]) == ("segments_unacknowledged", "$.acknowledge_segments"), error
            assert "tag:tier=reasoning" in error["message"]

            # The console: the Results row flags it, the trial page shows the segment and asks.
            pages = Pages(browser, h.sidecar.admin_url)
            try:
                page = await pages.page()
                await page.goto("/console/results")
                await expect(page.locator(f"#traffic [data-segments-rejected={tid}]")).to_have_text(
                    "overall; Rejected on tag:tier=reasoning")
                await page.goto(f"/console/trials/{tid}?promote=1")
                await expect(page.locator("#segments-summary")).to_have_text(REJECTED_SUMMARY)
                rejected = page.locator("svg.segments-chart .segment-bar.rejected")
                await expect(rejected).to_have_count(1)
                assert await rejected.get_attribute("data-key") == "tag:tier=reasoning"
                await page.get_by_label("Sentinel daily cap").fill("5")
                await page.get_by_role("button", name="Promote").click()
                await expect(page.locator("#promote-error")).to_contain_text("Rejected on tag:tier=reasoning")
                assert (await h.trial(tid))["status"] == "running"
                await page.get_by_label("Sentinel daily cap").fill("5")
                await page.get_by_label("promote despite tag:tier=reasoning").check()
                await page.get_by_role("button", name="Promote").click()
                await expect(page).to_have_url(re.compile(r"/console/watches/wa_[0-9a-f]+$"))
                await expect(page.locator("#acknowledged-segments")).to_contain_text("tag:tier=reasoning")
                watch_id = page.url.rsplit("/", 1)[1]
                pages.check_local()
            finally:
                await pages.close()
            assert (await h.trial(tid))["status"] == "adopted"
            watch = (await h.admin.get(f"/v1/watches/{watch_id}")).json()
            assert watch["promotion"]["acknowledged_segments"] == ["tag:tier=reasoning"]
        finally:
            gateway.relay.target = None
