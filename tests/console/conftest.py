"""The console's browser fixtures: one headless Chromium for the session, driven by Playwright
(the ``browser`` fixture of tests/conftest.py, launched by :func:`launched_browser`).

The browser is the system's (Debian's ``chromium`` at :data:`CHROMIUM`); Playwright's own
browser download is never used. Without it the browser tests skip, naming the package —
unless ``SHADOWTRIAL_REQUIRE_BROWSER=1`` (set by ``.ci/run``), where they fail instead.

Every page a test opens records the requests it makes (:class:`Pages`), and the test
ends by checking that each went to the sidecar under test on 127.0.0.1: no console
page or asset reaches outside the machine. Screenshots go to ``$SHADOWTRIAL_ARTIFACTS``
(default ``tests/console/artifacts/``, git-ignored), at desktop and phone widths.
"""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

CHROMIUM = "/usr/bin/chromium"
INSTALL_HINT = "no Chromium at /usr/bin/chromium: apt-get install -y --no-install-recommends chromium"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


def artifacts_dir() -> Path:
    path = Path(os.environ.get("SHADOWTRIAL_ARTIFACTS") or Path(__file__).parent / "artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_browser() -> None:
    if not os.path.exists(CHROMIUM):
        if os.environ.get("SHADOWTRIAL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"{INSTALL_HINT} (SHADOWTRIAL_REQUIRE_BROWSER=1 requires it)")
        pytest.skip(INSTALL_HINT)


@asynccontextmanager
async def launched_browser() -> AsyncIterator[Any]:
    """The session's Chromium (the ``browser`` fixture, defined in tests/conftest.py so that the
    console's tests and the integrations' share one browser per session)."""
    require_browser()
    from playwright.async_api import async_playwright

    async with async_playwright() as pw:
        chromium = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                            args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            yield chromium
        finally:
            await chromium.close()


class Pages:
    """Browser contexts opened against one sidecar, with every request they make recorded."""

    def __init__(self, browser: Any, base_url: str) -> None:
        self.browser = browser
        self.base_url = base_url.rstrip("/")
        self.host = urlsplit(base_url).netloc
        self.requests: list[str] = []
        #: Script errors and console errors (a Content Security Policy violation is one).
        self.errors: list[str] = []
        self.contexts: list[Any] = []

    async def page(self, **context_kw: Any) -> Any:
        context = await self.browser.new_context(**{"viewport": DESKTOP, **context_kw}, base_url=self.base_url)
        self.contexts.append(context)
        page = await context.new_page()
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))
        page.on("console", lambda msg: self.errors.append(f"console: {msg.text}") if msg.type == "error" else None)
        page.set_default_timeout(30_000)
        return page

    def check_local(self) -> None:
        """Every request went to the sidecar under test, on loopback; no page logged an error."""
        assert self.requests, "no request was recorded"
        strangers = [u for u in self.requests if urlsplit(u).netloc != self.host or urlsplit(u).hostname != "127.0.0.1"]
        assert not strangers, f"console pages reached beyond the sidecar: {strangers}"
        # A refused write's page (403, 404) is logged by Chromium as a failed resource load; nothing else may be.
        errors = [e for e in self.errors if "Failed to load resource" not in e]
        assert not errors, f"the console's pages logged errors: {errors}"

    async def close(self) -> None:
        for context in self.contexts:
            await context.close()


async def screenshot(page: Any, name: str) -> list[Path]:
    """``NAME-desktop.png`` and ``NAME-phone.png`` of the page as it is, full length.

    Taken through the DevTools protocol with ``optimizeForSpeed`` (issue 29): Chromium encodes
    the PNG with its fastest compression (the same lossless pixels, a larger file), about a third
    less of the browser's CPU than Playwright's own screenshot of the full page. The width the
    page is at is photographed first, so the viewport changes as little as it can; the page is
    left at the desktop width, as before.
    """
    out = artifacts_dir()
    sizes = [("desktop", DESKTOP), ("phone", PHONE)]
    if page.viewport_size == PHONE:
        sizes.reverse()
    paths = []
    cdp = await page.context.new_cdp_session(page)
    try:
        for label, size in sizes:
            if page.viewport_size != size:
                await page.set_viewport_size(size)
            content = (await cdp.send("Page.getLayoutMetrics"))["cssContentSize"]
            clip = {"x": 0, "y": 0, "width": content["width"], "height": content["height"], "scale": 1}
            shot = await cdp.send("Page.captureScreenshot", {
                "format": "png", "clip": clip, "captureBeyondViewport": True, "optimizeForSpeed": True})
            path = out / f"{name}-{label}.png"
            path.write_bytes(base64.b64decode(shot["data"]))
            paths.append(path)
    finally:
        await cdp.detach()
    if page.viewport_size != DESKTOP:
        await page.set_viewport_size(DESKTOP)
    return paths
