"""The console on a phone (390×844) and on wide screens, measured in a real Chromium (issue 28, item 6).

Each check reads element boxes at the viewport: the Verdict column is on screen on Live,
Results and Trials; a firing alert's Acknowledge and Resolve are on screen and larger than
Stop watch; chart text renders at 11 px or more; the comparison panel's Close button is
on screen at every width, past 1280 px too.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, AsyncIterator

import httpx
import pytest
import pytest_asyncio
from playwright.async_api import expect

from sidecar.collector.server import CollectorServer
from sidecar.config import load_config
from tests.console.conftest import PHONE, Pages
from tests.harness import CANDIDATE, INCUMBENT, AuthKit, Harness, exchange, write_config
from tests.sidecar.services.test_watches import adoptable_trial, models, served
from uplink.collector_store import Held
from uplink.schema import TrialState, encode_record
from tests.uplink.kit import UplinkKit

pytestmark = pytest.mark.asyncio(loop_scope="session")

#: The smallest chart text a phone should render, in CSS pixels.
MIN_TEXT_PX = 11.0


async def on_screen(page: Any, selector: str, problems: list[str] | None = None) -> dict[str, float]:
    """The element's box, wholly inside the viewport's width (it may be below the fold); a miss is
    added to ``problems`` when given (every check of a test reported at once), else asserted."""
    box = await page.locator(selector).first.bounding_box()
    width = page.viewport_size["width"]
    assert box is not None, f"{selector} is not rendered"
    if not (box["x"] >= 0 and box["x"] + box["width"] <= width + 0.5):
        message = f"{selector} on {page.url} is off screen at {width} px: {box}"
        if problems is None:
            raise AssertionError(message)
        problems.append(message)
    return dict(box)


async def smallest_chart_text(page: Any) -> float:
    """The smallest rendered font size (CSS px) of any text in the page's SVG charts."""
    return float(await page.evaluate("""() => {
        const sizes = Array.from(document.querySelectorAll('svg.chart text')).map(t => {
            const m = t.getScreenCTM();
            return parseFloat(getComputedStyle(t).fontSize) * (m ? Math.hypot(m.a, m.b) : 1);
        });
        return sizes.length ? Math.min(...sizes) : -1;
    }"""))


async def test_phone_verdicts_alert_buttons_and_chart_text(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, models=models(), never_called=()) as h:
        assert h.sidecar is not None and h.admin is not None
        trial_id = await adoptable_trial(h)
        r = await h.admin.post(f"/v1/trials/{trial_id}/promote", json={"daily_cap_usd": 5.0, "sample_rate": 1.0},
                               headers={"Idempotency-Key": "phone-1"})
        assert r.status_code in (200, 201), r.text
        watch_id = r.json()["watch"]["id"] if "watch" in r.json() else r.json()["id"]
        running = await h.create_trial(candidate_model=CANDIDATE, sample_rate=1.0, on_decision="continue")
        await h.send([served(i, 0.4, "drop") for i in range(80)])
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page(viewport=PHONE)
            problems: list[str] = []
            await page.goto("/console/")
            await expect(page.locator(f"a[href='/console/trials/{running['id']}']").first).to_be_visible()
            await on_screen(page, "#main table th:text-is('Verdict')", problems)
            await on_screen(page, "#main table td .verdict", problems)
            # Live (the console's home) lists the running trial; the promoted one has left it.
            for path, table, rows in (("/console/", "#running", 1), ("/console/results", "#traffic", 2),
                                      ("/console/trials", "#trials", 2)):
                await page.goto(path)
                await expect(page.locator(f"{table} tbody tr")).to_have_count(rows)
                await on_screen(page, f"{table} th:text-is('Verdict')", problems)
                await on_screen(page, f"{table} tbody td .verdict", problems)

            await page.goto(f"/console/trials/{trial_id}")
            await expect(page.locator("svg.chart")).to_be_visible()
            if (size := await smallest_chart_text(page)) < MIN_TEXT_PX:
                problems.append(f"the trial chart's text renders at {size:.1f} px")

            await page.goto(f"/console/watches/{watch_id}")
            await expect(page.locator("#detector-state")).to_have_text("Fired", timeout=60_000)
            ack = await on_screen(page, "#ack-alert", problems)
            resolve = await on_screen(page, "#resolve-alert", problems)
            stop = await page.locator("#stop-watch").bounding_box()
            assert stop is not None
            # Prominent: above Stop watch, and larger than it.
            if not (ack["y"] < stop["y"] and resolve["y"] < stop["y"]):
                problems.append(f"Stop watch comes before Acknowledge/Resolve: {stop} {ack} {resolve}")
            if not ack["width"] * ack["height"] > 1.5 * stop["width"] * stop["height"]:
                problems.append(f"Acknowledge is no larger than Stop watch: {ack} {stop}")
            if (size := await smallest_chart_text(page)) < MIN_TEXT_PX:
                problems.append(f"the watch charts' text renders at {size:.1f} px")
            assert not problems, "\n".join(problems)
            pages.check_local()
        finally:
            await pages.close()


