"""The reference collector on loopback: tokens, decoding, content refusal, dedupe, reads."""

from __future__ import annotations

import gzip
import time
from pathlib import Path
from typing import Any

import httpx
import jwt
from cryptography.hazmat.primitives.asymmetric import ed25519

from tests.uplink.kit import AUDIENCE, ISSUER, KID, UplinkKit
from uplink.schema import CaseResult, ExchangeRecord, TrialState, encode_batch

PATH = "/v1/uplink/batches"


def case(i: int, team: str = "team-a") -> CaseResult:
    return CaseResult(id=f"case:c{i}", trial_id="t1", case_id=f"c{i}", exchange_id=f"x{i}", team=team,
                      outcome="judged", finished_at=1.0, score=1.0)


def exchange_record(i: int, team: str) -> ExchangeRecord:
    return ExchangeRecord(id=f"exchange:t1:x{i}", trial_id="t1", team=team, exchange_id=f"x{i}", gateway="gw-1",
                          model="m", request={"messages": [{"role": "user", "content": f"CANARY-{team}"}]},
                          response={"content": f"answer CANARY-{team}"})


def state(rev: int, verdict: str) -> TrialState:
    return TrialState(id=f"trial:t1:{rev}", trial_id="t1", team="team-a", revision=rev, status="running", at=1.0,
                      incumbent_model="i", candidate_model="c", execution_site="local", judge_version_id="j",
                      verdict=verdict)


async def post(kit: UplinkKit, url: str, body: bytes, *, token: str | None = None, gz: bool = True) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token if token is not None else kit.signer().token()}"}
    if gz:
        headers["Content-Encoding"] = "gzip"
        body = gzip.compress(body)
    async with httpx.AsyncClient() as client:
        return await client.post(url + PATH, content=body, headers=headers)


def _error(r: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = r.json()["error"]
    assert set(body) == {"code", "message", "field"}
    return body


async def test_forged_expired_wrong_audience_and_unknown_key_tokens_are_refused(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)
    body = encode_batch("s1", 1.0, [case(1)])
    now = int(time.time())
    good = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + 30}
    own = kit.signer().key
    stranger = ed25519.Ed25519PrivateKey.generate()
    tokens = {
        "forged": (jwt.encode(good, stranger, algorithm="EdDSA", headers={"kid": KID}), "invalid_token"),
        "expired": (jwt.encode({**good, "iat": now - 120, "exp": now - 60}, own, algorithm="EdDSA",
                               headers={"kid": KID}), "token_expired"),
        "wrong audience": (jwt.encode({**good, "aud": "elsewhere"}, own, algorithm="EdDSA", headers={"kid": KID}),
                           "invalid_token"),
        "unknown key": (jwt.encode(good, own, algorithm="EdDSA", headers={"kid": "other"}), "unknown_key"),
        "wrong issuer": (jwt.encode({**good, "iss": "mallory"}, own, algorithm="EdDSA", headers={"kid": KID}),
                         "invalid_token"),
        "HMAC": (jwt.encode(good, "k" * 32, algorithm="HS256", headers={"kid": KID}), "invalid_token"),
        "long-lived": (jwt.encode({**good, "exp": now + 3600}, own, algorithm="EdDSA", headers={"kid": KID}),
                       "invalid_token"),
        "not a JWT": ("garbage", "invalid_token"),
    }
    async with kit.collector() as c:
        for name, (token, code) in tokens.items():
            r = await post(kit, c.url, body, token=token)
            assert r.status_code == 401, name
            assert _error(r)["code"] == code, name
        async with httpx.AsyncClient() as client:
            r = await client.post(c.url + PATH, content=gzip.compress(body), headers={"Content-Encoding": "gzip"})
        assert r.status_code == 401 and _error(r)["code"] == "unauthenticated"
        ok = await post(kit, c.url, body)
        assert ok.status_code == 200, ok.text
    assert [rid for rid, _ in kit.held()] == ["case:c1"], "only the properly signed batch was stored"


async def test_a_record_is_stored_once_and_acknowledged_every_time(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)
    async with kit.collector() as c:
        first = await post(kit, c.url, encode_batch("s1", 1.0, [case(1), case(2)]))
        again = await post(kit, c.url, encode_batch("s2", 2.0, [case(2), case(3)]))
        assert first.json() == {"acked": ["case:c1", "case:c2"]}
        assert again.json() == {"acked": ["case:c2", "case:c3"]}
        for rev, verdict in ((2, "Adoptable"), (1, "Collecting")):
            assert (await post(kit, c.url, encode_batch("s1", 3.0, [state(rev, verdict)]))).status_code == 200
        async with httpx.AsyncClient() as client:
            trials = (await client.get(c.url + "/v1/trials")).json()["trials"]
    assert sorted(rid for rid, _ in kit.held()) == ["case:c1", "case:c2", "case:c3"]
    assert trials == [{"trial_id": "t1", "team": "team-a", "case_results": {"team-a": 3}, "state": trials[0]["state"]}]
    assert trials[0]["state"]["revision"] == 2 and trials[0]["state"]["verdict"] == "Adoptable"


async def test_exchanges_of_a_content_free_team_are_refused(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path, content_teams=("team-open",))
    async with kit.collector() as c:
        only = await post(kit, c.url, encode_batch("s1", 1.0, [exchange_record(1, "team-a")]))
        assert only.status_code == 403 and _error(only)["code"] == "content_not_permitted"
        assert only.json()["refused"] == {"exchange:t1:x1": "content_not_permitted"}
        mixed = await post(kit, c.url, encode_batch("s1", 1.0, [
            case(1), exchange_record(2, "team-a"), exchange_record(3, "team-open")]))
        assert mixed.status_code == 200
        assert mixed.json() == {"acked": ["case:c1", "exchange:t1:x3"],
                                "refused": {"exchange:t1:x2": "content_not_permitted"}}
    assert [rid for rid, _ in kit.held("exchange")] == ["exchange:t1:x3"]
    files = b"".join(p.read_bytes() for p in tmp_path.glob("collector.db*"))
    assert b"CANARY-team-open" in files and b"CANARY-team-a" not in files


async def test_bad_bodies_get_4xx_naming_the_field(tmp_path: Path) -> None:
    kit = UplinkKit(tmp_path)
    good = encode_batch("s1", 1.0, [case(1)])
    async with kit.collector() as c:
        r = await post(kit, c.url, b"not json")
        assert r.status_code == 400 and _error(r)["field"] == "batch"
        r = await post(kit, c.url, good.replace(b'"finished_at":1.0', b'"finished_at":"soon"'))
        assert r.status_code == 400 and _error(r)["field"] == "records[0].finished_at"
        r = await post(kit, c.url, good.replace(b'"schema":1', b'"schema":99'))
        assert r.status_code == 409 and _error(r)["code"] == "schema_unsupported"
        async with httpx.AsyncClient() as client:
            bad_gz = await client.post(c.url + PATH, content=b"\x1f\x8bnot gzip", headers={
                "Authorization": f"Bearer {kit.signer().token()}", "Content-Encoding": "gzip"})
            bomb = await client.post(c.url + PATH, content=gzip.compress(b" " * (kit.cfg.max_body_bytes + 10)),
                                     headers={"Authorization": f"Bearer {kit.signer().token()}",
                                              "Content-Encoding": "gzip"})
        assert bad_gz.status_code == 400 and _error(bad_gz)["field"] == "Content-Encoding"
        assert bomb.status_code == 413
        plain = await post(kit, c.url, good, gz=False)
        assert plain.status_code == 200
    assert all(s < 500 for s in kit.statuses)
