"""Alerts that lead somewhere, and irreversible actions asked first (issue 26, items 3 and 4), in
a real headless Chromium.

A trial decides, is promoted, and its watch fires when the new incumbent's served answers drop.
Acknowledged, the alert stays on Live with who acknowledged it and when; its "Trial the replaced
model again" action opens the new-trial form prefilled with the roles reversed, which creates
that trial; Stop asks for confirmation before it stops anything; a paused trial is listed on
Live as paused, never worded Inconclusive.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.console.conftest import Pages
from tests.harness import CANDIDATE, INCUMBENT, Harness, exchange, wait_for
from tests.sidecar.services.test_watches import models, served

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_ack_stays_on_live_retrial_reversed_stop_confirmed_paused_on_live(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, models=models(), never_called=()) as h:  # auth off: the local principal
        assert h.sidecar is not None and h.admin is not None
        trial = (await h.create_trial())["id"]
        await h.send([exchange(i) for i in range(120)])
        await h.settle(trial, 120)
        r = await h.admin.post(f"/v1/trials/{trial}/promote", json={"daily_cap_usd": 5.0, "sample_rate": 1.0})
        assert r.status_code == 201, r.text
        wid = r.json()["watch"]["id"]
        await h.send([served(i, 0.4, "drop") for i in range(200)])

        async def firing() -> bool:
            assert h.admin is not None
            return [a["status"] for a in (await h.admin.get("/v1/alerts")).json()["alerts"]] == ["firing"]

        await wait_for(firing, timeout=120, what="the drift alert", wake=h.runtime.progress)
        alert_id = (await h.admin.get("/v1/alerts")).json()["alerts"][0]["id"]
        assert (await h.admin.post(f"/v1/alerts/{alert_id}/ack")).status_code == 200

        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await page.goto("/console/")
            # Item 3: acknowledged, still on Live, with who and when, until resolved.
            item = page.locator(f"[data-alert='{alert_id}']")
            await expect(item).to_have_attribute("data-status", "acknowledged")
            await expect(item.locator("[data-ack]")).to_contain_text("Acknowledged by local-development")
            await expect(page.locator("#alert-strip")).not_to_contain_text("No alert is firing")
            await expect(item).to_contain_text("/v1/gates/flagger/rollback")
            # "Trial the replaced model again": the watch's roles reversed, prefilled.
            await item.locator("[data-retrial]").click()
            await expect(page).to_have_url(re.compile(r"/console/trials/new\?"))
            await expect(page.get_by_label("Incumbent model")).to_have_value(CANDIDATE)
            await expect(page.get_by_label("Candidate model")).to_have_value(INCUMBENT)
            await expect(page.get_by_label("Team")).to_have_value("team-a")
            await page.get_by_label("Spend cap").fill("2")
            await page.get_by_role("button", name="Start trial").click()
            await expect(page).to_have_url(re.compile(r"/console/trials/tr_[0-9a-f]+$"))
            again = page.url.rsplit("/", 1)[1]
            view = await h.trial(again)
            assert (view["incumbent_model"], view["candidate_model"], view["status"]) == (CANDIDATE, INCUMBENT, "running")

            # Item 4: Stop asks first; nothing stops until confirmed.
            await page.locator("#stop-trial").click()
            await expect(page.locator("#confirm-stop-trial")).to_be_visible()
            assert (await h.trial(again))["status"] == "running"
            await page.locator("#confirm-cancel").click()
            await expect(page).to_have_url(re.compile(rf"/console/trials/{again}$"))
            assert (await h.trial(again))["status"] == "running"
            await page.locator("#stop-trial").click()
            await page.locator("#confirm-stop-trial").click()
            await expect(page).to_have_url(re.compile(rf"/console/trials/{again}$"))
            assert (await h.trial(again))["status"] == "stopped"
            # Stop watch asks too.
            await page.goto(f"/console/watches/{wid}")
            await page.locator("#stop-watch").click()
            await expect(page.locator("#confirm-stop-watch")).to_be_visible()
            assert (await h.admin.get(f"/v1/watches/{wid}")).json()["status"] == "active"

            # Item 4: a paused trial is on Live as paused, never "Inconclusive".
            paused = (await h.create_trial())["id"]
            await h.runtime.store.set_trial_status(paused, "starter_unauthorized", "the starter lost the right",
                                                   ended=False, now=time.time())
            await page.goto("/console/")
            row = page.locator(f"[data-paused='{paused}']")
            await expect(row).to_contain_text("Paused")
            await expect(row).not_to_contain_text("Inconclusive")
            assert (await h.trial(paused))["verdict"]["wording"] == "Paused"
            # Its page offers Resume and Stop to a writer, and words it Paused.
            await row.get_by_role("link").click()
            await expect(page.locator("#verdict")).to_have_text("Paused")
            await expect(page.locator("#resume-trial")).to_be_visible()
            await expect(page.locator("#stop-trial")).to_be_visible()
            pages.check_local()
        finally:
            await pages.close()
