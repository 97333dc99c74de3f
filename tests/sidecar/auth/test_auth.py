"""Admin authentication over real HTTP: bad tokens refused before any handler, keys rotated
without restart, ``shadowtrial token`` accepted, and no secret in logs or answers."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

import httpx
import jwt
import pytest

from sidecar.api.authn import VERIFIER, reload_keys
from sidecar.auth.mint import generate_key_pair, jwk_of, load_signing_key, mint
from sidecar.cli.main import main
from tests.harness import CANDIDATE, INCUMBENT, AuthKit, Harness, exchange

AUD, ISS = AuthKit.AUDIENCE, AuthKit.ISSUER
HS_SECRET = b"a-test-hmac-secret-long-enough-for-every-HS-algorithm-64-bytes!!!"


class Keys:
    """Key material for one test: the harness's Ed25519 key plus an RSA key, an HMAC secret,
    a stranger's Ed25519 key, and three Ed25519 keys for a JWKS file (j1 published)."""

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "keys"
        self.rsa_private, self.rsa_public = generate_key_pair(self.dir, kind="rsa", name="rsa")
        self.rsa = load_signing_key(str(self.rsa_private), "RS256")
        self.hs_path = self.dir / "hs.secret"
        self.hs_path.write_bytes(HS_SECRET + b"\n")
        stranger, _ = generate_key_pair(self.dir, name="stranger")
        self.stranger = load_signing_key(str(stranger), "EdDSA")
        self.jwks_path = self.dir / "jwks.json"
        self.jwk_private: dict[str, Any] = {}
        self.jwk_public: dict[str, dict[str, Any]] = {}
        for kid in ("j1", "j2", "j3"):
            private, public = generate_key_pair(self.dir, name=kid)
            self.jwk_private[kid] = load_signing_key(str(private), "EdDSA")
            self.jwk_public[kid] = jwk_of(public.read_bytes(), kid)
        self.write_jwks("j1")

    def write_jwks(self, *kids: str) -> None:
        tmp = self.jwks_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"keys": [self.jwk_public[k] for k in kids]}))
        os.replace(tmp, self.jwks_path)  # as an operator (or a Kubernetes Secret volume) swaps it in


def auth_harness(tmp: Path, **kw: Any) -> tuple[Harness, Keys]:
    """A harness whose ``[auth]`` has its own Ed25519 key, an RSA key, an HMAC secret and a JWKS file."""
    keys = Keys(tmp)

    def table(kit: AuthKit) -> str:
        # auth's own keys first: TOML closes [auth] at the first [[auth.keys]].
        return (f'[auth]\nmode = "jwt"\naudience = "{AUD}"\nissuer = "{ISS}"\njwks = "{keys.jwks_path}"\n'
                'jwks_algorithms = ["EdDSA"]\n'
                f'[[auth.keys]]\npath = "{kit.public_path}"\nalgorithms = ["EdDSA"]\nkid = "{kit.KID}"\n'
                f'[[auth.keys]]\npath = "{keys.rsa_public}"\nalgorithms = ["RS256"]\nkid = "rsa"\n'
                f'[[auth.keys]]\npath = "{keys.hs_path}"\nalgorithms = ["HS256"]\nkid = "hs"\n')

    return Harness(tmp, auth=table, **kw), keys


def claims(**over: Any) -> dict[str, Any]:
    now = int(time.time())
    c: dict[str, Any] = {"sub": "mallory", "aud": AUD, "iss": ISS, "iat": now, "exp": now + 300,
                         "roles": ["platform_admin"], "teams": ["team-a"]}
    for k, v in over.items():
        if v is DROP:
            c.pop(k, None)
        else:
            c[k] = v
    return c


