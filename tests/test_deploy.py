"""What deploy/ ships: the manifests hang together, the config map's TOML is a
config the sidecar accepts, and the LiteLLM callback shim names the plugin
(``sidecar.integrations.litellm``), which builds exchanges the real tap takes.

PyYAML is a dev dependency: the manifests are parsed and checked as objects
(tests/test_k8s_manifests.py validates them against the Kubernetes schemas).
LiteLLM is not installed here: its ``CustomLogger`` base class is replaced by a stub
module for the callback tests (the only LiteLLM name the plugin imports). The plugin's
own tests, over LiteLLM's real captured kwargs, are in tests/integrations/.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any, Iterator

import pytest

from policies.sampling import is_sampled
from sidecar.config import load_config
from sidecar.ingest.wire import decode_exchanges
from tests.harness import DELIVERY_TIMEOUT_S, INCUMBENT, Harness, wait_for

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
CALLBACK = DEPLOY / "gateways" / "litellm" / "shadowtrial_callback.py"
PROVIDER_ENV = {"OPENAI_API_KEY": "sk-test-openai", "ANTHROPIC_API_KEY": "sk-test-anthropic"}

try:
    import yaml
except ImportError:  # not a dependency
    yaml = None


def config_toml() -> str:
    """The sidecar's config in the pod (kustomization.yaml generates its ConfigMap from this file)."""
    return (K8S / "config" / "shadowtrial.toml").read_text()


# -- Kubernetes ----------------------------------------------------------------


def test_config_map_toml_is_a_valid_sidecar_config(tmp_path: Path) -> None:
    path = tmp_path / "shadowtrial.toml"
    path.write_text(config_toml())
    config = load_config(str(path), {**PROVIDER_ENV, "TAP_TOKEN": "tap-token-test"})
    assert config.tap.listen == "127.0.0.1:8790"  # in-pod only
    assert config.admin.listen == "0.0.0.0:8791"  # behind the Service
    assert config.auth.mode == "jwt"  # required on a listener beyond loopback
    assert config.store.path.startswith("/var/lib/shadowtrial/")  # on the PVC
    assert set(config.secrets) == {"openai", "anthropic"} and config.secrets.tap_token == "tap-token-test"
    assert yaml is not None, "PyYAML is a dev dependency: pip install -e '.[dev]'"
    (deployment,) = [d for d in yaml.safe_load_all((K8S / "deployment.yaml").read_text()) if d]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > config.engine.drain_seconds
    (sidecar,) = [c for c in pod["initContainers"] if c["name"] == "shadowtrial"]
    env = {e["name"]: e for e in sidecar["env"]}
    for variable in [p.api_key_env for p in config.providers.values()] + [config.tap.token_env]:
        assert "secretKeyRef" in env[variable]["valueFrom"], variable  # every secret comes from a Secret


