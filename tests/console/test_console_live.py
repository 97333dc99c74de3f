"""Live keeps itself current the way the issue asks, in Chromium with the page's clock under
the test's control (Playwright's clock: timers run only when the test advances them).

While the tab is visible the page fetches its fragment every 5 s; hidden, it fetches
nothing however long it stays hidden; shown again, it fetches at once; a transient error
(503) is said on the page and retried after a back-off, and the next success clears it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import expect

from tests.console.conftest import Pages
from tests.harness import Harness

pytestmark = pytest.mark.asyncio(loop_scope="session")

FRAGMENT = "/console/live/fragment"
VISIBILITY = ("hidden => { Object.defineProperty(document, 'hidden', {value: hidden, configurable: true}); "
              "document.dispatchEvent(new Event('visibilitychange')); }")


async def test_live_updates_while_visible_pauses_hidden_and_retries_errors(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await page.clock.install()
            await page.goto("/console/")
            fetched: list[int] = []
            page.on("request", lambda r: fetched.append(1) if r.url.endswith(FRAGMENT) else None)

            async def fetches_after(ms: int) -> int:
                before = len(fetched)
                async with page.expect_response(lambda r: r.url.endswith(FRAGMENT)):
                    await page.clock.run_for(ms)
                return len(fetched) - before

            # Visible: one fetch per 5 s.
            assert await fetches_after(5_100) == 1
            # Hidden: a minute passes, nothing is fetched.
            quiet = len(fetched)
            await page.evaluate(VISIBILITY, True)
            await page.clock.run_for(60_000)
            # A probe the page fetches now: the browser reports requests in order, so once its
            # request is seen, any fragment request the hidden page made has been seen too.
            async with page.expect_request(lambda r: r.url.endswith("/console/static/console.css")):
                await page.evaluate("() => { fetch('/console/static/console.css', {cache: 'no-store'}); }")
            assert len(fetched) == quiet, "a hidden tab fetched"
            # Shown again: at once.
            async with page.expect_response(lambda r: r.url.endswith(FRAGMENT)):
                await page.evaluate(VISIBILITY, False)
                await page.clock.run_for(10)
            # A transient error: said on the page, retried after 10 s (5 s doubled), cleared on success.
            await page.route(f"**{FRAGMENT}", lambda route: route.fulfill(status=503, body="down"))
            async with page.expect_response(lambda r: r.url.endswith(FRAGMENT) and r.status == 503):
                await page.clock.run_for(5_100)
            await expect(page.locator("#live-status")).to_contain_text("Update failed (status 503); retrying in 10 s")
            await page.unroute(f"**{FRAGMENT}")
            await page.clock.run_for(5_000)  # still inside the back-off: no fetch yet
            async with page.expect_response(lambda r: r.url.endswith(FRAGMENT) and r.status == 200):
                await page.clock.run_for(5_100)
            await expect(page.locator("#live-status")).to_have_text("")
            pages.check_local()
        finally:
            await pages.close()