DROP = object()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forge(header: dict[str, Any], payload: dict[str, Any], sign: Callable[[bytes], bytes] = lambda _: b"") -> str:
    """A compact JWS assembled by hand: what PyJWT itself refuses to produce (alg none, HS with a PEM)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}".encode()
    return f"{signing_input.decode()}.{b64(sign(signing_input))}"


def hs256(secret: bytes) -> Callable[[bytes], bytes]:
    return lambda data: hmac.new(secret, data, hashlib.sha256).digest()


BadCase = tuple[str, str, Callable[[Harness, Keys], list[tuple[str, str]]]]


def bearer(token: str) -> list[tuple[str, str]]:
    return [("Authorization", f"Bearer {token}")]


def good(h: Harness, **over: Any) -> str:
    """A token signed with the harness's key, claims overridden (``DROP`` removes one)."""
    assert h.auth is not None
    return jwt.encode(claims(**over), h.auth.private_key, algorithm="EdDSA", headers={"kid": h.auth.KID})


def tamper_signature(token: str) -> str:
    head, payload, sig = token.split(".")
    raw = bytearray(base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4)))
    raw[0] ^= 0x01
    return f"{head}.{payload}.{b64(bytes(raw))}"


def tamper_payload(token: str) -> str:
    head, _, sig = token.split(".")
    return f"{head}.{b64(json.dumps(claims(sub='root', roles=['platform_admin'])).encode())}.{sig}"


def hs_rs_confusion(h: Harness, k: Keys) -> list[tuple[str, str]]:
    # The classic attack: sign HS256 with the server's *public* RSA key as the HMAC secret.
    return bearer(forge({"alg": "HS256", "typ": "JWT", "kid": "rsa"}, claims(), hs256(k.rsa_public.read_bytes())))


def hs_ed_confusion(h: Harness, k: Keys) -> list[tuple[str, str]]:
    assert h.auth is not None
    return bearer(forge({"alg": "HS256", "kid": h.auth.KID}, claims(), hs256(h.auth.public_path.read_bytes())))


NOW = int(time.time())

