"""The key set, the [auth] config and the middleware, without a whole sidecar."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from aiohttp import web

from policies.roles import LOCAL_DEVELOPMENT, Principal
from sidecar.api.authn import PRINCIPAL, announce, authn_middleware, build_verifier
from sidecar.auth.errors import KeyLoadError, Unauthorized
from sidecar.auth.keys import JwksSource, KeySet, PemSource
from sidecar.auth.mint import generate_key_pair, jwk_of, load_signing_key, mint
from sidecar.auth.verify import Verifier
from sidecar.config import AuthConfig, AuthKeyConfig, load_config
from sidecar.errors import ConfigError, StartupError

AUD, ISS = "aud-1", "iss-1"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def write_config(tmp: Path, text: str) -> str:
    path = tmp / "c.toml"
    path.write_text(text)
    return str(path)


# -- config ------------------------------------------------------------------------------------


@pytest.mark.parametrize("listen", ["0.0.0.0:8791", "[::]:8791", "10.1.2.3:8791", "admin.internal:8791"])
def test_auth_off_is_refused_on_a_non_loopback_admin_listener(tmp_path: Path, listen: str) -> None:
    with pytest.raises(ConfigError, match=r"auth\.mode = \"off\".*admin\.listen"):
        load_config(write_config(tmp_path, f'[admin]\nlisten = "{listen}"\n'), {})


@pytest.mark.parametrize("listen", ["127.0.0.1:8791", "[::1]:8791", "localhost:8791", "127.0.0.2:0"])
def test_auth_off_is_the_default_on_loopback(tmp_path: Path, listen: str) -> None:
    config = load_config(write_config(tmp_path, f'[admin]\nlisten = "{listen}"\n'), {})
    assert config.auth.mode == "off"


def test_the_token_variable_is_the_clients_not_a_config_override() -> None:
    assert load_config(None, {"SHADOWTRIAL_TOKEN": "x.y.z"}).auth.mode == "off"


@pytest.mark.parametrize("table, message", [
    ('mode = "jwt"\nissuer = "i"\njwks = "j"\njwks_algorithms = ["RS256"]', "audience must be set"),
    ('mode = "jwt"\naudience = "a"\njwks = "j"\njwks_algorithms = ["RS256"]', "issuer must be set"),
    ('mode = "jwt"\naudience = "a"\nissuer = "i"', "needs keys"),
    ('jwks = "j"', "jwks_algorithms must name at least one"),
    ('jwks = "j"\njwks_algorithms = ["none"]', "'none' is not one of"),
    ('mode = "maybe"', r"Invalid enum value 'maybe' - at `\$\.auth\.mode`"),
    ('leeway_seconds = 3600', "<= 300"),
])
def test_auth_table_is_validated(tmp_path: Path, table: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(tmp_path, f"[auth]\n{table}\n"), {})


@pytest.mark.parametrize("key, message", [
    ('path = "k"\nalgorithms = ["HS256", "RS256"]\nkid = "a"', "cannot share a key"),
    ('path = "k"\nalgorithms = []\nkid = "a"', "at least one algorithm"),
    ('path = "k"\nalgorithms = ["none"]\nkid = "a"', "'none' is not one of"),
    ('path = "k"\nalgorithms = ["RS256"]', "allow_no_kid"),
    ('path = "k"\nalgorithms = ["RS256"]\nkid = "a"\nextra = 1', "unknown field"),
])
def test_auth_keys_are_validated(tmp_path: Path, key: str, message: str) -> None:
    text = f'[auth]\nmode = "jwt"\naudience = "a"\nissuer = "i"\n[[auth.keys]]\n{key}\n'
    with pytest.raises(ConfigError, match=message):
        load_config(write_config(tmp_path, text), {})


# -- keys --------------------------------------------------------------------------------------


def test_a_public_key_never_accepts_hmac(tmp_path: Path) -> None:
    _, public = generate_key_pair(tmp_path, kind="rsa", name="r")
    with pytest.raises(KeyLoadError, match="HS256 cannot be verified with a RSAPublicKey"):
        PemSource(str(public), ("HS256",), "r").load()
    _, ed = generate_key_pair(tmp_path, name="e")
    with pytest.raises(KeyLoadError, match="RS256 cannot be verified"):
        PemSource(str(ed), ("RS256",), "e").load()


def test_private_keys_short_secrets_and_missing_files_are_refused(tmp_path: Path) -> None:
    private, _ = generate_key_pair(tmp_path, name="p")
    with pytest.raises(KeyLoadError, match="holds a private key"):
        PemSource(str(private), ("EdDSA",), "p").load()
    (tmp_path / "short").write_bytes(b"0123456789abcdef0123456789abcdef")  # 32 bytes: HS256 yes, HS512 no
    assert PemSource(str(tmp_path / "short"), ("HS256",), "s").load()
    with pytest.raises(KeyLoadError, match="at least 64 bytes"):
        PemSource(str(tmp_path / "short"), ("HS512",), "s").load()
    with pytest.raises(KeyLoadError, match="cannot be read"):
        PemSource(str(tmp_path / "absent.pub"), ("EdDSA",), "x").load()


def test_an_unloadable_key_stops_start_up_naming_its_setting(tmp_path: Path) -> None:
    auth = AuthConfig(mode="jwt", audience=AUD, issuer=ISS,
                      keys=(AuthKeyConfig(path=str(tmp_path / "gone.pub"), algorithms=("EdDSA",), kid="k"),))
    with pytest.raises(StartupError, match=r"auth\.keys\[0\]"):
        build_verifier(auth)


def test_file_changes_are_picked_up_at_most_once_per_interval(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    pubs = {kid: generate_key_pair(tmp_path, name=kid)[1].read_bytes() for kid in ("a", "b")}

    def write(*kids: str) -> None:
        (tmp_path / "next").write_text(json.dumps({"keys": [jwk_of(pubs[k], k) for k in kids]}))
        os.replace(tmp_path / "next", jwks)

    write("a")
    clock = Clock()
    keys = KeySet([JwksSource(str(jwks), ("EdDSA",))], clock=clock)
    assert [k.kid for k in keys.candidates("a")] == ["a"]
    write("b")
    clock.now += 0.5
    assert keys.candidates("b") == [] and keys.candidates("a")  # not looked at yet
    clock.now += 0.6
    assert keys.candidates("a") == [] and [k.kid for k in keys.candidates("b")] == ["b"]


def test_a_jwks_key_outside_the_pinned_algorithms_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, rsa_pub = generate_key_pair(tmp_path, kind="rsa", name="r")
    _, ed_pub = generate_key_pair(tmp_path, name="e")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk_of(rsa_pub.read_bytes(), "r"),
                                                             jwk_of(ed_pub.read_bytes(), "e")]}))
    with caplog.at_level(logging.WARNING, logger="shadowtrial.auth"):
        keys = KeySet([JwksSource(str(tmp_path / "jwks.json"), ("EdDSA", "HS256"))])
    assert [(k.kid, k.algorithms) for k in keys.keys()] == [("e", ("EdDSA",))]  # never HS256 on a public key
    assert "kid 'r' accepts none" in caplog.text


def test_a_token_without_kid_tries_only_keys_that_allow_it(tmp_path: Path) -> None:
    private, public = generate_key_pair(tmp_path, name="k")
    signing = load_signing_key(str(private), "EdDSA")
    token = mint(key=signing, algorithm="EdDSA", subject="s", audience=AUD, issuer=ISS, roles=["viewer"], teams=["t"])
    strict = Verifier(KeySet([PemSource(str(public), ("EdDSA",), "k")]), audience=AUD, issuer=ISS)
    with pytest.raises(Unauthorized) as refused:
        strict.authenticate(f"Bearer {token}")
    assert refused.value.reason == "unknown_kid"
    lenient = Verifier(KeySet([PemSource(str(public), ("EdDSA",), "", allow_no_kid=True)]), audience=AUD, issuer=ISS)
    assert lenient.authenticate(f"Bearer {token}") == Principal.of("s", ["viewer"], ["t"])


def test_leeway_is_configurable(tmp_path: Path) -> None:
    private, public = generate_key_pair(tmp_path, name="k")
    signing = load_signing_key(str(private), "EdDSA")
    token = mint(key=signing, algorithm="EdDSA", kid="k", subject="s", audience=AUD, issuer=ISS, ttl_s=-10)
    keys = KeySet([PemSource(str(public), ("EdDSA",), "k")])
    assert Verifier(keys, audience=AUD, issuer=ISS, leeway_s=30).authenticate(f"Bearer {token}").subject == "s"
    with pytest.raises(Unauthorized, match="expired"):
        Verifier(keys, audience=AUD, issuer=ISS, leeway_s=0).authenticate(f"Bearer {token}")


# -- middleware --------------------------------------------------------------------------------


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def echo_app(verifier: Verifier | None) -> web.Application:
    async def who(request: web.Request) -> web.Response:
        p = request[PRINCIPAL]
        return web.json_response({"sub": p.subject, "roles": sorted(p.roles), "teams": sorted(p.teams),
                                  "content": p.content})

    async def public(request: web.Request) -> web.Response:
        return web.json_response({"principal": PRINCIPAL in request})

    app = web.Application(middlewares=[authn_middleware(verifier)])
    app.router.add_get("/v1/who", who)
    app.router.add_get("/healthz", public)
    return app


async def test_the_principal_is_on_the_request(tmp_path: Path) -> None:
    private, public = generate_key_pair(tmp_path, name="k")
    verifier = Verifier(KeySet([PemSource(str(public), ("EdDSA",), "k")]), audience=AUD, issuer=ISS)
    token = mint(key=load_signing_key(str(private), "EdDSA"), algorithm="EdDSA", kid="k", subject="ann",
                 audience=AUD, issuer=ISS, roles=["developer", "no-such-role"], teams=["t1"], content=True)
    runner, url = await serve(echo_app(verifier))
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            r = await client.get("/v1/who", headers={"Authorization": f"Bearer {token}"})
            assert r.json() == {"sub": "ann", "roles": ["developer"], "teams": ["t1"], "content": True}
            assert (await client.get("/healthz")).json() == {"principal": False}
            assert (await client.get("/v1/who")).status_code == 401
    finally:
        await runner.cleanup()


async def test_auth_off_acts_as_local_development_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    assert build_verifier(AuthConfig()) is None
    with caplog.at_level(logging.WARNING, logger="shadowtrial.auth"):
        announce(AuthConfig())
        announce(AuthConfig(mode="jwt", audience=AUD, issuer=ISS, jwks="j", jwks_algorithms=("EdDSA",)))
    assert [r.getMessage()[:28] for r in caplog.records] == ["ADMIN AUTHENTICATION IS OFF "]
    runner, url = await serve(echo_app(None))
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            data: dict[str, Any] = (await client.get("/v1/who")).json()
        assert data["sub"] == LOCAL_DEVELOPMENT.subject and data["roles"] == ["platform_admin"]
    finally:
        await runner.cleanup()


def test_jwks_of_a_private_key_is_refused(tmp_path: Path) -> None:
    private, _ = generate_key_pair(tmp_path, name="k")
    key = load_signing_key(str(private), "EdDSA")
    jwk = json.loads(jwt.algorithms.OKPAlgorithm.to_jwk(key))
    jwk["kid"] = "k"
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    with pytest.raises(KeyLoadError, match="private key"):
        JwksSource(str(tmp_path / "jwks.json"), ("EdDSA",)).load()