def test_kubernetes_manifests_hang_together() -> None:
    from tests.test_k8s_manifests import kustomize_build  # the kustomization, assembled as kubectl would

    assert yaml is not None, "PyYAML is a dev dependency: pip install -e '.[dev]'"
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in kustomize_build(K8S):
        by_kind.setdefault(d["kind"], []).append(d)
    (deployment,) = by_kind["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    labels = spec["template"]["metadata"]["labels"]
    assert spec["selector"]["matchLabels"].items() <= labels.items()
    pod = spec["template"]["spec"]
    # The gateway is the pod's one regular container; shadowtrial its native sidecar.
    assert [c["name"] for c in pod["containers"]] == ["gateway"]
    assert [c["name"] for c in pod["initContainers"] if c.get("restartPolicy") == "Always"] == ["shadowtrial"]
    every = pod["initContainers"] + pod["containers"]
    ports = {p["name"] for c in every for p in c.get("ports", [])}
    for service in by_kind["Service"]:
        assert service["spec"]["selector"].items() <= labels.items()
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports
    (policy,) = by_kind["NetworkPolicy"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {m["name"] for c in every for m in c.get("volumeMounts", [])} == set(volumes)
    config_maps = {d["metadata"]["name"] for d in by_kind["ConfigMap"]}
    claims = {d["metadata"]["name"] for d in by_kind["PersistentVolumeClaim"]}
    for volume in volumes.values():
        if "configMap" in volume:
            assert volume["configMap"]["name"] in config_maps
        if "persistentVolumeClaim" in volume:
            assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_dockerfile_facts() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.M)
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert 'ENTRYPOINT ["shadowtrial"]' in text
    assert 'CMD ["serve", "--config", "/etc/shadowtrial/shadowtrial.toml"]' in text
    assert re.search(r"^EXPOSE 8790 8791$", text, re.M)
    for source in re.findall(r"^COPY (?!--)(.+) \S+$", text, re.M):
        for name in source.split():
            assert (ROOT / name).exists(), f"COPY source {name} is not in the tree"


# -- the LiteLLM callback ------------------------------------------------------


def test_litellm_callback_compiles() -> None:
    compile(CALLBACK.read_text(), str(CALLBACK), "exec")


@pytest.fixture
def callback_module(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    """The plugin module (``sidecar.integrations.litellm``), over a stub of the one LiteLLM
    module it imports when LiteLLM is not installed (the project's environment has none)."""
    if importlib.util.find_spec("litellm") is None:
        stub = types.ModuleType("litellm.integrations.custom_logger")

        class CustomLogger:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                pass

        stub.CustomLogger = CustomLogger  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "litellm", types.ModuleType("litellm"))
        monkeypatch.setitem(sys.modules, "litellm.integrations", types.ModuleType("litellm.integrations"))
        monkeypatch.setitem(sys.modules, "litellm.integrations.custom_logger", stub)
    from sidecar.integrations import litellm as module

    module._tap_class.cache_clear()
    monkeypatch.delitem(module.__dict__, "proxy_handler_instance", raising=False)
    yield module
    module._tap_class.cache_clear()
    module.__dict__.pop("proxy_handler_instance", None)


def test_the_shim_in_the_config_directory_names_the_plugin(
    callback_module: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """LiteLLM loads ``shadowtrial_callback.proxy_handler_instance`` by file path from its
    config's directory (litellm/proxy/types_utils/utils.py:get_instance_fn); the shim hands
    over the package's instance, built from the environment."""
    monkeypatch.setenv("LITELLM_SHADOWTRIAL_TAP_URL", "http://127.0.0.1:9/v1/exchanges")
    monkeypatch.setenv("LITELLM_SHADOWTRIAL_BATCH_BYTES", "2048")
    spec = importlib.util.spec_from_file_location("shadowtrial_callback", CALLBACK)
    assert spec and spec.loader
    shim = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shim)
    instance = shim.proxy_handler_instance
    assert isinstance(instance, callback_module.ShadowtrialTap)
    assert isinstance(instance, sys.modules["litellm.integrations.custom_logger"].CustomLogger)
    assert instance.sender.tap_url == "http://127.0.0.1:9/v1/exchanges" and instance.sender.batch_bytes == 2048
    assert instance is callback_module.proxy_handler_instance  # one per process


def litellm_kwargs(i: int, *, team: str = "team-a", model: str = INCUMBENT, content: str | None = None,
                   user: str | None = None, headers: dict[str, str] | None = None) -> dict[str, Any]:
    """What LiteLLM passes a success callback, reduced to what the callback reads (the real,
    complete kwargs are in tests/fixtures/litellm/kwargs/)."""
    return {
        "litellm_call_id": f"call-{i}",
        "litellm_params": {
            "proxy_server_request": {"url": "http://gw:4000/v1/chat/completions", "method": "POST", "headers": headers or {}},
            # The key-derived metadata the proxy fills after the body: the only team source.
            "metadata": {"user_api_key_team_alias": team, "model_group": model},
        },
        "standard_logging_object": {
            "id": f"chatcmpl-{i}",
            "call_type": "acompletion",
            "status": "success",
            "model": "openai/" + model,
            "model_group": model,
            "messages": [{"role": "user", "content": user if user is not None else f"question {i}"}],
            "response": {
                "choices": [{
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": content if content is not None else f"answer {i} ⟨q=0.500⟩"},
                }],
            },
            "model_parameters": {"max_tokens": 64, "temperature": 0.2, "user": "end-user-42"},
            "prompt_tokens": 12,
            "completion_tokens": 20,
            "response_cost": 0.0,
            "response_cost_failure_debug_info": {"error_str": "model not in the price map"},
            "startTime": 1_790_000_000.0,
            "endTime": 1_790_000_000.25,
            "metadata": {"user_api_key_team_alias": team},
        },
    }


def test_callback_builds_a_tap_exchange(callback_module: types.ModuleType) -> None:
    cb = callback_module.ShadowtrialTap()
    ex = cb.exchange_from(litellm_kwargs(1))
    (decoded,) = decode_exchanges(json.dumps(ex).encode())
    assert decoded.exchange_id == "call-1" and decoded.team == "team-a" and decoded.model == INCUMBENT
    assert decoded.route == "/v1/chat/completions" and decoded.latency_ms == 250.0
    assert decoded.request.params == {"max_tokens": 64, "temperature": 0.2}  # allow-listed: no "user"
    assert decoded.response.usage.cost_usd is None  # LiteLLM could not price it: unknown, not 0
    assert decoded.served_at == "2026-09-21T14:13:20Z"

    redacted = cb.exchange_from(litellm_kwargs(2, user="redacted-by-litellm", content="redacted-by-litellm"))
    assert redacted["redacted"] is True
    assert redacted["request"]["messages"] == [] and redacted["response"]["content"] is None

    shadow = litellm_kwargs(3, headers={"X-Shadowtrial-Shadow": "1"})
    assert cb.exchange_from(shadow) is None
    assert cb.stats()["skipped_shadow_call"] == 1


async def test_callback_hands_exchanges_to_the_real_tap(tmp_path: Path, callback_module: types.ModuleType) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=0.0)
        cb = callback_module.ShadowtrialTap(h.sidecar.tap_url + "/v1/exchanges", batch_size=7, flush_s=0.01,
                                           timeout_s=DELIVERY_TIMEOUT_S)
        for i in range(20):
            await cb.async_log_success_event(litellm_kwargs(i), None, None, None)
        await cb.async_log_success_event(litellm_kwargs(99, content="redacted-by-litellm"), None, None, None)
        await wait_for(lambda: _async(cb.stats().get("sent", 0) == 21), what="21 exchanges sent")
        await cb.aclose()
        assert not any(k.startswith("dropped") for k in cb.stats()), cb.stats()
        assert h.runtime.counters["exchanges_received"] == 21
        view = await h.settle(trial["id"], 21)
        assert view["funnel"]["outcomes"]["not_sampled"] == 20
        assert view["funnel"]["outcomes"]["skipped_redacted"] == 1


