"""The explorable demo's two consoles, every screen populated, in a real headless Chromium
(issue 28, item 2 and its must-show).

``shadowtrial demo --stay`` runs in a subprocess as an operator starts it; the test signs in
to the sidecar's console and to the control plane's with the one token the demo printed, opens
every screen, checks that each shows the demo's content rather than its empty state, and
photographs it (``demo-*-desktop.png`` at 1280×800, and the phone width) into the artifacts
directory the other console tests use. The demo is the one tests/sidecar/demo/test_explore.py
checks over HTTP and stops with a Ctrl-C to its process group (the ``explorable_demo`` fixture:
one demo for both, issue 29).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.async_api import expect

from sidecar.demo.explore import CANDIDATE, INCUMBENT, OPS_TEAM, SUPPORT_TEAM, TEAM
from tests.console.conftest import Pages, screenshot
from tests.sidecar.demo.explore_kit import RunningDemo, SharedDemo

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: Sentences the consoles show for an empty list: none may appear on a demo screen.
EMPTY = ("No trial matches these filters", "No trial is running", "No watch", "You see no team yet",
         "No sidecar has reported a trial yet", "No experiment yet", "No dataset", "No comparison",
         "No experiment matches these filters", "no judged case yet", "No alert.")


async def sign_in(page: Any, token: str, home: str) -> None:
    await page.goto("/console/login")
    await page.get_by_label("Access token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Live", exact=True)).to_be_visible()
    await expect(page).to_have_url(re.compile(home))


async def shot(page: Any, name: str, path: str, *must_show: str) -> str:
    """Open ``path``, check it shows each of ``must_show`` and no empty state, photograph it."""
    if path:
        await page.goto(path)
    main = page.locator("main")
    for text in must_show:
        await expect(main).to_contain_text(text)
    body = await main.inner_text()
    empty = [e for e in EMPTY if e in body]
    assert not empty, f"{name} ({page.url}) shows an empty state: {empty}"
    await screenshot(page, f"demo-{name}")
    return str(body)


async def test_every_screen_of_the_demo_is_populated(browser: Any, explorable_demo: SharedDemo) -> None:
    demo = await explorable_demo.get()
    await sidecar_screens(browser, demo)
    await control_plane_screens(browser, demo)


async def sidecar_screens(browser: Any, demo: RunningDemo) -> None:
    pages = Pages(browser, demo.sidecar)
    try:
        page = await pages.page()
        await sign_in(page, demo.token, r"/console/$")
        ids = {k: demo.id_of(label) for k, label in (
            ("decided", "Adoptable, stopped"), ("continue", "Adoptable, still running"), ("rejected", "Rejected"),
            ("collecting", "Collecting, judged at"), ("collecting-local", "Collecting, judged by"),
            ("paused", "Paused"))}
        watch_id = demo.id_of("Adopted, its watch")

        live = await shot(page, "live", "", watch_id, ids["continue"], ids["paused"])
        await expect(page.locator(".alert-strip.firing")).to_be_visible()
        assert "No alert is firing" not in live

        await shot(page, "results", "/console/results", *ids.values(), "Adoptable", "Rejected", "Adopted",
                   "Collecting", "Paused")
        await shot(page, "trials", "/console/trials", *ids.values())
        await shot(page, "trial-new", "/console/trials/new", CANDIDATE)
        for name, verdict in (("decided", "Adoptable"), ("continue", "Adoptable"), ("rejected", "Rejected"),
                              ("collecting", "Collecting"), ("collecting-local", "Collecting"),
                              ("paused", "Paused")):
            await page.goto(f"/console/trials/{ids[name]}")
            await expect(page.locator("#verdict")).to_have_text(verdict)
            body = await shot(page, f"trial-{name}", "", ids[name])
            if name != "collecting":  # judged at the control plane: this sidecar holds none of its cases
                assert "no judged cases yet" not in body, name
        await expect(page.locator("#trial-state")).to_contain_text("posture")  # the paused one says why
        await page.goto(f"/console/watches/{watch_id}")
        await expect(page.locator("#detector-state")).to_have_text("Fired")
        await shot(page, "watch", "", watch_id)
        await page.locator("#trial-link, a[href*='/console/trials/']").first.click()
        await expect(page.locator("#verdict")).to_have_text("Adopted")
        await shot(page, "trial-promoted", "")
        await shot(page, "watches", "/console/watches", watch_id, PROMOTED_MODEL)

        # Compare: the token carries the content permission, so it runs (on the fake provider).
        await page.goto("/console/compare")
        await expect(page.locator("#compare-refused")).to_have_count(0)
        await page.get_by_label(INCUMBENT).check()
        await page.get_by_label(CANDIDATE).check()
        await page.get_by_label("Incumbent (the model served today)").select_option(INCUMBENT)  # chosen, not clicked first
        await page.get_by_label("Prompt").fill("Explain the difference between a mutex and a semaphore.")
        await page.get_by_role("button", name="Compare").click()
        answered = page.locator("#answers [data-state=answered]")
        await expect(answered).to_have_count(2, timeout=60_000)
        await expect(page.locator("#compare-done")).to_be_visible(timeout=60_000)
        await shot(page, "compare", "", INCUMBENT, CANDIDATE)

        await shot(page, "teams", "/console/teams", TEAM, SUPPORT_TEAM, OPS_TEAM)
        await shot(page, "team-support", f"/console/teams/{SUPPORT_TEAM}", "demo-gateway")
        await expect(page.locator("#retention")).to_have_text("on")
        await shot(page, "team-ops", f"/console/teams/{OPS_TEAM}", "demo-gateway")
        await expect(page.locator("#retention")).to_have_text("off")
        pages.check_local()
    finally:
        await pages.close()


PROMOTED_MODEL = "sim-candidate-medium"


async def control_plane_screens(browser: Any, demo: RunningDemo) -> None:
    pages = Pages(browser, demo.collector)
    try:
        page = await pages.page()
        await sign_in(page, demo.token, r"/console/(live)?$")
        collecting = demo.id_of("Collecting, judged at")
        experiment = demo.id_of("Experiment")
        await shot(page, "cp-live", "/console/live", collecting)
        await shot(page, "cp-results", "/console/results", collecting, experiment)
        await expect(page.locator(f"#corpus tbody tr[data-experiment='{experiment}']")).to_have_count(1)
        await shot(page, "cp-trials", "/console/trials", collecting, demo.id_of("Rejected"))
        await shot(page, "cp-trial", f"/console/trials/{collecting}", "demo-gateway")
        await shot(page, "cp-watches", "/console/watches", demo.id_of("Adopted, its watch"))

        await shot(page, "experiments", "/console/experiments", experiment)
        await page.goto(f"/console/experiments/{experiment}")
        await expect(page.locator("#progress")).to_have_attribute("data-status", "completed")
        await shot(page, "experiment", "", INCUMBENT, CANDIDATE)
        await shot(page, "experiment-new", "/console/experiments/new", "support-questions")
        await shot(page, "datasets", "/console/datasets", "support-questions")
        await page.get_by_role("link", name=re.compile(r"^ds_")).first.click()
        await expect(page.locator("#items tbody tr").first).to_be_visible()  # content permission: items shown
        await shot(page, "dataset", "", "support-questions")
        comparison = demo.link("A/B comparison").rsplit("=", 1)[1]
        await shot(page, "comparisons", "/console/comparisons", comparison)
        await page.goto(f"/console/comparisons?open={comparison}")
        await expect(page.locator(f"#panel-{comparison}")).to_be_visible()
        await shot(page, "comparison", "", comparison)
        pages.check_local()
    finally:
        await pages.close()
