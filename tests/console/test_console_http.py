"""The console over plain HTTP (no browser): who gets in, CSRF, HTML errors, escaping, headers.

These run everywhere; the browser tests (test_console_browser.py) need Chromium.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx

from tests.harness import Harness, exchange

CSRF = re.compile(r'name="csrf" value="([0-9a-f]{64})"')


def csrf_of(html: str) -> str:
    match = CSRF.search(html)
    assert match, "no CSRF field on the page"
    return match.group(1)


async def test_console_needs_a_principal_and_the_api_is_unchanged(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as anon:
            r = await anon.get("/console/trials")
            assert r.status_code == 303 and r.headers["location"] == "/console/login?next=/console/trials"
            assert (await anon.get("/console/live/fragment")).status_code == 401
            assert (await anon.get("/console/static/console.css")).status_code == 200
            assert (await anon.get("/console/static/console.js")).status_code == 200
            assert (await anon.get("/console")).headers["location"] == "/console/"
            login = await anon.get("/console/login")
            assert login.status_code == 200 and "Access token" in login.text
            api = await anon.get("/v1/trials")
            assert api.status_code == 401 and api.json()["error"]["code"] == "unauthorized"
            missing = await anon.get("/v1/console")
            assert missing.status_code == 401  # the API's own paths still demand a token
            # A bearer header (an authenticating proxy, a script) is the same principal as on the API.
            viewer = {"Authorization": f"Bearer {h.token(roles=['viewer'], teams=['team-a'])}"}
            page = await anon.get("/console/trials", headers=viewer)
            assert page.status_code == 200 and "New trial" not in page.text
            bad = await anon.get("/console/trials", headers={"Authorization": "Bearer nope"})
            assert bad.status_code == 401 and "text/html" in bad.headers["content-type"]


async def test_login_sets_a_strict_httponly_cookie_and_expiry_ends_it(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as browser:
            form = await browser.get("/console/login?next=/console/trials")
            token = h.token(subject="dev", roles=["developer"], teams=["team-a"])
            no_csrf = await browser.post("/console/login", data={"token": token})
            assert no_csrf.status_code == 403 and "csrf_failed" in no_csrf.text
            refused = await browser.post("/console/login", data={"token": "x.y.z", "csrf": csrf_of(form.text)})
            assert refused.status_code == 401 and "Sign-in refused" in refused.text
            ok = await browser.post("/console/login", data={
                "token": token, "csrf": csrf_of(form.text), "next": "/console/trials"})
            assert ok.status_code == 303 and ok.headers["location"] == "/console/trials"
            cookie = ok.headers["set-cookie"]
            assert "shadowtrial_session=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
            assert "Path=/console" in cookie
            page = await browser.get("/console/trials")
            assert page.status_code == 200 and "New trial" in page.text and "dev" in page.text
            # Only a console path is somewhere to go after signing in.
            away = await browser.post("/console/login", data={
                "token": token, "csrf": csrf_of(form.text), "next": "//evil.example/x"})
            assert away.headers["location"] == "/console/"
            # An expired token in the cookie ends the session: back to the login form, cookie cleared.
            expired = h.token(subject="dev", roles=["developer"], teams=["team-a"], ttl_s=-120)
            browser.cookies.set("shadowtrial_session", expired, domain="127.0.0.1", path="/console")
            gone = await browser.get("/console/trials")
            assert gone.status_code == 303 and "reason=expired" in gone.headers["location"]
            assert 'shadowtrial_session=""' in gone.headers["set-cookie"]


async def test_writes_need_the_csrf_token_and_the_same_origin(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:  # authentication off: the demo's case
        assert h.sidecar is not None
        trial = await h.create_trial()
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as browser:
            page = await browser.get(f"/console/trials/{trial['id']}")
            assert 'id="stop-trial"' in page.text
            token = csrf_of(page.text)
            stop = f"/console/trials/{trial['id']}/stop"
            assert (await browser.post(stop, data={})).status_code == 403
            assert (await browser.post(stop, data={"csrf": token},
                                       headers={"Origin": "http://evil.example"})).status_code == 403
            async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as other:  # another browser's token
                assert (await other.post(stop, data={"csrf": token})).status_code == 403
            assert (await h.trial(trial["id"]))["status"] == "running"
            # Irreversible: the first post only asks (issue 26, item 4); the confirmation acts.
            asked = await browser.post(stop, data={"csrf": token})
            assert asked.status_code == 200 and 'id="confirm-stop-trial"' in asked.text
            assert (await h.trial(trial["id"]))["status"] == "running"
            done = await browser.post(stop, data={"csrf": token, "confirm": "yes"})
            assert done.status_code == 303
            assert (await h.trial(trial["id"]))["status"] == "stopped"
            again = await browser.post(stop, data={"csrf": token, "confirm": "yes"})
            assert again.status_code == 409 and "trial_not_running" in again.text


async def test_bad_input_is_an_html_4xx_never_a_5xx(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as browser:
            token = csrf_of((await browser.get("/console/trials/new")).text)
            for path, status in (("/console/results?since=yesterday", 400), ("/console/results?status=bogus", 400),
                                 ("/console/trials?team=a%01b", 400), ("/console/trials/tr_missing", 404),
                                 ("/console/teams/%01", 400), ("/console/no-such-page", 404)):
                r = await browser.get(path)
                assert r.status_code == status, (path, r.status_code)
                assert r.headers["content-type"].startswith("text/html"), path
            for data in ({"team": "team-a"}, {"team": "team-a", "incumbent_model": "m", "candidate_model": "c",
                                              "spend_cap_usd": "lots"},
                         {"team": "team-a", "incumbent_model": "m", "candidate_model": "c", "spend_cap_usd": "1",
                          "candidate_price.input_per_mtok_usd": "-1"}):
                r = await browser.post("/console/trials", data={**data, "csrf": token})
                assert 400 <= r.status_code < 500 and 'role="alert"' in r.text, (data, r.status_code)
            posture = await browser.post("/console/teams/team-a", data={"csrf": token, "revision": "nope"})
            assert posture.status_code == 400
            api = await browser.get("/v1/trials/tr_missing")
            assert api.json()["error"]["code"] == "not_found"  # the API keeps its JSON shape


async def test_names_are_text_never_html_and_pages_load_nothing_foreign(tmp_path: Path) -> None:
    team = '<img src=x onerror="alert(1)">'
    async with Harness(tmp_path) as h:
        assert h.sidecar is not None
        trial = await h.create_trial(team=team)
        await h.send([exchange(i, team=team) for i in range(5)])
        await h.settle(trial["id"], 5)
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url) as browser:
            for path in ("/console/", "/console/trials", "/console/results", f"/console/trials/{trial['id']}"):
                r = await browser.get(path)
                assert r.status_code == 200
                assert "<img" not in r.text and "&lt;img src=x" in r.text, path
                csp = r.headers["content-security-policy"]
                assert "default-src 'none'" in csp and "script-src 'self'" in csp
                assert r.headers["x-content-type-options"] == "nosniff"
                assert not re.search(r'(src|href)="(https?:)?//', r.text), path


async def test_posture_edit_for_a_tenant_admin(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        admin = {"Authorization": f"Bearer {h.token(roles=['tenant_admin'], teams=['team-a'])}"}
        async with httpx.AsyncClient(base_url=h.sidecar.admin_url, headers=admin) as browser:
            page = await browser.get("/console/teams/team-a")
            assert 'id="save-posture"' in page.text
            saved = await browser.post("/console/teams/team-a", data={"csrf": csrf_of(page.text), "revision": "0"})
            assert saved.status_code == 200 and "Posture saved (revision 1)" in saved.text
            posture = (await h.admin.get("/v1/teams/team-a/posture")).json()
            assert posture["prompt_retention"] is False and posture["updated_by"] == "tester"
            stale = await browser.post("/console/teams/team-a", data={"csrf": csrf_of(page.text), "revision": "0"})
            assert stale.status_code == 412
            other = await browser.get("/console/teams/team-b")
            assert other.status_code == 404


async def _raw_get(url: str, path: str) -> bytes:
    """The status line of a GET sent byte for byte (clients normalise ``..`` away)."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    return data.split(b"\r\n", 1)[0]


async def test_no_path_trick_reaches_a_page_or_the_api_without_a_principal(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.sidecar is not None
        url = h.sidecar.admin_url
        for path in ("/console/../v1/trials", "/console/%2e%2e/v1/trials", "/console/static/../trials",
                     "/console/static/..%2ftrials", "/console/static%2f..%2ftrials", "/console/login/../trials"):
            status = await _raw_get(url, path)
            assert status.split()[1] in (b"303", b"404"), (path, status)
        assert (await _raw_get(url, "/console%2f..%2fv1/trials")).split()[1] == b"401"