@pytest_asyncio.fixture(loop_scope="session")
async def control_plane(tmp_path: Path) -> AsyncIterator[tuple[CollectorServer, AuthKit]]:
    kit, auth = UplinkKit(tmp_path), AuthKit(tmp_path)
    collector = (f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{kit.db}"\naudience = "{kit.cfg.audience}"\n'
                 f'issuers = ["{kit.cfg.issuers[0]}"]\n[[collector.keys]]\nkid = "{kit.cfg.keys[0].kid}"\n'
                 f'path = "{kit.cfg.keys[0].path}"\n')
    path = write_config(tmp_path, "http://127.0.0.1:9", extra=collector, auth=auth.toml())
    config = load_config(str(path), {})
    async with CollectorServer(config.collector, config=config) as server:
        yield server, auth


async def a_comparison(server: CollectorServer, token: str) -> str:
    """A dataset, a suite and an A/B comparison over given answers, through the corpus API."""
    auth = {"Authorization": f"Bearer {token}"}
    rows = "\n".join(json.dumps({"input": f"question {i}", "expected": f"answer {i}"}) for i in range(6)) + "\n"
    async with httpx.AsyncClient(base_url=server.url, headers=auth) as client:
        r = await client.post("/v1/datasets", params={"team": "team-a", "name": "phone-cases", "format": "jsonl"},
                              content=rows.encode(), headers={"Content-Type": "application/x-ndjson"})
        assert r.status_code == 201, r.text
        dataset_id = r.json()["id"]
        r = await client.post("/v1/suites", json={
            "name": "phone-suite", "dataset_id": dataset_id, "dataset_version": 1,
            "metrics": [{"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}}]})
        assert r.status_code == 201, r.text
        suite_id = r.json()["id"]
        items = (await client.get(f"/v1/datasets/{dataset_id}/versions/1/items")).json()["items"]
        r = await client.post("/v1/evaluations/comparisons", headers={"Idempotency-Key": "phone-cmp"}, json={
            "suite_id": suite_id,
            "baseline": {"type": "prompt", "ref": "support-prompt-with-a-rather-long-name", "version": "1"},
            "candidate": {"type": "prompt", "ref": "support-prompt-with-a-rather-long-name", "version": "2"},
            "outputs": {"baseline": {i["id"]: "not it" for i in items},
                        "candidate": {i["id"]: i["expected"] for i in items}}})
        assert r.status_code in (200, 201, 202), r.text
        return str(r.json()["id"])


async def test_the_comparison_panel_close_is_on_screen_at_every_width(
    control_plane: tuple[CollectorServer, AuthKit], browser: Any,
) -> None:
    server, auth = control_plane
    token = auth.token(subject="dev", roles=["tenant_admin"], teams=["team-a"], content=True)
    comparison_id = await a_comparison(server, token)
    pages = Pages(browser, server.url)
    try:
        for width, height in ((390, 844), (1280, 800), (1680, 1050)):
            page = await pages.page(viewport={"width": width, "height": height})
            await page.goto("/console/login")
            await page.get_by_label("Access token").fill(token)
            await page.get_by_role("button", name="Sign in").click()
            await page.goto(f"/console/comparisons?open={comparison_id}")
            panel = page.locator(f"#panel-{comparison_id}")
            await expect(panel).to_be_visible()
            close = await on_screen(page, f"#panel-{comparison_id} [data-panel-close]")
            assert 0 <= close["y"] and close["y"] + close["height"] <= height, close
            # Scrolled to its end, the panel keeps Close in reach.
            await panel.evaluate("p => { p.scrollTop = p.scrollHeight; }")
            close = await on_screen(page, f"#panel-{comparison_id} [data-panel-close]")
            assert 0 <= close["y"] and close["y"] + close["height"] <= height, close
            await page.locator(f"#panel-{comparison_id} [data-panel-close]").click()
            await expect(panel).to_be_hidden()
        pages.check_local()
    finally:
        await pages.close()


async def a_reported_trial(server: CollectorServer) -> str:
    """A trial as a sidecar reported it (its ``trial_state`` record), for the control plane's traffic screens."""
    assert server.store is not None
    state = TrialState(id="trial:tr_phone0123456789:1", trial_id="tr_phone0123456789", team="team-a", revision=1,
                       status="running", at=1.0, incumbent_model="an-incumbent-with-a-long-name",
                       candidate_model="a-candidate-with-a-long-name", execution_site="local",
                       judge_version_id="jv", verdict="Collecting")
    await server.store.put_collected([Held(
        id=state.id, kind="trial_state", sidecar_id="gw-1/sidecar-with-a-long-name", team="team-a",
        trial_id=state.trial_id, exchange_id=None, revision=1, body=encode_record(state), received_at=1.0)])
    return state.trial_id


async def test_control_plane_tables_keep_the_verdict_on_a_phone(
    control_plane: tuple[CollectorServer, AuthKit], browser: Any,
) -> None:
    server, auth = control_plane
    await a_reported_trial(server)
    pages = Pages(browser, server.url)
    try:
        page = await pages.page(viewport=PHONE)
        await page.goto("/console/login")
        await page.get_by_label("Access token").fill(auth.token(subject="dev", roles=["tenant_admin"], teams=["team-a"]))
        await page.get_by_role("button", name="Sign in").click()
        problems: list[str] = []
        for path, table in (("/console/live", "#running"), ("/console/results", "#traffic"),
                            ("/console/trials", "#trials")):
            await page.goto(path)
            await expect(page.locator(f"{table} tbody tr[data-trial]")).to_have_count(1)
            await on_screen(page, f"{table} th:text-is('Verdict')", problems)
            await on_screen(page, f"{table} tbody tr[data-trial] td:nth-child(2)", problems)
        assert not problems, "\n".join(problems)
        pages.check_local()
    finally:
        await pages.close()
