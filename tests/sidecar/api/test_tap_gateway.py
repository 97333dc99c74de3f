"""The tap's gateway credential (issue 9, item 5): a tap beyond loopback needs one; a gateway
JWT (role ``gateway``) may report only its teams — an exchange for another team is refused
and counted, never matched or sampled; other credentials answer 401/403 in the JSON shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from sidecar.config import load_config
from sidecar.errors import ConfigError
from tests.harness import Harness, exchange


async def test_a_gateway_token_reports_only_its_teams(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True, tap_lines="gateway_jwt = true") as h:
        assert h.tap is not None and h.admin is not None
        trial = await h.create_trial()
        other = await h.create_trial(team="team-b")
        batch = [exchange(i) for i in range(5)] + [exchange(100 + i, team="team-b") for i in range(3)]

        def bearer(**claims: object) -> dict[str, str]:
            return {"Authorization": f"Bearer {h.token(**claims)}"}  # type: ignore[arg-type]

        gateway = bearer(subject="gw-eu", roles=["gateway"], teams=["team-a"])
        r = await h.tap.post("/v1/exchanges", json=batch, headers=gateway)
        assert r.status_code == 202 and r.json() == {"accepted": 5, "sampled": 5, "shed": 0, "refused": 3}, r.text

        for headers, status in (({}, 401), ({"Authorization": "Bearer not-a-token"}, 401),
                                (bearer(roles=["developer"], teams=["team-a"]), 403)):
            r = await h.tap.post("/v1/exchanges", json=batch, headers=headers)
            assert r.status_code == status and set(r.json()["error"]) == {"code", "message", "field"}, r.text
        # The fleet's own admin may post for any team.
        r = await h.tap.post("/v1/exchanges", json=[exchange(200, team="team-b")], headers=bearer(roles=["platform_admin"]))
        assert r.json() == {"accepted": 1, "sampled": 1, "shed": 0}

        await h.runtime.idle()
        a, b = await h.settle(trial["id"], 5), await h.settle(other["id"], 1)
        assert a["funnel"]["total"] == 5 and b["funnel"]["total"] == 1  # team-b's refused three never counted
        live = (await h.admin.get("/v1/live")).json()
        assert live["counters"]["tap_exchanges_refused_team"] == 3


def test_a_tap_beyond_loopback_needs_a_gateway_credential(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[tap]\nlisten = "0.0.0.0:8790"\n')
    with pytest.raises(ConfigError, match="beyond loopback: the tap then needs a gateway credential"):
        load_config(str(path), {})
    path.write_text('[tap]\nlisten = "0.0.0.0:8790"\ntoken_env = "TAP_TOKEN"\n')
    assert load_config(str(path), {"TAP_TOKEN": "s3cret"}).tap.listen == "0.0.0.0:8790"
    path.write_text('[tap]\nlisten = "127.0.0.1:8790"\ngateway_jwt = true\n')
    with pytest.raises(ConfigError, match='set auth.mode = "jwt"'):
        load_config(str(path), {})
