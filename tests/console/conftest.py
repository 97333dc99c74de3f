"""The console's browser fixtures: one headless Chromium for the session, driven by Playwright
(the ``browser`` fixture of tests/conftest.py, launched by :func:`launched_browser`).

The browser is the system's (Debian's ``chromium`` at :data:`CHROMIUM`); Playwright's own
browser download is never used. Without it the browser tests skip, naming the package —
unless ``SHADOWTRIAL_REQUIRE_BROWSER=1`` (set by ``.ci/run``), where they fail instead.

Every page a test opens records the requests it makes (:class:`Pages`), and the test
ends by checking that each went to the sidecar under test on 127.0.0.1: no console
page or asset reaches outside the machine. Screenshots go to ``$SHADOWTRIAL_ARTIFACTS``
(default ``tests/console/artifacts/``, git-ignored), at desktop and phone widths.

Pages are reused from test to test (:class:`Pages`, issue 29): a new browser context and its
first page cost Chromium about 1 s of CPU (a new context, a new renderer process), three page
loads' worth. A test's page is one a finished test handed back, with its cookies cleared, its
listeners and routes removed and its document left for ``about:blank``; so that one page can
serve sidecars on different ports it has no ``base_url``: the page resolves a relative address
against its test's sidecar itself (``goto`` and ``request``; match URLs with a regular
expression, as the tests do).
"""

from __future__ import annotations

import base64
import os
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

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


#: Idle pages of each session's browser (with their contexts), by viewport: see :class:`Pages`.
_IDLE: weakref.WeakKeyDictionary[Any, dict[tuple[int, int], list[Any]]] = weakref.WeakKeyDictionary()


class _Relative:
    """A page's ``request`` (an APIRequestContext) resolving relative addresses against a base URL."""

    def __init__(self, api: Any, base_url: str) -> None:
        self._api, self._base_url = api, base_url

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._api, name)
        if name not in ("get", "post", "put", "patch", "delete", "head", "fetch"):
            return method

        async def call(url: Any, *args: Any, **kw: Any) -> Any:
            return await method(urljoin(self._base_url, url) if isinstance(url, str) else url, *args, **kw)
        return call


def _relative_page_class(page_class: type) -> type:
    class RelativePage(page_class):  # type: ignore[misc]
        """A Playwright page whose ``goto`` and ``request`` resolve "/console/..." against its sidecar."""

        _shadowtrial_base_url: str

        async def goto(self, url: str, **kw: Any) -> Any:
            return await super().goto(urljoin(self._shadowtrial_base_url, url), **kw)

        @property
        def request(self) -> Any:
            return _Relative(super().request, self._shadowtrial_base_url)

    return RelativePage


_RELATIVE_PAGE: dict[type, type] = {}


class _Lent:
    """A reusable page lent to one test: its viewport (the pool's key) and the listeners it had."""

    def __init__(self, key: tuple[int, int], page: Any) -> None:
        self.key, self.page = key, page
        impl = page._impl_obj
        self.listeners = {name: list(impl.listeners(name)) for name in impl.event_names()}

    async def give_back(self) -> None:
        """Remove what the test added (listeners, routes, cookies) and leave the document."""
        impl = self.page._impl_obj
        for name in impl.event_names():
            for listener in impl.listeners(name):
                if listener not in self.listeners.get(name, []):
                    impl.remove_listener(name, listener)
        await self.page.unroute_all(behavior="ignoreErrors")
        await self.page.goto("about:blank")
        if self.page.viewport_size != {"width": self.key[0], "height": self.key[1]}:
            await self.page.set_viewport_size({"width": self.key[0], "height": self.key[1]})
        await self.page.context.clear_cookies()


class Pages:
    """Browser pages opened against one sidecar, with every request they make recorded.

    Each :meth:`page` is in a browser context of its own: a page a finished test gave back
    (the session's browser keeps them, by viewport), or a new one; :meth:`close` gives them back
    (:class:`_Lent`), or closes one that fails to reset. Pages opened by one test are in distinct
    contexts, so two principals signed in side by side stay apart, as before.
    """

    def __init__(self, browser: Any, base_url: str) -> None:
        self.browser = browser
        self.base_url = base_url.rstrip("/")
        self.host = urlsplit(base_url).netloc
        self.requests: list[str] = []
        #: Script errors and console errors (a Content Security Policy violation is one).
        self.errors: list[str] = []
        self.contexts: list[Any] = []
        self._lent: list[_Lent] = []

    async def _reusable(self, viewport: dict[str, int]) -> _Lent:
        key = (viewport["width"], viewport["height"])
        idle = _IDLE.setdefault(self.browser, {}).setdefault(key, [])
        if idle:
            page = idle.pop()
        else:
            page = await (await self.browser.new_context(viewport=viewport)).new_page()
            cls = type(page)
            page.__class__ = _RELATIVE_PAGE.setdefault(cls, _relative_page_class(cls))
        page._shadowtrial_base_url = self.base_url + "/"
        return _Lent(key, page)

    async def page(self, **context_kw: Any) -> Any:
        if set(context_kw) - {"viewport"}:  # other options: a context of its own, closed after
            context = await self.browser.new_context(**{"viewport": DESKTOP, **context_kw}, base_url=self.base_url)
            page = await context.new_page()
        else:
            lent = await self._reusable(context_kw.get("viewport", DESKTOP))
            self._lent.append(lent)
            page, context = lent.page, lent.page.context
        self.contexts.append(context)
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
        lent = {id(one.page.context): one for one in self._lent}
        for context in self.contexts:
            one = lent.get(id(context))
            if one is not None:
                try:
                    await one.give_back()
                except Exception:  # a page that cannot be reset is not reused
                    await context.close()
                else:
                    _IDLE.setdefault(self.browser, {}).setdefault(one.key, []).append(one.page)
            else:
                await context.close()
        self.contexts, self._lent = [], []


async def boxes(page: Any, *selectors: str) -> list[dict[str, float] | None]:
    """The layout boxes of the first match of each selector, read in one step in the page.

    A running trial's page replaces its regions every few seconds; two ``bounding_box()``
    calls can straddle a refresh (the first element detached, or the two from different
    renders). One ``evaluate`` runs between two of the page's own tasks, so the boxes come
    from one render. A selector that matches nothing gives ``None``."""
    found: list[dict[str, float] | None] = await page.evaluate(
        """(selectors) => selectors.map((s) => {
            const e = document.querySelector(s);
            if (!e) { return null; }
            const r = e.getBoundingClientRect();
            return {x: r.x, y: r.y, width: r.width, height: r.height};
        })""",
        list(selectors),
    )
    return found


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