async def test_callback_drops_and_counts_when_the_tap_is_down(callback_module: types.ModuleType) -> None:
    cb = callback_module.ShadowtrialTap("http://127.0.0.1:9/v1/exchanges", flush_s=0.0, timeout_s=0.2)
    await cb.async_log_success_event(litellm_kwargs(1), None, None, None)  # returns at once
    await cb.aclose()
    stats = cb.stats()
    assert stats.get("sent", 0) == 0 and stats.get("dropped_unreachable", 0) + stats.get("dropped_timeout", 0) == 1


async def test_callback_presampling_agrees_with_the_sidecar(tmp_path: Path, callback_module: types.ModuleType) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(sample_rate=0.3)
        cb = callback_module.ShadowtrialTap(
            h.sidecar.tap_url + "/v1/exchanges", admin_url=h.sidecar.admin_url, flush_s=0.01,
            timeout_s=DELIVERY_TIMEOUT_S,
        )
        await cb._refresh_trials()  # the first read, which would otherwise run in the background
        assert cb._is_sampled is is_sampled
        n = 60
        for i in range(n):
            await cb.async_log_success_event(litellm_kwargs(i), None, None, None)
        await cb.async_log_success_event(litellm_kwargs(500, team="team-other"), None, None, None)
        expected = sum(is_sampled(trial["id"], f"call-{i}", 0.3) for i in range(n))
        assert 0 < expected < n
        await wait_for(lambda: _async(cb.stats().get("sent", 0) == expected), what="sampled exchanges sent")
        await cb.aclose()
        assert cb.stats()["skipped_presampled"] == n + 1 - expected
        assert h.runtime.counters["cases_sampled"] == expected  # everything sent is sampled by the sidecar too


