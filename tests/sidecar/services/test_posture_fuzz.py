"""A bounded property-based fuzz of the posture routes: generated bodies (mistyped, unknown,
missing fields, not JSON), ``If-Match`` headers and team names go to one real sidecar on
loopback. Never a 5xx; every refusal is the API's JSON error, naming the field when one is
at fault; whatever is stored is a whole, valid posture. Deterministic (``derandomize``)."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.harness import Harness

EXAMPLES = 400
ODD = ["", " ", "a ", "\x00", "\x7f", "\n", "日本", "x" * 256, "x" * 257, "team-a", ".", "..", "%00", "a/b"]
values = st.one_of(st.booleans(), st.none(), st.integers(-2, 2), st.floats(allow_nan=False), st.text(max_size=5),
                   st.lists(st.booleans(), max_size=2), st.sampled_from(["true", "false", "on", "1"]))
bodies = st.one_of(
    st.fixed_dictionaries({"prompt_retention": values, "cut_over": values},
                          optional={"content_uplink": values, "revision": values}).map(lambda d: json.dumps(d).encode()),
    st.fixed_dictionaries({"prompt_retention": st.booleans(), "cut_over": st.booleans()}).map(
        lambda d: json.dumps(d).encode()),
    st.binary(max_size=30),
    st.sampled_from([b"", b"null", b"[]", b"{}", b'{"prompt_retention": true}', b"{\"a\":", b"\xff\xfe"]),
)
if_match = st.one_of(st.none(), st.sampled_from(['"1"', "1", 'W/"2"', "*", "", "-1", '"x"', "1, 2", " 3 ", "9" * 30]),
                     st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7e), max_size=6))
teams = st.one_of(st.sampled_from(ODD), st.text(max_size=8))


def check(r: httpx.Response, stats: Counter[str]) -> None:
    assert r.status_code < 500, r.text
    data = r.json()
    if r.status_code >= 400:
        stats["4xx"] += 1
        error = data["error"]
        assert set(error) == {"code", "message", "field"} and error["code"] and error["message"]
        if r.status_code == 400 and error["code"] == "invalid_request" and "JSON" not in error["message"] \
                and "must be a JSON object" not in error["message"]:
            assert error["field"], data
        return
    stats["ok"] += 1
    assert isinstance(data["prompt_retention"], bool) and isinstance(data["cut_over"], bool)
    assert data["execution_site"] in ("local", "control_plane") and isinstance(data["revision"], int)


def test_posture_routes_fuzz(tmp_path: Path) -> None:
    loop = asyncio.new_event_loop()
    harness = Harness(tmp_path)
    loop.run_until_complete(harness.__aenter__())
    stats: Counter[str] = Counter()
    try:
        assert harness.sidecar
        client = httpx.AsyncClient(base_url=harness.sidecar.admin_url, timeout=30.0)

        @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow])
        @given(method=st.sampled_from(["GET", "PUT", "PUT", "PUT"]), team=teams, body=bodies, match=if_match)
        def one(method: str, team: str, body: bytes, match: str | None) -> None:
            headers: dict[str, Any] = {"Content-Type": "application/json"}
            if match is not None:  # printable ASCII: aiohttp's parser refuses the rest before the app
                headers["If-Match"] = match
            path = f"/v1/teams/{quote(team, safe='') if team not in ('.', '..') else team.replace('.', '%2E')}/posture"
            try:
                r = loop.run_until_complete(client.request(method, path, content=body if method == "PUT" else None,
                                                           headers=headers))
            except httpx.LocalProtocolError:
                return  # a header httpx itself will not send
            check(r, stats)

        one()
        assert stats["ok"] > 0 and stats["4xx"] > stats["ok"], stats
        r = loop.run_until_complete(client.get("/readyz"))
        assert r.status_code == 200
        loop.run_until_complete(client.aclose())
    finally:
        loop.run_until_complete(harness.__aexit__(None, None, None))
        loop.close()
