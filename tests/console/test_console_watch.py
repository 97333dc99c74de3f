"""Promote by clicking, see the watch decide, and move its alert — in a real headless Chromium.

A trial is created in the console, reaches *Adoptable* as exchanges arrive through the tap
(the fake provider scripted so the candidate wins), is promoted from its page (the form's
Idempotency-Key and CSRF token), and the browser lands on the new watch. The new
incumbent's served answers then drop in quality, the open watch page refreshes itself
to *Fired*, Live shows the alert first, a viewer sees no button and a forged move is
refused, and a writer acknowledges and resolves it by clicking.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.console.conftest import Pages, boxes, screenshot
from tests.console.test_console_browser import sign_in
from tests.harness import CANDIDATE, INCUMBENT, Harness, exchange
from tests.sidecar.services.test_watches import judged, models, served

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_create_decide_promote_watch_fire_ack_resolve(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, models=models(), never_called=(), auth=True) as h:
        assert h.sidecar is not None and h.admin is not None
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await sign_in(page, h.token(subject="dev", roles=["tenant_admin"], teams=["team-a"]))
            await page.goto("/console/trials/new")
            await page.get_by_label("Team").select_option("team-a")
            await page.get_by_label("Incumbent model").fill(INCUMBENT)
            await page.get_by_label("Candidate model").fill(CANDIDATE)
            await page.get_by_label("Spend cap").fill("10")
            await page.get_by_label("Sample rate").fill("1")
            await page.get_by_role("button", name="Start trial").click()
            await expect(page).to_have_url(re.compile(r"/console/trials/tr_[0-9a-f]+$"))
            trial_id = page.url.rsplit("/", 1)[1]
            # Collecting: the Promote button is not offered, and the page says why (the API's rule).
            await expect(page.locator("#promote-reason")).to_contain_text("the verdict is not Adoptable")
            await expect(page.locator("#promote-form")).to_have_count(0)

            await h.send([exchange(i) for i in range(120)])
            await expect(page.locator("#verdict")).to_have_text("Adoptable", timeout=60_000)
            await h.settle(trial_id, 120)
            # The refreshed body says Promote is now offered; its link loads the page with the form.
            await page.get_by_role("link", name="open the Promote form").click()
            await expect(page.locator("#promote-form")).to_be_visible()
            await expect(page.locator("#promote-slot")).to_have_count(0)
            key = await page.locator("#promote-form input[name=request_key]").input_value()
            assert len(key) >= 16
            await page.get_by_label("Sentinel daily cap").fill("nope")
            await page.get_by_role("button", name="Promote").click()
            await expect(page.locator("#promote-error")).to_contain_text("$.daily_cap_usd")
            await page.get_by_label("Sentinel daily cap").fill("5")
            await page.get_by_label("Sentinel sample rate").fill("1")
            await screenshot(page, "trial-promote")
            await page.get_by_role("button", name="Promote").click()
            await expect(page).to_have_url(re.compile(r"/console/watches/wa_[0-9a-f]+$"))
            watch_id = page.url.rsplit("/", 1)[1]
            await expect(page.locator("#detector-state")).to_have_text("Warming up")
            await expect(page.locator("#no-alert")).to_be_visible()
            await expect(page.locator("#gauge-note")).to_contain_text("The line below is its history")
            await expect(page.locator("#detector-history")).to_contain_text("no judged case yet")
            assert (await h.trial(trial_id))["status"] == "adopted"

            # The trial's page now says Adopted and links its watch; Promote is refused with the reason.
            await page.goto(f"/console/trials/{trial_id}")
            await expect(page.locator("#verdict")).to_have_text("Adopted")
            await expect(page.locator("#promote-reason")).to_contain_text("adopted already")
            await page.locator("#trial-watch").click()
            await expect(page).to_have_url(re.compile(f"/console/watches/{watch_id}$"))

            # The new incumbent's answers drop; the open page refreshes itself to the alert.
            await h.send([served(i, 0.4, "drop") for i in range(80)])
            await expect(page.locator("#detector-state")).to_have_text("Fired", timeout=60_000)
            await expect(page.locator("#detector-history polyline")).to_have_count(1)  # its history, drawn
            await expect(page.locator("#detector-history line.fired")).to_have_count(1)
            await expect(page.locator("#ack-alert")).to_be_visible()
            await screenshot(page, "watch-fired")

            await page.get_by_role("link", name="Live").click()
            strip = page.locator("#alert-strip")
            await expect(strip).to_contain_text(f"watch {watch_id}")
            await expect(page.locator("[data-tile=alerts]")).to_have_text("1")
            await expect(page.locator("[data-tile=watches]")).to_have_text("1")
            box, tiles = await boxes(page, "#alert-strip", ".tiles")
            assert box is not None and tiles is not None and box["y"] < tiles["y"], (box, tiles)
            await screenshot(page, "live-alert")

            # A viewer of the team sees the watch and its alert, and no button; a forged move is refused.
            viewer = await pages.page()
            await sign_in(viewer, h.token(subject="watcher", roles=["viewer"], teams=["team-a"]))
            await expect(viewer.locator("#alert-strip")).to_contain_text(watch_id)
            await expect(viewer.locator("#alert-strip button")).to_have_count(0)
            await viewer.goto(f"/console/watches/{watch_id}")
            await expect(viewer.locator("#detector-state")).to_have_text("Fired")
            await expect(viewer.locator("#ack-alert, #resolve-alert, #stop-watch")).to_have_count(0)
            await screenshot(viewer, "viewer-watch")
            csrf = await viewer.locator("form[action='/console/logout'] input[name=csrf]").input_value()
            alert_id = f"{watch_id}.alert"
            forged = await viewer.request.post(f"/console/alerts/{alert_id}/ack", form={"csrf": csrf})
            assert forged.status == 403 and "forbidden" in await forged.text()
            no_token = await viewer.request.post(f"/console/alerts/{alert_id}/resolve", form={})
            assert no_token.status == 403 and "csrf_failed" in await no_token.text()
            stop = await viewer.request.post(f"/console/watches/{watch_id}/stop", form={"csrf": csrf})
            assert stop.status == 403
            promote = await viewer.request.post(f"/console/trials/{trial_id}/promote",
                                                form={"csrf": csrf, "daily_cap_usd": "1"})
            assert promote.status == 403
            assert (await h.admin.get("/v1/alerts")).json()["alerts"][0]["status"] == "firing"

            # The writer acknowledges from the watch's page, then resolves (every drop case judged
            # first, so none counts in the period the resolve starts).
            await judged(h, watch_id, 80)
            await page.goto(f"/console/watches/{watch_id}")
            await page.get_by_role("button", name="Acknowledge").click()
            await expect(page.locator(f"[data-alert-status='{alert_id}']")).to_have_text("acknowledged")
            await expect(page.locator("#ack-alert")).to_have_count(0)
            await page.get_by_role("button", name="Resolve").click()
            await expect(page.locator(f"[data-alert-status='{alert_id}']")).to_have_text("resolved")
            await expect(page.locator("#resolve-alert")).to_have_count(0)
            # Resolving re-armed the detector (issue 23, item 5): a new period, counted from zero.
            await expect(page.locator("#detector-period")).to_contain_text("Period 2, re-armed")
            await expect(page.locator("#detector-state")).not_to_have_text("Fired")
            await screenshot(page, "watch-resolved")
            alert = (await h.admin.get("/v1/alerts")).json()["alerts"][0]
            assert (alert["status"], alert["acknowledged_by"], alert["resolved_by"]) == ("resolved", "dev", "dev")

            await page.get_by_role("link", name="Watches").click()
            await expect(page.locator("#watches tbody tr")).to_have_count(1)
            await expect(page.locator("#watches")).not_to_contain_text("fired")  # re-armed by the resolve
            # No "new watch" action anywhere: a watch is born only by promotion.
            await expect(page.get_by_role("link", name=re.compile("new watch", re.I))).to_have_count(0)
            await expect(page.get_by_role("button", name=re.compile("new watch", re.I))).to_have_count(0)
            await screenshot(page, "watches")
            await page.get_by_role("link", name="Results").click()
            await expect(page.locator("#traffic")).to_contain_text("Adopted")
            pages.check_local()
        finally:
            await pages.close()
