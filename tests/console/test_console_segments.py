"""The trial page's per-segment verdicts (issue 27), in a real headless Chromium: a trial
Adoptable overall but Rejected on one tier says so in the Results, Trials and Live rows and on its page, draws a bar per segment value with the
rejected one highlighted, and its Promote form asks for the rejected segment to be
acknowledged before it promotes; the watch then shows the acknowledgement."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.console.conftest import Pages, screenshot
from tests.console.test_console_browser import sign_in
from tests.harness import Harness
from tests.sidecar.trials.test_segments import FAST, REASONING, models, tiered

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_a_segment_rejected_is_shown_and_must_be_acknowledged_to_promote(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, models=models(), never_called=(), auth=True, workers=4) as h:
        assert h.sidecar is not None and h.admin is not None
        trial = await h.create_trial(audit_share=0.0, segments=["tag:tier"], segment_cap=4)
        tid = trial["id"]
        n = FAST + REASONING
        await h.send([tiered(i) for i in range(n)])
        await h.settle(tid, n)
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await sign_in(page, h.token(subject="dev", roles=["tenant_admin"], teams=["team-a"]))
            # Every list row of the trial names its rejected segment beside the verdict.
            flag = "overall; Rejected on tag:tier=reasoning"
            for path, table in (("/console/results", "#traffic"), ("/console/trials", "#trials"), ("/console/", "#running")):
                await page.goto(path)
                row = page.locator(f"{table} tr", has=page.locator(f"[data-segments-rejected={tid}]"))
                await expect(row.locator(".verdict")).to_have_text("Adoptable")
                await expect(row.locator(f"[data-segments-rejected={tid}]")).to_have_text(flag)
            await page.goto(f"/console/trials/{tid}?promote=1")
            await expect(page.locator("#segments-summary")).to_have_text(
                "Adoptable overall; Rejected on tag:tier=reasoning")
            await expect(page.locator("svg.segments-chart .segment-bar")).to_have_count(2)
            rejected = page.locator("svg.segments-chart .segment-bar.rejected")
            await expect(rejected).to_have_count(1)
            assert await rejected.get_attribute("data-key") == "tag:tier=reasoning"
            await expect(page.locator("#segments-table tr.rejected")).to_contain_text("Rejected")
            await screenshot(page, "trial-segments")

            await page.get_by_label("Sentinel daily cap").fill("5")
            await page.get_by_role("button", name="Promote").click()
            await expect(page.locator("#promote-error")).to_contain_text("Rejected on tag:tier=reasoning")
            await expect(page.locator("#promote-error")).to_contain_text("$.acknowledge_segments")
            assert (await h.trial(tid))["status"] == "running"
            await page.get_by_label("Sentinel daily cap").fill("5")
            await page.get_by_label("promote despite tag:tier=reasoning").check()
            await page.get_by_role("button", name="Promote").click()
            await expect(page).to_have_url(re.compile(r"/console/watches/wa_[0-9a-f]+$"))
            await expect(page.locator("#acknowledged-segments")).to_contain_text("tag:tier=reasoning")
            assert (await h.trial(tid))["status"] == "adopted"
            pages.check_local()
        finally:
            await pages.close()
