"""The console defects a new operator met in the first hour (issue 28, item 5), each checked
where it shows: in a real Chromium, or over HTTP where the defect is the server's answer.
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
from sidecar.console.chart import decision_chart, round_step
from sidecar.console.fmt import usd
from sidecar.console.wording import product_words
from tests.console.conftest import boxes, Pages
from tests.console.test_console_browser import sign_in
from tests.console.test_console_phone import control_plane  # noqa: F401 (a fixture)
from tests.harness import CANDIDATE, INCUMBENT, AuthKit, Harness, exchange

ASYNC = pytest.mark.asyncio(loop_scope="session")

#: A model the config knows without a list price: a trial of it is 422 spend_unbounded.
UNPRICED = "unpriced-model"
UNPRICED_TOML = f'[models."{UNPRICED}"]\nprovider = "local"\n'


@ASYNC
async def test_new_trial_form_keeps_the_input_and_marks_the_field_on_422_and_400(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, auth=True, extra=UNPRICED_TOML) as h:
        assert h.sidecar is not None
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await sign_in(page, h.token(subject="dev", roles=["tenant_admin"], teams=["team-a"]))
            await page.goto("/console/trials/new")
            # Team is a choice of the teams the principal may write, as on Compare.
            await expect(page.locator("select#f-team option")).to_have_text(["team-a"])
            # The advanced fields are grouped, folded away.
            advanced = page.locator("details#advanced")
            await expect(advanced).not_to_have_attribute("open", "")
            await expect(advanced.get_by_label("Judge model")).to_be_hidden()
            await page.get_by_label("Incumbent model").fill(INCUMBENT)
            await page.get_by_label("Candidate model").fill(UNPRICED)
            await page.get_by_label("Spend cap").fill("3")
            await page.get_by_label("Sample rate").fill("0.5")
            response = None
            async with page.expect_response(lambda r: r.request.method == "POST") as posted:
                await page.get_by_role("button", name="Start trial").click()
            response = await posted.value
            assert response.status == 422
            # The form again, the typed input kept, the fields that fix it marked with the message.
            await expect(page.locator("#form-error")).to_contain_text("no list price")
            await expect(page.get_by_label("Candidate model")).to_have_value(UNPRICED)
            await expect(page.get_by_label("Spend cap")).to_have_value("3")
            await expect(page.get_by_label("Sample rate")).to_have_value("0.5")
            await expect(advanced).to_have_attribute("open", "")
            for name in ("Candidate input price", "Candidate output price"):
                field = page.get_by_label(name)
                await expect(field).to_be_visible()
                await expect(field).to_have_attribute("aria-invalid", "true")
            await expect(page.locator("[data-field='candidate_price.input_per_mtok_usd'] .field-error")).to_contain_text(
                "no list price")

            # A 400 in the product's words, at its field.
            await page.get_by_label("Candidate model").fill(CANDIDATE)
            await page.get_by_label("Sample rate").fill("1.5")
            await page.get_by_role("button", name="Start trial").click()
            await expect(page.locator("#form-error")).to_contain_text("Sample rate (0 to 1) must be at most 1.0.")
            await expect(page.locator("#form-error")).not_to_contain_text("Expected")
            await expect(page.locator("[data-field=sample_rate] .field-error")).to_have_text(
                "Sample rate (0 to 1) must be at most 1.0.")
            await page.get_by_label("Sample rate").fill("1")
            await page.get_by_role("button", name="Start trial").click()
            await expect(page).to_have_url(re.compile(r"/console/trials/tr_[0-9a-f]+$"))
        finally:
            await pages.close()


@ASYNC
async def test_viewers_get_no_trial_form_and_an_empty_list_says_no_trials_yet(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        viewer = {"Authorization": f"Bearer {h.token(subject='v', roles=['viewer'], teams=['team-a'])}"}
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url, headers=viewer) as client:
            r = await client.get("/console/trials/new")
            assert r.status_code == 403 and "Start trial" not in r.text
            r = await client.get("/console/trials")
            assert r.status_code == 200 and "No trials yet." in r.text and "No trial matches" not in r.text
            r = await client.get("/console/trials", params={"status": "stopped"})
            assert "No trial matches these filters." in r.text
            r = await client.get("/console/results")
            assert "No trials yet." in r.text


@ASYNC
async def test_the_trial_form_estimates_time_and_cost_at_current_traffic(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None
        trial = await h.create_trial()
        await h.send([exchange(i) for i in range(40)])
        await h.settle(trial["id"], 40)
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as client:
            text = (await client.get("/console/trials/new", params={"sample_rate": "0.5"})).text
        section = text[text.index('id="estimate"'):text.index("</section>", text.index('id="estimate"'))]
        assert "Estimate at current traffic" in section and "exchanges a minute" in section
        assert re.search(r'id="estimate-time">about [\d.]+ (s|min|h|days)<', section), section
        assert re.search(r'id="estimate-cost">\$\d+\.\d{4}<', section), section
        assert "an estimate" in section.lower()


@ASYNC
async def test_favicon_answers_without_a_principal(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as client:
            r = await client.get("/favicon.ico")
            assert r.status_code in (200, 204), r.status_code
            assert (await client.get("/console/static/favicon.svg")).status_code == 200
            assert (await client.get("/v1/trials")).status_code == 401  # nothing else opened
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            statuses: list[tuple[str, int]] = []
            page.on("response", lambda resp: statuses.append((resp.url, resp.status)))
            await sign_in(page, h.token(subject="dev", roles=["tenant_admin"], teams=["team-a"]))
            await page.goto("/console/trials")
            refused = [(u, s) for u, s in statuses if s in (401, 403, 404)]
            assert not refused, refused
        finally:
            await pages.close()


@ASYNC
async def test_teams_says_replay_is_unavailable_without_a_retention_key(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None and h.admin is not None
        posture = (await h.admin.get("/v1/teams/team-a/posture")).json()
        assert posture["prompt_retention"] is True
        assert posture["features"]["replay"]["available"] is False
        assert "retention" in posture["features"]["replay"]["reason"]
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as client:
            text = (await client.get("/console/teams/team-a")).text
        assert re.search(r"replay: unavailable — this sidecar keeps no exchanges", text), text


async def compare_cost(client: httpx.AsyncClient) -> int:
    """Run a compare of the incumbent and the candidate; its spend (known micros, all priced)."""
    body = {"team": "team-a", "messages": [{"role": "user", "content": "hi"}], "models": [INCUMBENT, CANDIDATE]}
    done: dict[str, Any] = {}
    async with client.stream("POST", "/v1/compare", json=body) as r:
        assert r.status_code == 200
        async for line in r.aiter_lines():
            if line.startswith("data: "):
                done = json.loads(line[6:])
    assert done["spend"]["coverage"] == "complete" and done["spend"]["known_micros"] > 0, done
    return int(done["spend"]["known_micros"])


@ASYNC
async def test_live_names_its_spend_tiles_truthfully(tmp_path: Path) -> None:
    async with Harness(tmp_path, never_called=()) as h:  # the compare below asks the incumbent too
        assert h.sidecar is not None and h.admin is not None
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as client:
            text = (await client.get("/console/")).text
        assert "Gateway metered spend today" not in text  # it was only the evaluated cases' exchanges
        assert "Served cost of today's evaluated cases" in text
        assert "Evaluation spend today: trials, watches and Compare" in text
        assert "not counted" not in text  # Compare's spend is kept and counted (issue 28, item 5)
        assert "$0.0000 trials and watches, $0.0000 Compare (0 compares)" in text
        assert "Experiments run on a control plane, not on this sidecar; their spend is on its Live." in text
        # A compare's spend shows in the tile, as its own part of evaluation spend.
        cost = await compare_cost(h.admin)
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as client:
            text = (await client.get("/console/")).text
        assert f"$0.0000 trials and watches, {usd(cost)} Compare (1 compare)" in text
        assert re.search(rf'data-tile="evaluation-spend">\s*{re.escape(usd(cost))}<', text), text


def test_axis_ticks_fall_on_round_numbers() -> None:
    assert [round_step(s) for s in (11, 56, 301, 1101, 5000)] == [2, 10, 100, 200, 1000]
    verdict = {"cases": 250, "decided_at": 180, "tolerance": 0.05, "win_rate": 0.6,
               "decision_bounds": {"lower": 0.52, "upper": 0.7}, "decision_bounds_now": None, "interval": None}
    labels = [int(label) for _, label in decision_chart(verdict).x_ticks]
    assert labels == [0, 50, 100, 150, 200, 250], labels


def test_library_wording_becomes_product_wording() -> None:
    assert product_words("Expected `float` <= 1.0", "Sample rate") == "Sample rate must be at most 1.0."
    assert product_words("Expected `array` of length >= 2", "Models") == "Models must list at least 2 items."
    assert product_words("Expected `float`, got `str`", "Spend cap") == "Spend cap must be a number, got a string."
    assert product_words("candidate model 'x' has no list price") == "candidate model 'x' has no list price"


@ASYNC
async def test_trial_page_legend_funnel_and_paired_card(tmp_path: Path, browser: Any) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None
        trial = await h.create_trial()
        await h.send([exchange(i) for i in range(60)])
        view = await h.settle(trial["id"], 60)
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await page.goto(f"/console/trials/{trial['id']}")
            await expect(page.locator("svg.chart")).to_be_visible()
            # The bar at the latest look is drawn, and the legend names it.
            await expect(page.locator("svg.chart g.mark.bounds")).to_have_count(1)
            await expect(page.locator("#chart-legend [data-key=last-look]")).to_contain_text("latest look")
            # Ticks at round numbers.
            ticks = [int(t) for t in await page.locator("svg.chart text.tick").all_text_contents() if t.isdigit()]
            step = ticks[1] - ticks[0]
            assert all(t % step == 0 for t in ticks) and re.fullmatch(r"[125]0*", str(step)), ticks
            # Only the outcomes with exchanges are rows; the zeros are folded away, and named.
            zero = [o for o, n in view["funnel"]["outcomes"].items() if n == 0]
            assert zero, view["funnel"]
            await expect(page.locator("#funnel tbody tr")).to_have_count(len(view["funnel"]["outcomes"]) - len(zero))
            await expect(page.locator("#funnel-zero summary")).to_have_text(f"{len(zero)} outcomes at zero")
            # Cost and latency: two figures side by side, each with its label, not four squeezed lines.
            cost, latency = page.locator("[data-figure=cost]"), page.locator("[data-figure=latency]")
            await expect(cost.locator(".figure-value")).to_have_text(re.compile(r"^\d+%$"))
            a, b, row = await boxes(page, "[data-figure=cost]", "[data-figure=latency]", ".figures")
            assert a is not None and b is not None and abs(a["y"] - b["y"]) < 2 and a["x"] < b["x"], (a, b, row)
            pages.check_local()
        finally:
            await pages.close()


@ASYNC
async def test_compare_incumbent_is_chosen_one_model_is_worded_and_cards_show_the_judge(
    tmp_path: Path, browser: Any,
) -> None:
    async with Harness(tmp_path, never_called=(), auth=True) as h:
        assert h.sidecar is not None
        pages = Pages(browser, h.sidecar.admin_url)
        try:
            page = await pages.page()
            await sign_in(page, h.token(subject="dev", roles=["developer"], teams=["team-a"], content=True))
            await page.goto("/console/compare")
            await page.get_by_label("Prompt").fill("Tea or coffee?")
            # One model: refused in the product's words, before anything is sent.
            await page.get_by_label("Incumbent (the model served today)").select_option(INCUMBENT)
            await page.get_by_role("button", name="Compare").click()
            await expect(page.locator("#compare-error")).to_contain_text("Choose at least one candidate")
            await expect(page.locator("#compare-error")).not_to_contain_text("Expected")
            # The server's own refusal of one model is worded too.
            csrf = await page.locator("#compare-form").get_attribute("data-csrf")
            one = await page.request.post("/console/compare/stream", headers={"X-CSRF-Token": csrf or ""}, data={
                "team": "team-a", "messages": [{"role": "user", "content": "hi"}], "models": [INCUMBENT]})
            assert one.status == 400 and (await one.json())["error"]["message"] == "Models must list at least 2 models."
            # Clicked candidate first: the incumbent is still the one chosen, shown first.
            await page.get_by_label(CANDIDATE).check()
            await page.get_by_label(INCUMBENT).check()
            await page.get_by_role("button", name="Compare").click()
            cards = page.locator(".answer-col")
            await expect(cards.first).to_have_attribute("data-model", INCUMBENT)
            await expect(page.locator("#compare-status")).to_have_text("Done.", timeout=30_000)
            await expect(cards.first.locator("[data-fact=judge-version]")).to_have_text(re.compile(r"\b[0-9a-f]{12}\b"))
            colour = await page.locator("#compare-status").evaluate("e => getComputedStyle(e).color")
            assert colour == "rgb(17, 99, 41)", colour  # the good colour, not the warning one
            await page.locator("#make-trial").click()
            await expect(page.get_by_label("Incumbent model")).to_have_value(INCUMBENT)
            await expect(page.get_by_label("Candidate model")).to_have_value(CANDIDATE)
            pages.check_local()
        finally:
            await pages.close()


@ASYNC
async def test_datasets_offers_seeding_only_with_retained_exchanges_and_says_why_under_its_card(
    control_plane: tuple[CollectorServer, AuthKit], browser: Any,  # noqa: F811 (the fixture)
) -> None:
    server, auth = control_plane
    pages = Pages(browser, server.url)
    try:
        page = await pages.page()
        await page.goto("/console/login")
        await page.get_by_label("Access token").fill(
            auth.token(subject="dev", roles=["tenant_admin"], teams=["team-a"], content=True))
        await page.get_by_role("button", name="Sign in").click()
        await page.goto("/console/datasets")
        # Retention on, but the control plane holds no exchange of the team: not offered.
        team = page.locator("#seeding [data-team=team-a]")
        await expect(team).to_contain_text("unavailable")
        await expect(team).to_contain_text("no retained exchange")
        await expect(page.get_by_role("button", name="Seed from traffic")).to_be_disabled()
        # A seed forced anyway is refused, and the refusal is shown under the seeding card, not Import.
        csrf = await page.locator("form[action='/console/logout'] input[name=csrf]").input_value()
        await page.evaluate("""csrf => {
            const f = document.createElement('form'); f.method = 'post'; f.action = '/console/datasets/seed';
            for (const [k, v] of Object.entries({csrf, seed_team: 'team-a', seed_name: 'forced'})) {
                const i = document.createElement('input'); i.type = 'hidden'; i.name = k; i.value = v; f.appendChild(i); }
            document.body.appendChild(f); f.submit(); }""", csrf)
        await expect(page.locator("#seed-error")).to_contain_text("no retained exchange")
        await expect(page.locator("#form-error")).to_have_count(0)
        seed_card = await page.locator("section[aria-labelledby=seed-h]").bounding_box()
        error = await page.locator("#seed-error").bounding_box()
        assert seed_card and error and seed_card["y"] <= error["y"] <= seed_card["y"] + seed_card["height"]
    finally:
        await pages.close()
