"""``shadowtrial demo`` prints its console's address and a development login that the console accepts."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from sidecar.demo.scenario import run_demo
from tests.harness import wait_for

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


async def test_demo_prints_a_console_address_and_a_login_that_works(capsys: pytest.CaptureFixture[str]) -> None:
    task = asyncio.create_task(run_demo(exchanges=600, seed=11, time_budget_s=20.0, hold=True))
    printed = ""

    async def held() -> bool:
        nonlocal printed
        printed += capsys.readouterr().out
        assert not task.done(), f"the demo ended early: {printed[-500:]}"
        return "The sidecar stays up" in printed

    try:
        await wait_for(held, timeout=60, what="the demo's verdict and its held console")
        console = re.search(r"^console  (http://127\.0\.0\.1:\d+)/console/", printed, re.M)
        login = re.search(r"^login .*\n\s+(\S+\.\S+\.\S+)$", printed, re.M)
        trial = re.search(r"/console/trials/(tr_[0-9a-f]+)", printed)
        assert console and login and trial, printed[:1000]
        async with httpx.AsyncClient(base_url=console.group(1)) as browser:
            form = await browser.get("/console/login")
            csrf = CSRF.search(form.text)
            assert csrf
            signed = await browser.post("/console/login", data={"token": login.group(1), "csrf": csrf.group(1),
                                                                 "next": f"/console/trials/{trial.group(1)}"})
            assert signed.status_code == 303
            page = await browser.get(signed.headers["location"])
            # The demo's trial stops on its decision (issue 26's default): running until then, decided after.
            assert page.status_code == 200 and re.search(r'id="trial-state">(running|decided)<', page.text)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
