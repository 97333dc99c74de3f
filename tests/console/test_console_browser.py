"""The console in a real headless Chromium, against a real sidecar and the fake provider.

Each screen loads and is photographed at desktop and phone widths; a trial is created by
clicking, reaches its verdict on the detail page as exchanges arrive (the page refreshes
itself), and is stopped by clicking; a viewer sees no write button and a forged write is
refused with or without the CSRF token; a retention-off team's content appears in no
page; and no page or asset asks anything of any host but the sidecar on 127.0.0.1.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.console.conftest import Pages, boxes, screenshot
from tests.harness import CANDIDATE, INCUMBENT, Harness, exchange

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def sign_in(page: Any, token: str) -> None:
    await page.goto("/console/")
    await expect(page).to_have_url(re.compile(r"/console/login"))
    await page.get_by_label("Access token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Live", exact=True)).to_be_visible()


async def test_each_screen_loads(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None
        decided = await h.create_trial()
        await h.send([exchange(i) for i in range(80)])
        await h.settle(decided["id"], 80)
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await page.goto("/console/")
            await expect(page.get_by_role("heading", name="Live", exact=True)).to_be_visible()
            # The alert strip sits above the tiles.
            strip, tiles = await boxes(page, ".alert-strip", ".tiles")
            assert strip is not None and tiles is not None and strip["y"] < tiles["y"], (strip, tiles)
            await expect(page.locator("[data-tile=running]")).to_have_text("1")
            # The gateway's metered spend (from the exchanges) beside evaluation spend, never summed.
            await expect(page.locator("[data-tile=gateway-spend]")).to_have_text(re.compile(r"^\$0\.0\d+$"))
            # Keyboard: the first Tab reaches the skip link, and focus is visible.
            await page.keyboard.press("Tab")
            assert await page.evaluate("document.activeElement.textContent") == "Skip to content"
            await screenshot(page, "live")

            await page.get_by_role("link", name="Results").click()
            await expect(page.locator("#traffic tbody tr")).to_have_count(1)
            await expect(page.locator("#traffic")).to_contain_text("Adoptable")
            # No control plane configured: the sidecar says corpus evidence is not held here.
            await expect(page.locator("#corpus-elsewhere")).to_contain_text("not held by this sidecar")
            await expect(page.locator("#corpus-elsewhere")).to_contain_text("No control plane is configured")
            await page.get_by_label("Status").select_option("stopped")
            await page.get_by_role("button", name="Filter").click()
            await expect(page.locator("#traffic")).to_contain_text("No trial matches these filters.")
            await page.get_by_label("Status").select_option("")
            await page.get_by_role("button", name="Filter").click()
            await screenshot(page, "results")

            await page.get_by_role("link", name="Trials", exact=True).click()
            await expect(page.locator("#trials tbody tr")).to_have_count(1)
            await screenshot(page, "trials")

            await page.get_by_role("link", name="New trial").click()
            await expect(page.locator("#price-hints")).to_contain_text(CANDIDATE)
            unlabelled = await page.evaluate(
                "Array.from(document.querySelectorAll('form input:not([type=hidden]), form select'))"
                ".filter(e => !e.labels || e.labels.length === 0).map(e => e.name)")
            assert unlabelled == [], f"inputs without a label: {unlabelled}"
            await screenshot(page, "trial-new")

            await page.goto(f"/console/trials/{decided['id']}")
            await expect(page.locator("#verdict")).to_have_text("Adoptable")
            await expect(page.locator("svg.chart")).to_be_visible()
            await expect(page.locator("#chart-note")).to_contain_text("recomputed after every judged case")
            await expect(page.locator("svg.chart polygon.path-area")).to_have_count(1)  # the bounds over judged cases
            await expect(page.locator("#funnel")).to_contain_text("judged")
            await expect(page.locator("#spend-coverage")).to_have_text("complete")
            await expect(page.locator("#promote-form")).to_be_visible()  # Adoptable and running: promotable
            await screenshot(page, "trial-detail")

            await page.get_by_role("link", name="Teams").click()
            await page.get_by_role("link", name="team-a").click()
            await expect(page.locator("#retention")).to_have_text("on")
            await screenshot(page, "team-posture")
            pages.check_local()
        finally:
            await pages.close()


async def test_create_by_clicking_reach_verdict_and_stop(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await page.goto("/console/")
            await expect(page).to_have_url(re.compile(r"/console/login"))
            await screenshot(page, "login")
            await sign_in(page, h.token(subject="dev", roles=["tenant_admin"], teams=["team-a"]))
            cookie = next(c for c in await page.context.cookies() if c["name"] == "shadowtrial_session")
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and cookie["path"] == "/console"

            await page.get_by_role("link", name="Trials", exact=True).click()
            await page.get_by_role("link", name="New trial").click()
            await page.get_by_label("Team").select_option("team-a")
            await page.get_by_label("Incumbent model").fill(INCUMBENT)
            await page.get_by_label("Candidate model").fill(CANDIDATE)
            await page.get_by_label("Spend cap").fill("not a number")
            await page.get_by_label("Sample rate").fill("1")
            await page.get_by_role("button", name="Start trial").click()
            # The API's own refusal, at the field, the form kept.
            await expect(page.locator("#form-error")).to_contain_text("$.spend_cap_usd")
            await expect(page.get_by_label("Spend cap")).to_have_attribute("aria-invalid", "true")
            await expect(page.get_by_label("Team")).to_have_value("team-a")
            await page.get_by_label("Spend cap").fill("5")
            await page.get_by_role("button", name="Start trial").click()
            await expect(page).to_have_url(re.compile(r"/console/trials/tr_[0-9a-f]+$"))
            trial_id = page.url.rsplit("/", 1)[1]
            await expect(page.locator("#verdict")).to_have_text("Collecting")

            # Traffic arrives through the tap; the open page refreshes itself to the verdict.
            await h.send([exchange(i) for i in range(80)])
            await expect(page.locator("#verdict")).to_have_text("Adoptable", timeout=60_000)
            assert await page.locator("#trial-body").get_attribute("data-updated") is not None
            assert (await h.trial(trial_id))["started_by"] == "dev"

            await page.get_by_role("button", name="Stop trial").click()
            await page.locator("#confirm-stop-trial").click()  # irreversible: asked first (issue 26)
            await expect(page.locator("#trial-state")).to_have_text("stopped")
            await expect(page.locator("#stop-trial")).to_have_count(0)
            assert (await h.trial(trial_id))["status"] == "stopped"
            pages.check_local()
        finally:
            await pages.close()


async def test_viewer_sees_no_write_buttons_and_forged_writes_are_refused(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        trial = await h.create_trial()
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await sign_in(page, h.token(subject="watcher", roles=["viewer"], teams=["team-a"]))
            await page.goto("/console/trials")
            await expect(page.locator("#trials")).to_contain_text(trial["id"])
            await expect(page.locator("#new-trial")).to_have_count(0)
            await page.goto(f"/console/trials/{trial['id']}")
            await expect(page.locator("#verdict")).to_be_visible()
            await expect(page.locator("#stop-trial")).to_have_count(0)
            await expect(page.locator("#promote-slot")).to_have_count(0)
            await screenshot(page, "viewer-trial")
            await page.goto("/console/teams/team-a")
            await expect(page.locator("#retention")).to_have_text("on")
            await expect(page.locator("#save-posture")).to_have_count(0)
            await screenshot(page, "viewer-team")

            csrf = await page.locator("form[action='/console/logout'] input[name=csrf]").input_value()
            stop = f"/console/trials/{trial['id']}/stop"
            without = await page.request.post(stop, form={})
            assert without.status == 403 and "csrf_failed" in await without.text()
            forged = await page.request.post(stop, form={"csrf": "0" * 64})
            assert forged.status == 403 and "csrf_failed" in await forged.text()
            with_token = await page.request.post(stop, form={"csrf": csrf})
            assert with_token.status == 403 and "forbidden" in await with_token.text()
            create = await page.request.post("/console/trials", form={
                "csrf": csrf, "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
                "spend_cap_usd": "1"})
            assert create.status == 403 and "forbidden" in await create.text()
            posture = await page.request.post("/console/teams/team-a",
                                              form={"csrf": csrf, "revision": "0", "prompt_retention": "on"})
            assert posture.status == 403
            cross = await page.request.post(stop, form={"csrf": csrf}, headers={"Origin": "https://evil.example"})
            assert cross.status == 403 and "cross_origin" in await cross.text()
            assert (await h.trial(trial["id"]))["status"] == "running"
            assert len((await h.admin.get("/v1/trials")).json()["trials"]) == 1
            pages.check_local()
        finally:
            await pages.close()


CANARY = "CANARY-c0ffee-9e1d"


async def test_retention_off_content_never_appears(tmp_path: Path, browser: Any) -> None:
    extra = "[teams.team-r]\nprompt_retention = false\n"
    async with Harness(tmp_path, extra=extra) as h:
        assert h.sidecar is not None
        trial = await h.create_trial(team="team-r")
        sent = [
            exchange(i, team="team-r", content=f"answer {CANARY} {i} ⟨q=0.500⟩", request={
                "messages": [{"role": "user", "content": f"{CANARY} question {i}"}], "params": {"max_tokens": 64}})
            for i in range(40)
        ]
        await h.send(sent)
        await h.settle(trial["id"], 40)
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            bodies: list[str] = []

            async def keep(response: Any) -> None:
                if "text" in (response.headers.get("content-type") or ""):
                    bodies.append(await response.text())

            page.on("response", keep)
            tid = trial["id"]
            # The team's page last: the page stays on it for the checks below (one load, not two).
            for path in ("/console/", "/console/live/fragment", "/console/results", "/console/trials",
                         "/console/trials/new", f"/console/trials/{tid}", f"/console/trials/{tid}/fragment",
                         "/console/teams", "/console/results?team=team-r",
                         "/console/watches", "/console/compare", "/console/teams/team-r"):
                response = await page.goto(path)
                assert response is not None and response.status == 200, path
                bodies.append(await response.text())
                bodies.append(await page.content())
            await expect(page.locator("#retention")).to_have_text("off")
            await page.wait_for_load_state("networkidle")
            assert bodies
            leaked = [b[:200] for b in bodies if CANARY in b]
            assert not leaked, f"a retention-off team's content reached a console page: {leaked}"
            pages.check_local()
        finally:
            await pages.close()
