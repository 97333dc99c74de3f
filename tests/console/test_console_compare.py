"""Compare in a real headless Chromium: answers stream side by side, text only, nothing kept.

The candidate answers 1.5 s after the incumbent, so the page shows the first answer (with
its latency, cost and absolute-judge score) while the second is still awaited: the
stream is read as it arrives. "Make it a trial" pre-fills the trial form. Without the
content permission the page offers no form and the stream route refuses.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from sidecar.demo.fake_provider import FakeModel
from tests.console.conftest import Pages, screenshot
from tests.console.test_console_browser import sign_in
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def test_compare_streams_answers_side_by_side(tmp_path: Path, browser: Any) -> None:
    slow = {INCUMBENT: FakeModel(quality=0.5), CANDIDATE: FakeModel(quality=0.7, latency_ms=(1500.0, 1500.0)),
            JUDGE: FakeModel(judge=True)}
    async with Harness(tmp_path, models=slow, never_called=(), auth=True) as h:
        assert h.sidecar is not None
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            # A writer without the content permission: no form, and the stream refuses.
            blind = await pages.page()
            await sign_in(blind, h.token(subject="dev", roles=["developer"], teams=["team-a"]))
            await blind.get_by_role("link", name="Compare").click()
            await expect(blind.locator("#compare-refused")).to_contain_text("content permission")
            await expect(blind.locator("#compare-form")).to_have_count(0)
            csrf = await blind.locator("form[action='/console/logout'] input[name=csrf]").input_value()
            body = {"team": "team-a", "messages": [{"role": "user", "content": "hi"}], "models": [INCUMBENT, CANDIDATE]}
            refused = await blind.request.post("/console/compare/stream", data=body, headers={"X-CSRF-Token": csrf})
            assert refused.status == 403 and (await refused.json())["error"]["code"] == "forbidden"
            forged = await blind.request.post("/console/compare/stream", data=body)
            assert forged.status == 403 and "csrf_failed" in await forged.text()

            page = await pages.page()
            await sign_in(page, h.token(subject="dev", roles=["developer"], teams=["team-a"], content=True))
            await page.get_by_role("link", name="Compare").click()
            await page.get_by_label(CANDIDATE).check()
            await page.get_by_label(INCUMBENT).check()
            # Clicked in the other order: the incumbent is the one chosen, never the first clicked.
            await page.get_by_label("Incumbent (the model served today)").select_option(INCUMBENT)
            await page.get_by_label("Prompt").fill("Which is better, <b>tea</b> or coffee?")
            await screenshot(page, "compare-form")
            await page.get_by_role("button", name="Compare").click()
            first = page.locator(f"[data-model='{INCUMBENT}']")
            second = page.locator(f"[data-model='{CANDIDATE}']")
            await expect(first).to_have_attribute("data-state", "answered")
            # Streaming: the first answer is shown while the slower one is still awaited.
            await expect(second.locator("[data-part=answer]")).to_have_text("Waiting for the answer…")
            await expect(first.locator("[data-part=answer]")).to_contain_text("⟨q=")
            await expect(first.locator("[data-fact=latency]")).to_have_text(re.compile(r"^\d+ ms$"))
            await expect(first.locator("[data-fact=cost]")).to_have_text(re.compile(r"^\$0\.\d+$"))
            await expect(second).to_have_attribute("data-state", "answered", timeout=30_000)
            await expect(first.locator("[data-fact=judge-score]")).to_have_text(re.compile(r"^\d+ / 10$"))
            await expect(second.locator("[data-fact=judge-score]")).to_have_text(re.compile(r"^\d+ / 10$"))
            await expect(page.locator("#compare-done")).to_contain_text("Nothing was kept")
            # Answers are text: no element was made of model output.
            assert await page.locator(".answer-text *").count() == 0
            box1, box2 = await first.bounding_box(), await second.bounding_box()
            assert box1 and box2 and abs(box1["y"] - box2["y"]) < 2 and box1["x"] < box2["x"]  # side by side, in the order checked
            await screenshot(page, "compare")

            await page.locator("#make-trial").click()
            await expect(page).to_have_url(re.compile(r"/console/trials/new\?"))
            await expect(page.get_by_label("Team")).to_have_value("team-a")
            await expect(page.get_by_label("Incumbent model")).to_have_value(INCUMBENT)
            await expect(page.get_by_label("Candidate model")).to_have_value(CANDIDATE)
            # Nothing kept: no route lists or shows a past compare.
            assert (await page.request.get("/console/compare/history")).status == 404
            assert (await h.admin.get("/v1/trials")).json()["trials"] == []  # type: ignore[union-attr]
            pages.check_local()
        finally:
            await pages.close()
