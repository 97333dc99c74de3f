"""Results rows of paused trials offer Resume and Stop where the role allows (issue 26, item 4),
and Stop asks first, as it does on the trial page. Plain HTTP against a real sidecar."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx

from tests.harness import Harness

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


def csrf_of(html: str) -> str:
    match = CSRF.search(html)
    assert match, "no CSRF field on the page"
    return match.group(1)


async def test_a_paused_results_row_offers_resume_and_stop_to_a_writer_only(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        paused = (await h.create_trial())["id"]
        running = (await h.create_trial())["id"]
        await h.runtime.store.set_trial_status(paused, "posture_changed", "the team's posture changed",
                                               ended=False, now=time.time())
        writer = {"Authorization": f"Bearer {h.token(subject='dev', roles=['developer'], teams=['team-a'])}"}
        viewer = {"Authorization": f"Bearer {h.token(roles=['viewer'], teams=['team-a'])}"}
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url, headers=writer) as browser:
            page = await browser.get("/console/results")
            assert page.status_code == 200, page.text
            assert f'data-resume="{paused}"' in page.text and f'data-stop="{paused}"' in page.text
            assert f'data-resume="{running}"' not in page.text and f'data-stop="{running}"' not in page.text
            row = page.text[page.text.index(f'/trials/{paused}"'):]
            assert "Paused" in row[:row.index("</tr>")]
            token = csrf_of(page.text)
            # Stop asks first: the row's button answers the confirmation page, and nothing stops.
            ask = await browser.post(f"/console/trials/{paused}/stop", data={"csrf": token})
            assert ask.status_code == 200 and 'id="confirm-stop-trial"' in ask.text
            assert (await h.trial(paused))["status"] == "posture_changed"
            # Resume runs it again.
            resumed = await browser.post(f"/console/trials/{paused}/resume", data={"csrf": token})
            assert resumed.status_code == 303, resumed.text
            assert (await h.trial(paused))["status"] == "running"
        await h.runtime.store.set_trial_status(paused, "starter_unauthorized", "the starter lost the right",
                                               ended=False, now=time.time())
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url, headers=viewer) as reader:
            page = await reader.get("/console/results")
            assert page.status_code == 200 and f"/trials/{paused}" in page.text
            assert "data-resume=" not in page.text and "data-stop=" not in page.text, "a viewer may not"
