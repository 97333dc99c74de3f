"""The console tests' reused pages (tests/console/conftest.py, :class:`Pages`): a page a test gave
back is lent to the next test with nothing of the first left on it — no cookie (cookies ignore the
port, so a sidecar on another port would receive them), no listener, no route, no document — and
its relative addresses reach the next test's server, not the first's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiohttp import web

from tests.console.conftest import Pages

pytestmark = pytest.mark.asyncio(loop_scope="session")


@asynccontextmanager
async def server(name: str) -> AsyncIterator[str]:
    async def home(request: web.Request) -> web.Response:
        response = web.Response(text=f"<!doctype html><title>{name}</title><p>{name}</p>", content_type="text/html")
        response.set_cookie("session", name)
        return response

    async def echo(request: web.Request) -> web.Response:
        return web.Response(text=f"{name} cookie={request.headers.get('Cookie', '')}")

    app = web.Application()
    app.router.add_get("/", home)
    app.router.add_get("/echo", echo)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_a_page_given_back_carries_nothing_to_the_next_test(browser: Any) -> None:
    async with server("first") as first_url, server("second") as second_url:
        first = Pages(browser, first_url)
        page = await first.page()
        heard: list[str] = []
        page.on("request", lambda request: heard.append(request.url))
        await page.route("**/echo", lambda route: route.fulfill(body="routed"))
        await page.goto("/")
        assert await page.title() == "first" and [c["value"] for c in await page.context.cookies()] == ["first"]
        first.check_local()
        await first.close()

        second = Pages(browser, second_url)
        again = await second.page()
        assert again is page  # the same page, lent again
        assert again.url == "about:blank" and await again.context.cookies() == []
        heard.clear()
        response = await again.goto("/echo")
        assert response is not None and await response.text() == "second cookie="  # no route, no cookie
        assert (await (await again.request.get("/echo")).text()) == "second cookie="
        assert heard == [] and second.requests == [f"{second_url}/echo"]
        second.check_local()
        await second.close()
