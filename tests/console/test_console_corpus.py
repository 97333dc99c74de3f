"""Datasets and Comparisons, served by the control plane (``shadowtrial collector``), in Chromium.

The collector runs with a config (its ``[auth]`` the admin API's JWTs), which mounts the
console's corpus pages at ``/console/``. A writer imports a dataset from a file (the
upload reports progress; a refused file names its line), reads its versions and items
(as text), sees seeding from traffic offered or unavailable with each team's reason, and creates a
comparison (the A/B API's, over given answers) in the *New comparison* panel (the API's ``comparison_invalid`` field named
first); the detail side panel opens from the keyboard, Escape closes it and focus
returns to the row. A viewer sees no write control and a forged write is refused.
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
from tests.console.conftest import Pages, screenshot
from tests.harness import CANDIDATE, INCUMBENT, AuthKit, write_config
from uplink.collector_store import Held
from tests.store.factories import trial
from tests.uplink.kit import UplinkKit
from uplink.schema import ExchangeRecord, encode_record

pytestmark = pytest.mark.asyncio(loop_scope="session")


@pytest_asyncio.fixture(loop_scope="session")
async def control_plane(tmp_path: Path) -> AsyncIterator[tuple[CollectorServer, AuthKit]]:
    kit, auth = UplinkKit(tmp_path), AuthKit(tmp_path)
    collector = (f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{kit.db}"\naudience = "{kit.cfg.audience}"\n'
                 f'issuers = ["{kit.cfg.issuers[0]}"]\n[[collector.keys]]\nkid = "{kit.cfg.keys[0].kid}"\n'
                 f'path = "{kit.cfg.keys[0].path}"\n[teams.team-r]\nprompt_retention = false\n')
    # No model is ever called here: the provider's address is a closed port.
    path = write_config(tmp_path, "http://127.0.0.1:9", extra=collector, auth=auth.toml())
    config = load_config(str(path), {})
    async with CollectorServer(config.collector, config=config) as server:
        yield server, auth


async def sign_in(page: Any, token: str) -> None:
    await page.goto("/console/datasets")
    await expect(page).to_have_url(re.compile(r"/console/login"))
    await page.get_by_label("Access token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Datasets", exact=True)).to_be_visible()


async def test_import_a_dataset_and_create_a_comparison(control_plane: tuple[CollectorServer, AuthKit],
                                                        tmp_path: Path, browser: Any) -> None:
    server, auth = control_plane
    pages = Pages(browser, server.url)
    try:
        page = await pages.page()
        writer = auth.token(subject="dev", roles=["tenant_admin"], teams=["team-a", "team-r"], content=True)
        await sign_in(page, writer)
        seeding = page.locator("#seeding")
        await expect(seeding.locator("[data-team=team-r]")).to_contain_text("unavailable")
        await expect(seeding.locator("[data-team=team-r]")).to_contain_text("retention")
        await expect(seeding.locator("[data-team=team-a]")).to_contain_text("available")

        bad = tmp_path / "broken.jsonl"
        bad.write_text('{"input": "fine"}\n{"input": \n')
        await page.get_by_label("Name", exact=True).fill("hard-cases")
        await page.get_by_label("File").set_input_files(str(bad))
        await page.get_by_role("button", name="Import").click()
        await expect(page.locator("#import-error")).to_contain_text("invalid_dataset")
        await expect(page.locator("#import-error")).to_contain_text("line 2")
        await expect(page.locator("#import-progress")).to_have_js_property("value", 100)
        await screenshot(page, "datasets-import-refused")

        good = tmp_path / "hard-cases.jsonl"
        rows = [{"input": f"question {i}", "expected": f"answer {i}", "tags": ["hard"] if i % 2 else []}
                for i in range(30)]
        rows.append({"input": "<b>bold</b> & <script>alert(1)</script>", "expected": "<i>x</i>"})
        good.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        await page.get_by_label("File").set_input_files(str(good))
        await page.get_by_role("button", name="Import").click()
        await expect(page).to_have_url(re.compile(r"/console/datasets/ds_[0-9a-f]+\?imported=1$"))
        dataset_id = page.url.split("/datasets/")[1].split("?")[0]
        await expect(page.locator("#imported")).to_contain_text("31 item(s)")
        await expect(page.locator("#versions tbody tr")).to_have_count(1)
        await expect(page.locator("#items tbody tr")).to_have_count(31)
        # Content is text: the markup in an item is shown, never made into elements.
        await expect(page.locator("#items")).to_contain_text("<script>alert(1)</script>")
        assert await page.locator("#items b, #items script, #items i").count() == 0
        await screenshot(page, "dataset")
        await page.get_by_role("link", name="Datasets", exact=True).click()
        await expect(page.locator("#datasets tbody tr")).to_have_count(1)
        await screenshot(page, "datasets")

        # A suite over the dataset, through the corpus API (the console has no suite screen), and the
        # answers the two sides gave (scored as given: no model is called for an A/B over outputs).
        async with httpx.AsyncClient(base_url=server.url) as client:
            r = await client.post("/v1/suites", headers={"Authorization": f"Bearer {writer}"}, json={
                "name": "hard-suite", "dataset_id": dataset_id, "dataset_version": 1,
                "metrics": [{"name": "exact", "kind": "grader", "grader": {"type": "exact_match"}}]})
            assert r.status_code == 201, r.text
            suite_id = r.json()["id"]
            items = (await client.get(f"/v1/datasets/{dataset_id}/versions/1/items", params={"limit": 100},
                                      headers={"Authorization": f"Bearer {writer}"})).json()["items"]
        outputs = json.dumps({"baseline": {i["id"]: "not it" for i in items},
                              "candidate": {i["id"]: i["expected"] or "" for i in items}})
        baseline = json.dumps({"type": "prompt", "ref": "support-prompt", "version": "1"})
        candidate = json.dumps({"type": "prompt", "ref": "support-prompt", "version": "2"})

        await page.get_by_role("link", name="Comparisons").click()
        await expect(page.locator("#empty")).to_contain_text("No comparison")
        await screenshot(page, "comparisons-empty")
        await page.locator("#new-comparison-empty").click()
        panel = page.locator("#new-panel")
        await expect(panel).to_be_visible()
        await screenshot(page, "comparison-new")
        await page.locator("#n-baseline").fill(baseline)
        await page.locator("#n-candidate").fill(candidate)
        await page.get_by_label("Tolerance").fill("1.5")
        await page.get_by_label("Outputs").fill(outputs)
        await page.get_by_role("button", name="Start the comparison").click()
        await expect(page.locator("#comparison-error")).to_contain_text("comparison_invalid")
        await expect(page.locator("#error-field")).to_have_text("$.tolerance")
        await expect(page.get_by_label("Tolerance")).to_have_attribute("aria-invalid", "true")
        await expect(page.locator("#n-baseline")).to_have_value(baseline)
        await page.get_by_label("Tolerance").fill("0.05")
        await page.get_by_role("button", name="Start the comparison").click()
        await expect(page).to_have_url(re.compile(r"/console/comparisons\?open=cmp_[0-9a-f]+$"))
        comparison_id = page.url.rsplit("=", 1)[1]
        detail = page.locator(f"#panel-{comparison_id}")
        await expect(detail).to_be_visible()
        await expect(detail.locator("table.metrics thead th")).to_have_text(
            ["Metric", "Baseline", "Candidate", "Delta", "Comparator", "Threshold"])
        await expect(detail.locator("table.metrics tbody tr")).to_have_count(1)
        for _ in range(50):  # the run scores the given answers; the page shows it once reloaded
            if "Candidate better" in (await detail.inner_text()):
                break
            await page.reload()
            detail = page.locator(f"#panel-{comparison_id}")
        await expect(detail).to_contain_text("Candidate better")
        await screenshot(page, "comparison-detail")
        await page.keyboard.press("Escape")
        await expect(detail).to_be_hidden()
        row = f"tr[data-row='{comparison_id}']"
        assert await page.evaluate(f"!!document.activeElement.closest(\"{row}\")"), "focus did not return to the row"
        # The keyboard opens it again from the row; Escape closes it; focus is back on the row.
        await page.keyboard.press("Enter")
        await expect(detail).to_be_visible()
        assert await page.evaluate("document.activeElement.getAttribute('role')") == "dialog"
        await page.keyboard.press("Escape")
        await expect(detail).to_be_hidden()
        assert await page.evaluate(f"!!document.activeElement.closest(\"{row}\")")

        table = page.locator("#comparisons")
        await expect(table.locator("tbody tr")).to_have_count(1)
        await expect(table.locator("thead th")).to_have_text(["Id", "Suite", "Baseline", "Candidate", "Verdict",
                                                               "Created"])
        await expect(table.locator("tbody tr").first).to_contain_text("prompt support-prompt @2")
        await page.locator("#flt-suite").select_option(label="hard-suite (team-a)")
        await page.get_by_role("button", name="Filter").click()
        await expect(table.locator("tbody tr")).to_have_count(1)
        await screenshot(page, "comparisons")

        # A viewer: the table, no write control; a forged write is refused.
        viewer = await pages.page()
        await sign_in(viewer, auth.token(subject="watcher", roles=["viewer"], teams=["team-a"]))
        await expect(viewer.locator("#import-form")).to_have_count(0)
        await viewer.goto(f"/console/datasets/{dataset_id}")
        await expect(viewer.locator("#items-hidden")).to_contain_text("content permission")
        await viewer.goto("/console/comparisons")
        await expect(viewer.locator("#comparisons tbody tr")).to_have_count(1)
        await expect(viewer.locator("#new-comparison, #new-panel")).to_have_count(0)
        await screenshot(viewer, "viewer-comparisons")
        csrf = await viewer.locator("form[action='/console/logout'] input[name=csrf]").input_value()
        forged = await viewer.request.post("/console/comparisons", form={
            "csrf": csrf, "suite_id": suite_id, "baseline": baseline, "candidate": candidate, "outputs": outputs,
            "request_key": "k-1"})
        text = await forged.text()
        assert forged.status == 403 and "forbidden" in text and "not change them" in text
        no_token = await viewer.request.post("/console/comparisons", form={"tolerance": "0.1"})
        assert no_token.status == 403 and "csrf_failed" in await no_token.text()
        upload = await viewer.request.post("/console/datasets", multipart={
            "csrf": csrf, "team": "team-a", "name": "sneaky",
            "file": {"name": "x.jsonl", "mimeType": "application/x-ndjson", "buffer": b'{"input": "x"}\n'}})
        assert upload.status == 403
        async with httpx.AsyncClient(base_url=server.url) as client:
            listed = await client.get("/v1/datasets", headers={"Authorization": f"Bearer {writer}"})
            assert [d["name"] for d in listed.json()["datasets"]] == ["hard-cases"]
            # An A/B comparison is a group too: the groups' list and view read it (a 500 before).
            groups = await client.get("/v1/comparisons", headers={"Authorization": f"Bearer {writer}"})
            assert groups.status_code == 200, groups.text
            assert [(g["id"], g["kind"]) for g in groups.json()["comparisons"]] == [(comparison_id, "ab")]
            one = await client.get(f"/v1/comparisons/{comparison_id}", headers={"Authorization": f"Bearer {writer}"})
            assert one.status_code == 200, one.text
        pages.check_local()
    finally:
        await pages.close()


async def test_a_failed_read_offers_retry(tmp_path: Path) -> None:
    """The comparisons read fails (the store is gone): the page stays, says so, and offers Retry."""
    import time

    from aiohttp import web

    from sidecar.collector.corpus.pages import corpus_console_app
    from sidecar.collector.corpus.api import Services
    from sidecar.collector.corpus.context import CorpusContext
    from sidecar.collector.store import make_collector_store
    from tests.sidecar.collector.corpus.corpus_kit import DEFAULTS

    store = make_collector_store(str(tmp_path / "c.db"))
    await store.open()
    ctx = CorpusContext(store=store, clock=time.time, resolve=lambda m: (_ for _ in ()).throw(LookupError(m)),
                        defaults=DEFAULTS, default_retention=lambda team: True)
    root = web.Application()
    root.add_subapp("/console", corpus_console_app(Services(ctx), None, None))  # authentication off
    runner = web.AppRunner(root, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}") as client:
            ok = await client.get("/console/comparisons")
            assert ok.status_code == 200 and "No comparison" in ok.text and 'id="new-comparison-empty"' in ok.text
            await store.close()
            failed = await client.get("/console/comparisons?suite=su_1")
            assert failed.status_code == 503 and "could not be read" in failed.text
            assert 'id="retry" href="/console/comparisons?suite=su_1"' in failed.text
    finally:
        await runner.cleanup()


async def test_seed_a_dataset_from_the_traffic_the_control_plane_holds(
    control_plane: tuple[CollectorServer, AuthKit], browser: Any,
) -> None:
    """A cut-over team's forwarded exchanges seed a dataset by clicking; a retention-off team
    is offered no seeding form at all."""
    server, auth = control_plane
    assert server.store is not None
    await server.store.create_trial(trial("cp-a", team="team-a", execution_site="control_plane"))
    await server.store.put_collected([
        Held(id=f"exchange:cp-a:ex-{i}", kind="exchange", sidecar_id="gw-1/s", team="team-a", trial_id="cp-a",
                  exchange_id=f"ex-{i}", revision=None, body=encode_record(ExchangeRecord(
                      id=f"exchange:cp-a:ex-{i}", trial_id="cp-a", team="team-a", exchange_id=f"ex-{i}",
                      gateway="gw-1", model=INCUMBENT,
                      request={"messages": [{"role": "user", "content": f"question {i}"}], "params": {}},
                      response={"content": f"served answer {i}", "usage": {"input_tokens": 5, "output_tokens": 5}},
                  )), received_at=1.0)
        for i in range(7)
    ])
    pages = Pages(browser, server.url)
    try:
        page = await pages.page()
        await sign_in(page, auth.token(subject="dev", roles=["tenant_admin"], teams=["team-a", "team-r"],
                                       content=True))
        team = page.get_by_label("Team to seed from")
        await expect(team.locator("option")).to_have_count(1)  # team-r keeps no traffic: not offered
        await page.get_by_label("Name of the seeded dataset").fill("from-traffic")
        await page.get_by_role("button", name="Seed from traffic").click()
        await expect(page).to_have_url(re.compile(r"/console/datasets/ds_"))
        await expect(page.get_by_text("served answer 6")).to_be_visible()
        await screenshot(page, "dataset-seeded")
    finally:
        await pages.close()
