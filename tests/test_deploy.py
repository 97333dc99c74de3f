"""What deploy/ ships: the manifests hang together, the config map's TOML is a
config the sidecar accepts, and the LiteLLM callback shim names the plugin
(``sidecar.integrations.litellm``), which builds exchanges the real tap takes.

PyYAML is not a dependency: with it the manifests are parsed and checked as
objects; without it the same facts are checked on the text. LiteLLM is not
installed either: its ``CustomLogger`` base class is replaced by a stub module
for the callback tests (the only LiteLLM name the plugin imports). The plugin's
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
from tests.harness import INCUMBENT, Harness, wait_for

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
CALLBACK = DEPLOY / "gateways" / "litellm" / "shadowtrial_callback.py"
PROVIDER_ENV = {"OPENAI_API_KEY": "sk-test-openai", "ANTHROPIC_API_KEY": "sk-test-anthropic"}

try:
    import yaml
except ImportError:  # not a dependency
    yaml = None


def block_scalar(text: str, key: str) -> str:
    """The body of ``key: |`` in a YAML text (enough for our own config map)."""
    match = re.search(rf"^(?P<indent>[ ]*){re.escape(key)}: \|[-+]?\n", text, re.M)
    assert match, f"no block scalar {key!r}"
    lines = text[match.end():].splitlines()
    body: list[str] = []
    indent: int | None = None
    for line in lines:
        if line.strip() == "":
            body.append("")
            continue
        this = len(line) - len(line.lstrip(" "))
        if indent is None:
            indent = this
        if this < indent or line.startswith("---"):
            break
        body.append(line[indent:])
    return "\n".join(body).strip("\n") + "\n"


def config_toml() -> str:
    text = (K8S / "configmap.yaml").read_text()
    if yaml is not None:
        maps = {d["metadata"]["name"]: d for d in yaml.safe_load_all(text) if d}
        return str(maps["shadowtrial-config"]["data"]["shadowtrial.toml"])
    return block_scalar(text, "shadowtrial.toml")


# -- Kubernetes ----------------------------------------------------------------


def test_config_map_toml_is_a_valid_sidecar_config(tmp_path: Path) -> None:
    path = tmp_path / "shadowtrial.toml"
    path.write_text(config_toml())
    config = load_config(str(path), PROVIDER_ENV)
    assert config.tap.listen == "127.0.0.1:8790"  # in-pod only
    assert config.admin.listen == "0.0.0.0:8791"  # behind the Service
    assert config.store.path.startswith("/var/lib/shadowtrial/")  # on the PVC
    assert set(config.secrets) == {"openai", "anthropic"}
    deployment = (K8S / "deployment.yaml").read_text()
    assert "terminationGracePeriodSeconds: 30" in deployment and config.engine.drain_seconds < 30
    for provider in config.providers.values():  # every key variable is filled from the Secret
        assert re.search(rf"- name: {provider.api_key_env}\n\s+valueFrom:\n\s+secretKeyRef:", deployment)


def test_kubernetes_manifests_hang_together() -> None:
    files = sorted(K8S.glob("*.yaml"))
    listed = re.findall(r"^  - (\S+\.yaml)$", (K8S / "kustomization.yaml").read_text(), re.M)
    assert sorted(listed) == sorted(f.name for f in files if f.name != "kustomization.yaml")
    if yaml is None:
        text = (K8S / "deployment.yaml").read_text()
        assert "httpGet: {path: /healthz, port: admin}" in text
        assert "httpGet: {path: /readyz, port: admin}" in text
        assert re.search(r"readinessProbe:\n\s+httpGet: \{path: /readyz, port: admin\}", text)
        assert re.search(r"livenessProbe:\n\s+httpGet: \{path: /healthz, port: admin\}", text)
        assert "containerPort: 8791" in text and "containerPort: 8790" not in text
        assert "claimName: shadowtrial-data" in text and "mountPath: /var/lib/shadowtrial" in text
        assert "type: Recreate" in text and "replicas: 1" in text
        assert "runAsNonRoot: true" in text
        assert "name: shadowtrial-data" in (K8S / "pvc.yaml").read_text()
        return
    docs = [d for f in files if f.name != "kustomization.yaml" for d in yaml.safe_load_all(f.read_text()) if d]
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    (deployment,) = by_kind["Deployment"]
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    assert set(containers) == {"gateway", "shadowtrial"}
    sidecar = containers["shadowtrial"]
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert sidecar["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert [p["containerPort"] for p in sidecar["ports"]] == [8791]
    assert sidecar["resources"]["requests"] and sidecar["resources"]["limits"]
    assert sidecar["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in sidecar["volumeMounts"]}
    assert mounts["shadowtrial-data"] == "/var/lib/shadowtrial"
    (pvc,) = by_kind["PersistentVolumeClaim"]
    assert volumes["shadowtrial-data"]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    labels = spec["template"]["metadata"]["labels"]
    for service in by_kind["Service"]:
        assert service["spec"]["selector"].items() <= labels.items()


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
        cb = callback_module.ShadowtrialTap(h.sidecar.tap_url + "/v1/exchanges", batch_size=7, flush_s=0.01)
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