BAD_TOKENS: list[BadCase] = [
    ("no Authorization header", "missing", lambda h, k: []),
    ("empty bearer", "malformed", lambda h, k: [("Authorization", "Bearer")]),
    ("empty header", "missing", lambda h, k: [("Authorization", "")]),
    ("wrong scheme (Basic)", "scheme", lambda h, k: [("Authorization", "Basic " + b64(b"admin:admin"))]),
    ("token without scheme", "scheme", lambda h, k: [("Authorization", good(h))]),
    ("two Authorization headers", "malformed", lambda h, k: bearer(good(h)) + bearer(good(h))),
    ("garbage", "malformed", lambda h, k: bearer("not-a-jwt")),
    ("three segments of garbage", "malformed", lambda h, k: bearer("aaaa.bbbb.cccc")),
    ("expired", "expired", lambda h, k: bearer(good(h, iat=NOW - 7200, exp=NOW - 3600))),
    ("expired beyond the leeway", "expired", lambda h, k: bearer(good(h, iat=int(time.time()) - 600, exp=int(time.time()) - 60))),
    ("issued in the future (iat)", "not_yet_valid", lambda h, k: bearer(good(h, iat=int(time.time()) + 600, exp=int(time.time()) + 900))),
    ("not yet valid (nbf)", "not_yet_valid", lambda h, k: bearer(good(h, nbf=int(time.time()) + 600))),
    ("alg none", "algorithm_not_allowed", lambda h, k: bearer(forge({"alg": "none", "kid": AuthKit.KID}, claims()))),
    ("alg none, no kid", "algorithm_not_allowed", lambda h, k: bearer(forge({"alg": "none"}, claims()))),
    ("alg NONE (case)", "algorithm_not_allowed", lambda h, k: bearer(forge({"alg": "None", "kid": AuthKit.KID}, claims()))),
    ("HS256 with the RSA public key as secret", "algorithm_not_allowed", hs_rs_confusion),
    ("HS256 with the Ed25519 public key as secret", "algorithm_not_allowed", hs_ed_confusion),
    ("wrong audience", "wrong_audience", lambda h, k: bearer(good(h, aud="another-service"))),
    ("wrong issuer", "wrong_issuer", lambda h, k: bearer(good(h, iss="https://evil.test"))),
    ("unknown kid", "unknown_kid", lambda h, k: bearer(jwt.encode(claims(), k.stranger, algorithm="EdDSA", headers={"kid": "nope"}))),
    ("no kid (no key allows it)", "unknown_kid", lambda h, k: bearer(jwt.encode(claims(), h.auth.private_key, algorithm="EdDSA"))),  # type: ignore[union-attr]
    ("signed by another key, right kid", "bad_signature", lambda h, k: bearer(
        jwt.encode(claims(), k.stranger, algorithm="EdDSA", headers={"kid": AuthKit.KID}))),
    ("tampered signature", "bad_signature", lambda h, k: bearer(tamper_signature(good(h, roles=["viewer"])))),
    ("tampered payload", "bad_signature", lambda h, k: bearer(tamper_payload(good(h, roles=["viewer"])))),
    ("missing exp", "missing_claim", lambda h, k: bearer(good(h, exp=DROP))),
    ("missing iat", "missing_claim", lambda h, k: bearer(good(h, iat=DROP))),
    ("missing aud", "missing_claim", lambda h, k: bearer(good(h, aud=DROP))),
    ("missing iss", "missing_claim", lambda h, k: bearer(good(h, iss=DROP))),
    ("missing sub", "missing_claim", lambda h, k: bearer(good(h, sub=DROP))),
    ("empty sub", "bad_claim", lambda h, k: bearer(good(h, sub=""))),
    ("sub not a string", "bad_claim", lambda h, k: bearer(good(h, sub=42))),
    ("roles not a list", "bad_claim", lambda h, k: bearer(good(h, roles="platform_admin"))),
    ("teams not a list", "bad_claim", lambda h, k: bearer(good(h, teams="team-a"))),
    ("roles of non-strings", "bad_claim", lambda h, k: bearer(good(h, roles=[1, 2]))),
    ("content not a boolean", "bad_claim", lambda h, k: bearer(good(h, content="yes"))),
    ("exp not a number", "bad_claim", lambda h, k: bearer(good(h, exp="tomorrow"))),
    # RFC 7519 NumericDates are JSON numbers: PyJWT would take these strings (issue 21, item 3).
    ("exp a numeric string", "bad_claim", lambda h, k: bearer(good(h, exp=str(int(time.time()) + 300)))),
    ("iat a numeric string", "bad_claim", lambda h, k: bearer(good(h, iat=str(int(time.time()))))),
    ("nbf a numeric string", "bad_claim", lambda h, k: bearer(good(h, nbf=str(int(time.time()) - 60)))),
    ("exp a float string", "bad_claim", lambda h, k: bearer(good(h, exp=f"{time.time() + 300:.1f}"))),
    ("exp true", "bad_claim", lambda h, k: bearer(good(h, exp=True))),
    ("iat true", "bad_claim", lambda h, k: bearer(good(h, iat=True))),
    ("nbf false", "bad_claim", lambda h, k: bearer(good(h, nbf=False))),
    ("exp NaN", "bad_claim", lambda h, k: bearer(good(h, exp=float("nan")))),
    ("exp Infinity", "bad_claim", lambda h, k: bearer(good(h, exp=float("inf")))),
    ("iat a list", "bad_claim", lambda h, k: bearer(good(h, iat=[int(time.time())]))),
    ("exp null", "missing_claim", lambda h, k: bearer(good(h, exp=None))),
    ("PS256 on a key pinned to RS256", "algorithm_not_allowed", lambda h, k: bearer(
        jwt.encode(claims(), k.rsa, algorithm="PS256", headers={"kid": "rsa"}))),
    ("EdDSA named for the RSA key", "algorithm_not_allowed", lambda h, k: bearer(
        jwt.encode(claims(), h.auth.private_key, algorithm="EdDSA", headers={"kid": "rsa"}))),  # type: ignore[union-attr]
    ("HS256 with a wrong secret", "bad_signature", lambda h, k: bearer(
        jwt.encode(claims(), b"x" * 64, algorithm="HS256", headers={"kid": "hs"}))),
    ("HS512 on a secret pinned to HS256", "algorithm_not_allowed", lambda h, k: bearer(
        jwt.encode(claims(), HS_SECRET, algorithm="HS512", headers={"kid": "hs"}))),
    ("kid not a string", "malformed", lambda h, k: bearer(forge({"alg": "EdDSA", "kid": 7}, claims()))),
    ("JWKS kid not (yet) published", "unknown_kid", lambda h, k: bearer(
        jwt.encode(claims(), k.jwk_private["j2"], algorithm="EdDSA", headers={"kid": "j2"}))),
]


