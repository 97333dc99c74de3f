"""Every console screen, photographed at 1280×800 and 390×844 (issue 28: "screenshots of every screen").

One sidecar with something on each screen (a decided and promoted trial whose watch fired, a
running trial, a team's posture) and one control plane (a dataset, a comparison with its
panel open, the experiment form): each screen is opened in Chromium, checked to answer 200
with its heading, and saved as ``NAME-desktop.png`` and ``NAME-phone.png`` in the console
tests' artifacts directory (``$SHADOWTRIAL_ARTIFACTS``, default ``tests/console/artifacts/``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from sidecar.collector.server import CollectorServer
from tests.console.conftest import Pages, artifacts_dir, screenshot
from tests.console.test_console_browser import sign_in
from tests.console.test_console_phone import a_comparison, a_reported_trial, control_plane  # noqa: F401 (a fixture)
from tests.harness import CANDIDATE, AuthKit, Harness
from tests.sidecar.services.test_watches import adoptable_trial, judged, models, served

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def shoot(page: Any, path: str, name: str, heading: str | None = None) -> None:
    response = await page.goto(path)
    assert response is not None and response.status == 200, (path, response and response.status)
    if heading is not None:
        await expect(page.locator("h1").first).to_contain_text(heading)
    for png in await screenshot(page, name):
        assert png.stat().st_size > 0


async def test_every_sidecar_screen_at_both_sizes(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, models=models(), never_called=(), auth=True) as h:
        assert h.sidecar is not None and h.admin is not None
        trial_id = await adoptable_trial(h)
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 5.0, "sample_rate": 1.0},
                               headers={"Idempotency-Key": "tour-1"})
        assert r.status_code in (200, 201), r.text
        watch_id = r.json()["watch"]["id"] if "watch" in r.json() else r.json()["id"]
        await h.create_trial(candidate_model=CANDIDATE, sample_rate=0.5)
        await h.send([served(i, 0.4, "drop") for i in range(80)])
        await judged(h, watch_id, 40)
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await page.goto("/console/")
            await screenshot(page, "tour-sidecar-login")
            await page.get_by_label("Access token").fill(h.token(subject="ops", roles=["platform_admin"], content=True))
            await page.get_by_role("button", name="Sign in").click()
            await expect(page.get_by_role("heading", name="Live", exact=True)).to_be_visible()
            for path, name, heading in (
                ("/console/", "live", "Live"), ("/console/results", "results", "Results"),
                ("/console/trials", "trials", "Trials"), ("/console/trials/new", "trial-new", "New trial"),
                (f"/console/trials/{trial_id}", "trial", None), ("/console/watches", "watches", "Watches"),
                (f"/console/watches/{watch_id}", "watch", "Watch"), ("/console/compare", "compare", "Compare"),
                ("/console/teams", "teams", "Teams"), ("/console/teams/team-a", "team", None),
            ):
                await shoot(page, path, f"tour-sidecar-{name}", heading)
            pages.check_local()
        finally:
            await pages.close()
        assert (artifacts_dir() / "tour-sidecar-watch-phone.png").exists()


async def test_every_control_plane_screen_at_both_sizes(
    control_plane: tuple[CollectorServer, AuthKit], browser: Any,  # noqa: F811 (the fixture)
) -> None:
    server, auth = control_plane
    token = auth.token(subject="dev", roles=["platform_admin"], teams=["team-a"], content=True)
    comparison_id = await a_comparison(server, token)
    trial_id = await a_reported_trial(server)
    pages = Pages(browser, server.url)
    try:
        page = await pages.page()
        await page.goto("/console/login")
        await screenshot(page, "tour-control-plane-login")
        await page.get_by_label("Access token").fill(token)
        await page.get_by_role("button", name="Sign in").click()
        await page.goto("/console/datasets")
        dataset = page.locator("#datasets tbody th a").first
        dataset_path = await dataset.get_attribute("href")
        assert dataset_path
        for path, name, heading in (
            ("/console/live", "live", "Live"), ("/console/results", "results", "Results"),
            ("/console/trials", "trials", "Trials"), (f"/console/trials/{trial_id}", "trial", None),
            ("/console/watches", "watches", "Watches"), ("/console/experiments", "experiments", "Experiments"),
            ("/console/experiments/new", "experiment-new", None),
            ("/console/datasets", "datasets", "Datasets"), (dataset_path, "dataset", None),
            ("/console/comparisons", "comparisons", "Comparisons"),
            (f"/console/comparisons?open={comparison_id}", "comparison-panel", "Comparisons"),
            ("/console/comparisons?new=1", "comparison-new", "Comparisons"),
        ):
            await shoot(page, path, f"tour-control-plane-{name}", heading)
        pages.check_local()
    finally:
        await pages.close()
