"""The trial page shows the expected cases, and cost, to a decision at the trial's settings (issue 31)."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from policies import forecast
from tests.harness import Harness, exchange


async def test_the_trial_page_shows_expected_cases_and_cost_to_a_decision(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None
        trial = await h.create_trial()
        await h.send([exchange(i) for i in range(25)])
        view = await h.settle(trial["id"], 25)
        v = view["verdict"]
        assert v["decision_method"] == "betting" and "betting confidence sequence" in v["decision_kind"]
        rows = {f["win_rate"]: f for f in v["forecast"]}
        # Tolerance 0.05: at a true 0.60 Adoptable needs a margin of 0.15 over 0.45, better 0.05 over 0.55.
        (a_med, a_p90), (b_med, b_p90) = forecast.MEASURED[0.15], forecast.MEASURED[0.05]
        assert rows[0.6]["adoptable_cases"] == {"median": a_med, "p90": a_p90}
        assert rows[0.6]["candidate_better_cases"] == {"median": b_med, "p90": b_p90}
        assert rows[0.5]["candidate_better_cases"] is None
        per_case = view["spend"]["charged_micros"] / v["cases"]
        assert rows[0.6]["adoptable_cost_micros"] == {"median": round(a_med * per_case), "p90": round(a_p90 * per_case)}
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as browser:
            page = (await browser.get(f"/console/trials/{trial['id']}")).text
        table = re.search(r'<table class="small" id="forecast">(.*?)</table>', page, re.S)
        assert table, "the forecast table is on the trial page"
        text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", table.group(1)))
        assert "Expected cases" in text and "20-case floor" in text
        row = rf"60(\.0)?% {a_med} \({a_p90}\), \$[\d.]+ \(\$[\d.]+\) {b_med} \({b_p90}\)"
        assert re.search(row, text), text
