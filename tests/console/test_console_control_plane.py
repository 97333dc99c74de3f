"""The operator's day on one console, served by the control plane, in Chromium (issue 25).

Two sidecars of one fleet (one real PostgreSQL) run a trial of team-a and report it over
their uplinks to one collector; the collector, with providers (the fake), runs an experiment
of the same team. The operator signs in once at the control plane's console and:

- pins a suite (a dataset version and a paired judge), creates an experiment of two arms,
  reads its readiness (arms, admission), goes Back (the fields kept), launches it, follows its
  progress until it completes, and reads the summary cards, the coverage tables, per-case
  means and ranges and the configuration — all by clicking;
- opens Results: the trial (with both sidecars that reported it) in the traffic list, the
  experiment in the corpus list, each in its own words, no row in both;
- on a sidecar's own console, Results says corpus evidence is at the control plane and links there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import expect

from sidecar.collector.server import CollectorServer
from sidecar.config import load_config
from sidecar.demo.fake_provider import FakeProvider
from tests.console.conftest import Pages, screenshot
from tests.harness import CANDIDATE, INCUMBENT, AuthKit, Harness, exchange, wait_for, write_config
from tests.pg import PostgresServer
from tests.sidecar.collector.corpus.runs_kit import planted_models
from tests.uplink.kit import AUDIENCE, ISSUER, KID, UplinkKit

pytestmark = pytest.mark.asyncio(loop_scope="session")

CORPUS_WORDS = {"Candidate ahead", "Parity", "Candidate behind", "Inconclusive"}
ITEMS = 12
TRAFFIC_WORDS = {"Adoptable", "Adopted", "Rejected", "Collecting", "Inconclusive"}


def collector_config(tmp: Path, kit: UplinkKit, auth: AuthKit, base_url: str) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    table = (f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{kit.db}"\naudience = "{AUDIENCE}"\n'
             f'issuers = ["{ISSUER}"]\n[[collector.keys]]\nkid = "{KID}"\npath = "{kit.public}"\n')
    return write_config(tmp, base_url, extra=table, db="collector-unused.db", auth=auth.toml())


async def test_the_operators_day_on_one_console(tmp_path: Path, browser: Any, pg_server: PostgresServer) -> None:
    dsn = pg_server.create_database()
    kit, auth = UplinkKit(tmp_path), AuthKit(tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fake = FakeProvider(planted_models(), seed=7)
    await fake.start()
    try:
        config = load_config(str(collector_config(tmp_path / "cp", kit, auth, fake.base_url)), {})
        async with CollectorServer(config.collector, config=config) as c:
            console_url = f"{c.url}/console/"
            common: dict[str, Any] = {"store_url": dsn, "refresh_seconds": 0.2}
            uplink = {"console_url": console_url}
            async with Harness(tmp_path / "a", extra=kit.uplink_toml(c.url, sidecar_id="gw-1/a", **uplink), **common) as a, \
                    Harness(tmp_path / "b", extra=kit.uplink_toml(c.url, sidecar_id="gw-1/b", **uplink), **common) as b:
                trial_id = (await a.create_trial(audit_share=0.0))["id"]

                async def b_routes() -> bool:
                    return len(b.runtime.routing.current) == 1

                await wait_for(b_routes, what="the second sidecar to run the trial")
                for start in range(0, 20, 10):
                    await a.send([exchange(i) for i in range(start, start + 5)])
                    await b.send([exchange(i) for i in range(start + 5, start + 10)])
                await a.settle(trial_id, 20)

                async def both_reported() -> bool:
                    reports = [r for r in await c.store.sidecar_reports() if r.trial_id == trial_id]  # type: ignore[union-attr]
                    return ({r.sidecar_id for r in reports} == {"gw-1/a", "gw-1/b"}
                            and sum(r.case_results for r in reports) == 20)

                await wait_for(both_reported, timeout=60, what="both sidecars' reports of the trial at the collector")
                await operators_day(c, auth, browser, trial_id, tmp_path)
                await sidecar_links_to_the_control_plane(a, browser, console_url)
    finally:
        await fake.stop()
        pg_server.drop_database(dsn)


async def sign_in(page: Any, token: str) -> None:
    await page.goto("/console/")
    await expect(page).to_have_url(re.compile(r"/console/login"))
    await page.get_by_label("Access token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Live", exact=True)).to_be_visible()


async def operators_day(c: CollectorServer, auth: AuthKit, browser: Any, trial_id: str, tmp: Path) -> None:
    writer = auth.token(subject="operator", roles=["tenant_admin"], teams=["team-a"], content=True)
    rows = "\n".join(json.dumps({"input": f"question {i}", "expected": f"answer {i}"}) for i in range(ITEMS))
    async with httpx.AsyncClient(base_url=c.url) as client:
        r = await client.post("/v1/datasets", params={"team": "team-a", "name": "support", "format": "jsonl"},
                              content=rows.encode(), headers={"Authorization": f"Bearer {writer}"})
        assert r.status_code == 201, r.text
    pages = Pages(browser, c.url)
    try:
        page = await pages.page()
        await sign_in(page, writer)
        # Live: the trial both sidecars run, across the fleet.
        await expect(page.locator("#running")).to_contain_text(trial_id)
        await expect(page.locator("#running")).to_contain_text("gw-1/a")
        await expect(page.locator("#running")).to_contain_text("gw-1/b")
        # Experiments' spend is here, beside trials' (never summed), and its label says so (issue 28).
        await expect(page.locator("#experiments-spend-label")).to_have_text("Evaluation spend (experiments), beside trials'")
        await expect(page.locator("[data-tile=traffic-spend]")).to_be_visible()
        await screenshot(page, "control-plane-live")

        # Experiments: pin a suite, then two arms, readiness, Back, launch.
        await page.get_by_role("link", name="Experiments", exact=True).click()
        await expect(page.locator("#experiments")).to_contain_text("No experiment yet")
        await page.locator("#new-experiment").click()
        await page.get_by_label("Suite name").fill("support-pref")
        await page.get_by_role("button", name="Pin suite").click()
        await expect(page.get_by_label("Suite", exact=True)).to_contain_text("support-pref v1")
        await page.get_by_label("Arm 1 model").fill(INCUMBENT)
        await page.get_by_label("Arm 2 model").fill(CANDIDATE)
        await page.get_by_label("Arm 2 system prompt").fill("Answer briefly.")
        await page.get_by_role("button", name="Check readiness").click()
        await expect(page.locator("#ready-arms tbody tr")).to_have_count(2)
        await expect(page.locator("#admission")).to_contain_text("Admitted")
        await expect(page.locator("#differences")).to_contain_text("system_prompt")
        await screenshot(page, "experiment-readiness")
        await page.get_by_role("button", name="Back").click()
        await expect(page.get_by_label("Arm 2 model")).to_have_value(CANDIDATE)
        await page.get_by_role("button", name="Check readiness").click()
        await page.get_by_role("button", name="Start experiment").click()
        await expect(page).to_have_url(re.compile(r"/console/experiments/cg_[0-9a-f]+$"))
        experiment_id = page.url.rsplit("/", 1)[1]

        # Follow it (the page refreshes itself) until the run completes, then read it.
        await expect(page.locator("#progress")).to_have_attribute("data-status", "completed", timeout=90_000)
        await expect(page.locator("#progress")).to_contain_text(f"{ITEMS} of {ITEMS} items done, {2 * ITEMS} of {2 * ITEMS} invocations")
        cards = page.locator("#summary-cards [data-card]")
        await expect(cards).to_have_count(6)
        await expect(page.locator("[data-card=generation]")).to_contain_text(f"{ITEMS}/{ITEMS} completed")
        quality = (await page.locator("[data-card=quality] .verdict").inner_text()).strip()
        assert quality in CORPUS_WORDS, quality
        await expect(page.locator("table.coverage")).to_have_count(2)
        await page.locator("#per-case summary").click()
        await expect(page.locator("table.per-case[data-metric=pref] tbody tr")).to_have_count(ITEMS)
        await page.locator("#configuration summary").click()
        await expect(page.locator("#per-case")).to_have_attribute("open", "")  # updates stopped: nothing folds it
        await expect(page.locator("#config-differences")).to_contain_text("system_prompt")
        assert "Adoptable" not in await page.locator("main").inner_text()
        await screenshot(page, "experiment-completed")

        # Results: the two lists, side by side, never interleaved, each in its own words.
        await page.get_by_role("link", name="Results", exact=True).click()
        traffic, corpus = page.locator("#traffic"), page.locator("#corpus")
        await expect(traffic.locator(f"tr[data-trial='{trial_id}']")).to_have_count(1)
        await expect(traffic.locator(f"tr[data-trial='{trial_id}'] .sidecars")).to_contain_text("gw-1/a")
        await expect(traffic.locator(f"tr[data-trial='{trial_id}'] .sidecars")).to_contain_text("gw-1/b")
        await expect(corpus.locator(f"tr[data-experiment='{experiment_id}']")).to_have_count(1)
        assert await traffic.locator(f"tr[data-experiment='{experiment_id}']").count() == 0
        assert await corpus.locator(f"tr[data-trial='{trial_id}']").count() == 0
        assert await page.locator("#traffic #corpus, #corpus #traffic").count() == 0
        traffic_words = {w.strip() for w in await traffic.locator(".verdict").all_inner_texts()}
        corpus_words = {w.strip() for w in await corpus.locator(".verdict").all_inner_texts()}
        assert traffic_words and traffic_words <= TRAFFIC_WORDS, traffic_words
        assert corpus_words == {quality}, corpus_words
        await screenshot(page, "control-plane-results")
        pages.check_local()
    finally:
        await pages.close()


async def sidecar_links_to_the_control_plane(sidecar: Harness, browser: Any, console_url: str) -> None:
    r = await sidecar.admin.get("/v1/results")  # type: ignore[union-attr]
    body = r.json()
    assert body["corpus"] is None and body["corpus_source"]["control_plane_console"] == console_url
    pages = Pages(browser, sidecar.sidecar.admin_url)  # type: ignore[union-attr]
    try:
        page = await pages.page()
        await page.goto("/console/results")
        await expect(page.locator("#corpus-link")).to_have_attribute("href", console_url)
        await expect(page.locator("#control-plane-link")).to_have_attribute("href", console_url)
        # Live's evaluation spend counts Compare here, and says experiments' spend is on the control plane's Live.
        live = (await sidecar.admin.get("/v1/live")).json()["evaluation_spend"]  # type: ignore[union-attr]
        assert live["experiments"]["control_plane_console"] == console_url
        await page.goto("/console/")
        await expect(page.locator("#evaluation-spend-label")).to_have_text("Evaluation spend today: trials, watches and Compare")
        await expect(page.locator("[data-tile=experiments-spend] a")).to_have_attribute("href", console_url)
    finally:
        await pages.close()