async def _async(value: bool) -> bool:
    return value


# -- the control plane's example (issue 25, item 6) ----------------------------------


async def test_the_collector_example_starts_takes_a_batch_and_serves_its_console(tmp_path: Path) -> None:
    """deploy/examples/collector.toml as shipped (only its listen port, database and key paths
    moved into the test's directory), with the keys its header says to make: it starts, takes
    a batch signed as deploy/examples/sidecar-uplink.toml signs, and serves the console's
    screens and /v1/results to an admin token of its [auth]."""
    import gzip
    import time

    import httpx

    from sidecar.auth.mint import generate_key_pair, load_signing_key, mint
    from sidecar.collector.server import CollectorServer
    from uplink.schema import CaseResult, encode_batch
    from uplink.signing import Signer, load_private_key

    examples = DEPLOY / "examples"
    generate_key_pair(tmp_path / "keys", name="uplink")
    admin_key, _ = generate_key_pair(tmp_path / "keys", name="admin")
    text = (examples / "collector.toml").read_text()
    for old, new in (('"keys/', f'"{tmp_path}/keys/'), ('listen = "127.0.0.1:8792"', 'listen = "127.0.0.1:0"'),
                     ('db_path = "collector.db"', f'db_path = "{tmp_path}/collector.db"')):
        assert old in text, old
        text = text.replace(old, new)
    (tmp_path / "collector.toml").write_text(text)
    config = load_config(str(tmp_path / "collector.toml"), {})
    sidecar = load_config(str(examples / "sidecar-uplink.toml"), {})
    up = sidecar.uplink
    assert (up.audience, up.key_id, up.issuer) == (config.collector.audience, config.collector.keys[0].kid,
                                                   config.collector.issuers[0])
    assert up.collector_url.rstrip("/") == f"http://{config_listen(examples)}" and up.console_url.endswith("/console/")
    async with CollectorServer(config.collector, config=config) as c:
        signer = Signer(key=load_private_key(str(tmp_path / "keys" / "uplink.key")), kid=up.key_id, issuer=up.issuer,
                        audience=up.audience)
        record = CaseResult(id="case:t1:c1", trial_id="t1", case_id="c1", exchange_id="x1", team="search",
                            outcome="judged", finished_at=time.time(), score=1.0)
        token = mint(key=load_signing_key(str(admin_key), "EdDSA"), algorithm="EdDSA", subject="you",
                     audience=config.auth.audience, issuer=config.auth.issuer, roles=["platform_admin"], teams=[],
                     kid="admin")
        async with httpx.AsyncClient(base_url=c.url) as client:
            r = await client.post("/v1/uplink/batches", content=gzip.compress(encode_batch(up.sidecar_id, time.time(), [record])),
                                  headers={"Authorization": f"Bearer {signer.token()}", "Content-Encoding": "gzip"})
            assert r.status_code == 200 and r.json()["acked"] == ["case:t1:c1"], r.text
            admin = {"Authorization": f"Bearer {token}"}
            results = await client.get("/v1/results", headers=admin)
            assert results.status_code == 200 and [t["id"] for t in results.json()["traffic"]] == ["t1"], results.text
            for screen in ("live", "results", "trials", "watches", "experiments", "datasets", "comparisons"):
                page = await client.get(f"/console/{screen}", headers=admin)
                assert page.status_code == 200, (screen, page.text[:300])
            assert (await client.get("/console/live")).status_code in (302, 303)  # no token: the sign-in page


def config_listen(examples: Path) -> str:
    import tomllib

    listen: str = tomllib.loads((examples / "collector.toml").read_text())["collector"]["listen"]
    return listen