def assert_401(r: httpx.Response, what: str) -> None:
    assert r.status_code == 401, f"{what}: {r.status_code} {r.text}"
    assert r.headers["WWW-Authenticate"].startswith("Bearer"), what
    assert r.headers["content-type"].startswith("application/json"), what
    error = r.json()["error"]
    assert error["code"] == "unauthorized" and error["field"] == "Authorization" and error["message"], what


def trial_body() -> dict[str, Any]:
    return {"team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
            "spend_cap_usd": 5.0, "sample_rate": 1.0}


async def test_bad_tokens_are_refused_before_any_handler(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Each bad token: 401 in the JSON shape on every guarded route, for the reason expected
    (the log's), and the store untouched."""
    caplog.set_level(logging.INFO, logger="shadowtrial.auth")
    assert len(BAD_TOKENS) >= 20
    h, keys = auth_harness(tmp_path)
    async with h:
        assert h.admin
        async with httpx.AsyncClient(base_url=str(h.admin.base_url), timeout=30.0) as raw:
            for name, reason, make in BAD_TOKENS:
                headers = make(h, keys)
                caplog.clear()
                r = await raw.post("/v1/trials", json=trial_body(), headers=headers)
                assert_401(r, name)
                assert caplog.records and caplog.records[-1].getMessage().endswith(f"token refused ({reason})"), (
                    f"{name}: {[rec.getMessage() for rec in caplog.records]}")
                for method, path in (("GET", "/v1/trials"), ("GET", "/v1/live"), ("GET", "/v1/trials/t-1"),
                                     ("POST", "/v1/trials/t-1/stop"), ("GET", "/no/such/route")):
                    assert_401(await raw.request(method, path, headers=headers), f"{name}: {method} {path}")
        listing = await h.admin.get("/v1/trials")
        assert listing.status_code == 200 and listing.json()["trials"] == []  # nothing was created
        assert await h.runtime.store.list_trials() == []


async def test_good_tokens_of_each_key_kind_are_accepted(tmp_path: Path) -> None:
    h, keys = auth_harness(tmp_path)
    async with h:
        assert h.admin
        base = str(h.admin.base_url)
        now = int(time.time())
        tokens = {
            "Ed25519 (harness)": h.token(teams=["team-a"]),
            "RS256": jwt.encode(claims(), keys.rsa, algorithm="RS256", headers={"kid": "rsa"}),
            "HS256 secret": jwt.encode(claims(), HS_SECRET, algorithm="HS256", headers={"kid": "hs"}),
            "JWKS kid j1": jwt.encode(claims(), keys.jwk_private["j1"], algorithm="EdDSA", headers={"kid": "j1"}),
            "expired within the leeway": good(h, iat=now - 600, exp=now - 10),
            "aud as a list": good(h, aud=["other", AUD]),
            # NumericDates may be fractional (RFC 7519 section 2); nbf and iat within the leeway.
            "fractional NumericDates": good(h, iat=now + 0.5, nbf=now - 1.25, exp=now + 299.75),
            "iat and nbf ahead within the leeway": good(h, iat=now + 10, nbf=now + 10),
        }
        async with httpx.AsyncClient(base_url=base, timeout=30.0) as raw:
            for name, token in tokens.items():
                r = await raw.get("/v1/trials", headers={"Authorization": f"Bearer {token}"})
                assert r.status_code == 200, f"{name}: {r.text}"
            r = await raw.post("/v1/trials", json=trial_body(), headers={"authorization": f"bearer {tokens['RS256']}"})
            assert r.status_code == 201, r.text  # the scheme is case-insensitive
            for path in ("/healthz", "/readyz", "/metrics", "/openapi.json"):  # content-free: no token needed
                assert (await raw.get(path)).status_code == 200, path


def jwks_token(keys: Keys, kid: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {jwt.encode(claims(), keys.jwk_private[kid], algorithm='EdDSA', headers={'kid': kid})}"}


async def test_jwks_rotation_without_restart(tmp_path: Path) -> None:
    h, keys = auth_harness(tmp_path)
    async with h:
        assert h.admin
        verifier = h.admin_app[VERIFIER]
        async with httpx.AsyncClient(base_url=str(h.admin.base_url), timeout=30.0) as raw:
            assert (await raw.get("/v1/trials", headers=jwks_token(keys, "j1"))).status_code == 200
            assert_401(await raw.get("/v1/trials", headers=jwks_token(keys, "j2")), "j2 before rotation")

            # Rotation by rewriting the file: picked up on use once the check interval has passed
            # (1 s in production; 0 here, so the test need not wait).
            verifier.keys.check_interval_s = 0.0
            keys.write_jwks("j2")
            assert (await raw.get("/v1/trials", headers=jwks_token(keys, "j2"))).status_code == 200
            assert_401(await raw.get("/v1/trials", headers=jwks_token(keys, "j1")), "j1 after removal")

            # SIGHUP: an explicit reload, even while the file check would not look yet.
            verifier.keys.check_interval_s = 3600.0
            keys.write_jwks("j2", "j3")
            assert_401(await raw.get("/v1/trials", headers=jwks_token(keys, "j3")), "j3 before reload")
            reload_keys(h.admin_app)
            assert (await raw.get("/v1/trials", headers=jwks_token(keys, "j3"))).status_code == 200

            # A broken file keeps the last good keys (an operator's half-written file locks no one out).
            keys.jwks_path.write_text("{not json")
            reload_keys(h.admin_app)
            assert (await raw.get("/v1/trials", headers=jwks_token(keys, "j3"))).status_code == 200


async def test_pem_key_rotation_by_rewriting_the_file(tmp_path: Path) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.admin and h.auth
        verifier = h.admin_app[VERIFIER]
        verifier.keys.check_interval_s = 0.0
        old = h.token()
        new_private, new_public = generate_key_pair(tmp_path / "rotated", name="next")
        tmp = h.auth.public_path.with_suffix(".tmp")
        tmp.write_bytes(new_public.read_bytes())
        os.replace(tmp, h.auth.public_path)
        new = mint(key=load_signing_key(str(new_private), "EdDSA"), algorithm="EdDSA", kid=h.auth.KID,
                   subject="ops", audience=AUD, issuer=ISS, roles=["viewer"], teams=["team-a"])
        async with httpx.AsyncClient(base_url=str(h.admin.base_url), timeout=30.0) as raw:
            assert (await raw.get("/v1/trials", headers={"Authorization": f"Bearer {new}"})).status_code == 200
            assert_401(await raw.get("/v1/trials", headers={"Authorization": f"Bearer {old}"}), "old key")


async def test_shadowtrial_token_mints_a_token_the_sidecar_accepts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with Harness(tmp_path, auth=True) as h:
        assert h.admin and h.auth
        argv = ["token", "--key", str(h.auth.private_path), "--alg", "EdDSA", "--kid", h.auth.KID, "--sub", "cli-user",
                "--role", "developer", "--role", "viewer", "--team", "team-a", "--team", "team-b", "--content",
                "--ttl", "120", "--audience", AUD, "--issuer", ISS]
        assert main(argv, {}) == 0
        token = capsys.readouterr().out.strip()
        decoded = jwt.decode(token, options={"verify_signature": False})
        assert decoded["roles"] == ["developer", "viewer"] and decoded["teams"] == ["team-a", "team-b"]
        assert decoded["content"] is True and decoded["exp"] - decoded["iat"] == 120
        base = str(h.admin.base_url)
        r = await h.admin.get("/v1/trials", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 200
        # The client commands send it: from --token, and from $SHADOWTRIAL_TOKEN.
        assert await asyncio.to_thread(main, ["trials", "list", "--admin", base, "--json", "--token", token], {}) == 0
        assert await asyncio.to_thread(main, ["live", "--admin", base, "--json"], {"SHADOWTRIAL_TOKEN": token}) == 0
        with pytest.raises(SystemExit, match="401 unauthorized"):
            await asyncio.to_thread(main, ["trials", "list", "--admin", base], {})
        out = capsys.readouterr()
        assert token not in out.out + out.err


API_KEY = "sk-canary-PROVIDER-KEY-8c1f2e9d7b"


async def test_no_secret_in_logs_answers_metrics_or_openapi(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with Harness(tmp_path, auth=True, environ={"CANARY_API_KEY": API_KEY},
                       provider_extra='api_key_env = "CANARY_API_KEY"') as h:
        assert h.admin
        token = h.token(subject="canary-user", teams=["team-a"])
        secrets = {"provider key": API_KEY, "token": token, "token signature": token.rsplit(".", 1)[1]}
        answers: list[str] = []
        async with httpx.AsyncClient(base_url=str(h.admin.base_url), timeout=30.0,
                                     headers={"Authorization": f"Bearer {token}"}) as admin:
            r = await admin.post("/v1/trials", json=trial_body())
            assert r.status_code == 201, r.text
            trial_id = r.json()["id"]
            await h.send([exchange(i) for i in range(6)])
            await h.settle(trial_id, 6)
            for path in (f"/v1/trials/{trial_id}", "/v1/trials", "/v1/live", "/metrics", "/openapi.json",
                         "/healthz", "/readyz", "/v1/trials/nope"):
                answers.append((await admin.get(path)).text)
            answers.append((await admin.post("/v1/trials", json={"team": API_KEY})).text)
            for bad in (tamper_signature(token), token + "x", f"{token} {token}"):
                answers.append((await admin.get("/v1/trials", headers={"Authorization": f"Bearer {bad}"})).text)
            answers.append((await admin.get("/v1/trials", headers={"Authorization": f"Basic {token}"})).text)
        # The key was in play: the provider received it on the candidate's and judge's calls.
        assert any(API_KEY in " ".join(q.headers.values()) for q in h.fake.requests)
    logs = caplog.text + "".join(str(r.args) for r in caplog.records)
    assert "token refused" in logs  # the refusals were logged, by reason
    for name, secret in secrets.items():
        assert secret not in logs, f"the {name} is in the log"
        for answer in answers:
            assert secret not in answer, f"the {name} is in an answer: {answer[:200]}"


async def test_the_demo_mints_its_own_token_and_still_decides(capsys: pytest.CaptureFixture[str]) -> None:
    from sidecar.demo.scenario import run_demo

    assert await run_demo(seed=7) == 0
    out = capsys.readouterr().out
    # Adoptable: not worse by more than the tolerance (not_worse), or better (issue 23's rule).
    assert "final verdict" in out and "(inconclusive)" not in out and "Adoptable (" in out


async def test_sighup_reloads_the_keys_of_a_running_serve(tmp_path: Path) -> None:
    """``shadowtrial serve`` survives SIGHUP (whose default would end it) and re-reads its keys."""
    import signal

    from sidecar.demo.fake_provider import FakeProvider
    from tests.harness import default_models, wait_for, write_config
    from tests.sidecar.test_lifecycle import ServerProcess

    keys = Keys(tmp_path)
    table = (f'[auth]\nmode = "jwt"\naudience = "{AUD}"\nissuer = "{ISS}"\njwks = "{keys.jwks_path}"\n'
             'jwks_algorithms = ["EdDSA"]\n')
    async with FakeProvider(default_models()) as fake:
        server = ServerProcess(write_config(tmp_path, fake.base_url, auth=table), tmp_path / "serve.log")
        try:
            await server.start()
            async with httpx.AsyncClient(base_url=server.admin_url, timeout=10.0) as client:
                assert (await client.get("/v1/trials", headers=jwks_token(keys, "j1"))).status_code == 200
                keys.write_jwks("j2")
                server.signal(signal.SIGHUP)

                async def rotated() -> bool:
                    return (await client.get("/v1/trials", headers=jwks_token(keys, "j2"))).status_code == 200

                await wait_for(rotated, timeout=15.0, what="the new kid accepted after SIGHUP")
                assert_401(await client.get("/v1/trials", headers=jwks_token(keys, "j1")), "j1 after SIGHUP")
            server.signal(signal.SIGTERM)
            assert await server.wait(30.0) == 0
        finally:
            await server.ensure_dead()
    log = server.log_text()
    assert "admin keys reloaded" in log and "AUTHENTICATION IS OFF" not in log
