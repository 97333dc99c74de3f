"""What an operator applies, checked offline: deploy/kubernetes/ and deploy/compose/.

Kubernetes. The kustomization is assembled here (its ``resources`` and
``configMapGenerator``, the only features it uses: an unknown one fails the
assembly rather than being skipped), and every object is validated against the
Kubernetes JSON schemas that kubernetes-validate ships (no network), in strict
mode (an unknown field is an error), for the oldest Kubernetes the manifests
support (1.29: native sidecar containers on by default) and the newest the
pinned validator ships. A deliberately broken copy of the Deployment shows that
a typo'd field name fails. Where kubectl is installed, the assembly is compared
with ``kubectl kustomize``. Then the facts no schema sees: the sidecar is a
native sidecar, its probes ask real, unauthenticated routes of the config as
deployed, the tap is reachable only inside the pod, every Secret key the pod
reads is one deploy/README.md creates, Service links are off (they would put
variables into the environment that ``serve`` refuses), the plugin copy step
works and the plugin needs nothing the gateway lacks.

Compose. deploy/compose/compose.yaml is validated against the compose-spec
schema that check-jsonschema ships, and checked to hang together: the shared
network namespace, loopback-only ports, mounts that exist, and a sidecar config
that loads with the environment compose gives it.
"""

from __future__ import annotations

import ast
import copy
import importlib.resources
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any, Iterator

import httpx
import jsonschema
import kubernetes_validate
import pytest
import yaml

from sidecar.app import Sidecar
from sidecar.auth.mint import generate_key_pair, jwk_of, load_signing_key, mint
from sidecar.config import Config, is_loopback, load_config, split_listen
from sidecar.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE_DIR = DEPLOY / "compose"
COMPOSE = COMPOSE_DIR / "compose.yaml"

#: The oldest Kubernetes the manifests support (native sidecars on by default) and the
#: newest schema set kubernetes-validate 1.37 ships.
KUBERNETES_VERSIONS = ("1.29", "1.37")
#: What the sidecar image runs as (deploy/Dockerfile: USER 10001:10001).
IMAGE_UID = 10001
#: LiteLLM's config names a callback as ``module.instance``; the module is a file beside it.
PLUGIN_CALLBACK = "shadowtrial_callback.proxy_handler_instance"
PLUGIN_MODULE = "sidecar.integrations.litellm"


# -- assembling the kustomization ----------------------------------------------------


def yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


_KUSTOMIZATION_KEYS = {"apiVersion", "kind", "resources", "configMapGenerator"}


def kustomize_build(root: Path) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize root`` makes, generated ConfigMaps without their hash suffix."""
    kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())
    unknown = set(kustomization) - _KUSTOMIZATION_KEYS
    assert not unknown, f"kustomization.yaml uses {sorted(unknown)}: teach kustomize_build to apply it"
    objects = [d for name in kustomization["resources"] for d in yaml_documents(root / name)]
    for generator in kustomization.get("configMapGenerator", []):
        assert set(generator) <= {"name", "files", "options"}, generator
        assert set(generator.get("options", {})) <= {"labels"}, generator
        data: dict[str, str] = {}
        for entry in generator["files"]:
            key, sep, rel = entry.partition("=")
            if not sep:
                key, rel = PurePosixPath(entry).name, entry
            assert key not in data, f"{generator['name']}: key {key} twice"
            data[key] = (root / rel).read_text()
        metadata: dict[str, Any] = {"name": generator["name"]}
        if generator.get("options", {}).get("labels"):
            metadata["labels"] = dict(generator["options"]["labels"])
        objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data})
    return objects


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return kustomize_build(K8S)


def the(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def pod_of(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = the(objects, "Deployment")["spec"]["template"]["spec"]
    return spec


def containers(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every container of the pod by name, init containers included."""
    every = pod.get("initContainers", []) + pod["containers"]
    named = {c["name"]: c for c in every}
    assert len(named) == len(every), "container names must be unique across init and regular containers"
    return named


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def mount_for(pod: dict[str, Any], container: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (volumeMount, volume) under which ``path`` lies in ``container``."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container.get("volumeMounts", []):
        if PurePosixPath(path).is_relative_to(mount["mountPath"]):
            return mount, volumes[mount["name"]]
    raise AssertionError(f"{container['name']}: nothing mounted at {path}")


def config_map_file(objects: list[dict[str, Any]], pod: dict[str, Any], container: dict[str, Any], path: str) -> str:
    """The text of the file ``path`` as ``container`` sees it, from a ConfigMap volume."""
    mount, volume = mount_for(pod, container, path)
    assert "configMap" in volume, f"{path} is not from a ConfigMap"
    key = str(PurePosixPath(path).relative_to(mount["mountPath"]))
    data: dict[str, str] = the(objects, "ConfigMap", volume["configMap"]["name"])["data"]
    assert key in data, f"ConfigMap {volume['configMap']['name']} has no {key}"
    return data[key]


def arg_after(container: dict[str, Any], flag: str) -> str:
    args = container.get("command", []) + container.get("args", [])
    return str(args[args.index(flag) + 1])


def sidecar_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What the pod's Secrets give the sidecar (test values)."""
    return {"OPENAI_API_KEY": "sk-test-openai", "ANTHROPIC_API_KEY": "sk-test-anthropic",
            "TAP_TOKEN": "tap-token-test", **(extra or {})}


@pytest.fixture(scope="module")
def pod_config_text(objects: list[dict[str, Any]]) -> str:
    pod = pod_of(objects)
    sidecar = containers(pod)["shadowtrial"]
    return config_map_file(objects, pod, sidecar, arg_after(sidecar, "--config"))


def load_pod_config(tmp_path: Path, text: str, environ: dict[str, str]) -> Config:
    path = tmp_path / "shadowtrial.toml"
    path.write_text(text)
    return load_config(str(path), environ)


# -- schema validation ---------------------------------------------------------------


def schema_errors(obj: dict[str, Any], version: str) -> list[str]:
    """Strict validation against the Kubernetes ``version`` schemas the package ships."""
    where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
    try:
        used = kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        path = ".".join(str(p) for p in exc.path)
        return [f"{where} at {path or '$'}: {exc.message}"]
    # The validator falls back to the newest schema set not newer than the one asked for.
    assert used == version, f"asked for Kubernetes {version}, validated against {used}"
    return []


def test_the_pinned_kubernetes_versions_ship_with_the_validator() -> None:
    shipped = {kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()}
    assert set(KUBERNETES_VERSIONS) <= shipped


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_object_validates_against_the_kubernetes_schemas(objects: list[dict[str, Any]], version: str) -> None:
    errors = [e for obj in objects for e in schema_errors(obj, version)]
    assert not errors, "\n".join(errors)
    kinds = sorted(o["kind"] for o in objects)
    assert kinds == ["ConfigMap", "ConfigMap", "Deployment", "NetworkPolicy", "PersistentVolumeClaim",
                     "Service", "Service"]


def test_every_manifest_file_is_in_the_kustomization() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    on_disk = {p.relative_to(K8S).as_posix() for p in K8S.rglob("*") if p.is_file()}
    listed = set(kustomization["resources"]) | {"kustomization.yaml"}
    generated = {e.partition("=")[2] or e for g in kustomization["configMapGenerator"] for e in g["files"]}
    assert on_disk == listed | generated, "a file under deploy/kubernetes/ that nothing applies (or a missing one)"


BROKEN_COPIES = [
    # (what is replaced, by what, what the error names): a typo'd field at three depths, a wrong type
    ("readOnlyRootFilesystem: true", "readOnlyRootFileSystem: true", "readOnlyRootFileSystem"),
    ("terminationGracePeriodSeconds: 60", "terminationGracePeriodSecond: 60", "terminationGracePeriodSecond"),
    ("\n          restartPolicy: Always\n", "\n          restartPolicyy: Always\n", "restartPolicyy"),
    ("failureThreshold: 60", "failureThresholds: 60", "failureThresholds"),
    ("containerPort: 8791", 'containerPort: "8791"', "is not of type 'integer'"),
]


@pytest.mark.parametrize(("old", "new", "named"), BROKEN_COPIES, ids=[b[2] for b in BROKEN_COPIES])
def test_a_broken_copy_of_the_deployment_fails_validation(tmp_path: Path, old: str, new: str, named: str) -> None:
    text = (K8S / "deployment.yaml").read_text()
    assert old in text
    broken = tmp_path / "deployment.yaml"
    broken.write_text(text.replace(old, new, 1))
    (deployment,) = yaml_documents(broken)
    for version in KUBERNETES_VERSIONS:
        errors = schema_errors(deployment, version)
        assert errors and named in errors[0], errors


def test_strict_mode_is_what_catches_a_typo() -> None:
    """Without strict mode the same typo passes: the test above depends on strict=True."""
    (deployment,) = yaml_documents(K8S / "deployment.yaml")
    broken = copy.deepcopy(deployment)
    sidecar = containers(broken["spec"]["template"]["spec"])["shadowtrial"]
    sidecar["securityContext"]["readOnlyRootFileSystem"] = sidecar["securityContext"].pop("readOnlyRootFilesystem")
    kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[0], strict=False)
    assert schema_errors(broken, KUBERNETES_VERSIONS[0])


def _without_hash(value: Any, names: set[str]) -> Any:
    if isinstance(value, dict):
        return {k: _without_hash(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_hash(v, names) for v in value]
    if isinstance(value, str):
        match = re.fullmatch(r"(.+)-[a-z0-9]{10}", value)
        if match and match.group(1) in names:
            return match.group(1)
    return value


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed (it is not a project dependency)")
def test_the_assembly_matches_kubectl_kustomize(objects: list[dict[str, Any]]) -> None:
    out = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=60, check=True)
    generated = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    built = [_without_hash(d, generated) for d in yaml.safe_load_all(out.stdout) if d]

    def key(o: dict[str, Any]) -> tuple[str, str]:
        return o["kind"], o["metadata"]["name"]

    assert sorted(built, key=key) == sorted(objects, key=key)


# -- the pod -------------------------------------------------------------------------


def test_the_sidecar_is_a_native_sidecar_beside_the_gateway(objects: list[dict[str, Any]]) -> None:
    pod = pod_of(objects)
    every = containers(pod)
    assert [c["name"] for c in pod["containers"]] == ["gateway"]
    sidecar = every["shadowtrial"]
    assert sidecar in pod["initContainers"] and sidecar["restartPolicy"] == "Always"
    assert arg_after(sidecar, "serve") == "--config"
    for c in pod["initContainers"]:
        if c.get("restartPolicy") != "Always":  # a regular init container: the API refuses probes and hooks
            assert not {"livenessProbe", "readinessProbe", "startupProbe", "lifecycle"} & set(c), c["name"]
    assert all("restartPolicy" not in c for c in pod["containers"])  # init containers only, before 1.34
    gateway = every["gateway"]
    assert re.fullmatch(r"ghcr\.io/berriai/litellm:[\w.-]+", gateway["image"]) and ":latest" not in gateway["image"]


def test_probes_ask_real_routes_and_never_gate_the_gateway_on_the_sidecar(objects: list[dict[str, Any]]) -> None:
    pod = pod_of(objects)
    every = containers(pod)
    sidecar = every["shadowtrial"]
    assert sidecar["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    assert sidecar["livenessProbe"]["httpGet"] == {"path": "/readyz", "port": "admin"}
    # The kubelet counts a sidecar's readiness in the pod's: a readiness probe here would take
    # the gateway out of its Service whenever the sidecar is unready (product rule 1).
    assert "readinessProbe" not in sidecar
    # Liveness must not kill a sidecar that is draining: 3 misses take longer than the drain.
    live = sidecar["livenessProbe"]
    assert live["periodSeconds"] * live["failureThreshold"] > 10
    for c in every.values():
        declared = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
            if kind in c:
                port = c[kind]["httpGet"]["port"]
                assert port in declared or port in declared.values(), f"{c['name']} {kind} port {port}"


async def test_the_pod_config_answers_probes_without_a_token_and_nothing_else(
    tmp_path: Path, pod_config_text: str, objects: list[dict[str, Any]],
) -> None:
    """The sidecar's config as deployed (JWT auth, tap token) started for real, on loopback port 0."""
    config = tomllib.loads(pod_config_text)
    private, public = generate_key_pair(tmp_path / "keys", name="idp")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk_of(public.read_bytes(), "idp-1")]}))
    env = sidecar_env({
        "SHADOWTRIAL_TAP__LISTEN": "127.0.0.1:0",
        "SHADOWTRIAL_ADMIN__LISTEN": "127.0.0.1:0",
        "SHADOWTRIAL_STORE__PATH": str(tmp_path / "shadowtrial.db"),
        "SHADOWTRIAL_AUTH__JWKS": str(tmp_path / "jwks.json"),
        "SHADOWTRIAL_ENGINE__ISOLATION": "thread",
    })
    loaded = load_pod_config(tmp_path, pod_config_text, env)
    token = mint(key=load_signing_key(str(private), "EdDSA"), algorithm="EdDSA", kid="idp-1", subject="ops",
                 audience=config["auth"]["audience"], issuer=config["auth"]["issuer"], roles=["viewer"])
    exchange = {"exchange_id": "x-1", "team": "search", "model": "gpt-4o",
                "request": {"messages": [{"role": "user", "content": "hi"}]}, "response": {"content": "hello"}}
    async with Sidecar(loaded) as sc, httpx.AsyncClient(timeout=10) as client:
        sidecar = containers(pod_of(objects))["shadowtrial"]
        probes = {sidecar[k]["httpGet"]["path"] for k in ("startupProbe", "livenessProbe")}
        for path in probes | {"/healthz"}:
            assert (await client.get(sc.admin_url + path)).status_code == 200, path
        assert (await client.get(sc.admin_url + "/v1/trials")).status_code == 401
        listed = await client.get(sc.admin_url + "/v1/trials", headers={"Authorization": f"Bearer {token}"})
        assert listed.status_code == 200, listed.text
        assert (await client.post(sc.tap_url + "/v1/exchanges", json=exchange)).status_code == 401
        sent = await client.post(sc.tap_url + "/v1/exchanges", json=exchange,
                                 headers={"Authorization": "Bearer tap-token-test"})
        assert sent.status_code == 202, sent.text


def test_the_tap_is_reachable_only_inside_the_pod(tmp_path: Path, objects: list[dict[str, Any]], pod_config_text: str) -> None:
    config = load_pod_config(tmp_path, pod_config_text, sidecar_env())
    assert is_loopback(config.tap.listen)
    _, tap_port = split_listen(config.tap.listen)
    _, admin_port = split_listen(config.admin.listen)
    pod = pod_of(objects)
    every = containers(pod)
    declared = [p["containerPort"] for c in every.values() for p in c.get("ports", [])]
    assert tap_port not in declared and admin_port in declared
    for service in (o for o in objects if o["kind"] == "Service"):
        for port in service["spec"]["ports"]:
            assert tap_port not in (port["port"], port.get("targetPort"))
    policy = the(objects, "NetworkPolicy")
    opened = [p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]]
    assert tap_port not in opened and set(opened) <= set(declared)
    # The gateway's plugin posts to the tap on loopback, with the tap's token.
    gateway_env = env_of(every["gateway"])
    assert gateway_env["LITELLM_SHADOWTRIAL_TAP_URL"]["value"] == f"http://127.0.0.1:{tap_port}/v1/exchanges"
    token_ref = gateway_env["LITELLM_SHADOWTRIAL_TAP_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert token_ref == env_of(every["shadowtrial"])[config.tap.token_env]["valueFrom"]["secretKeyRef"]


def test_the_sidecar_config_fits_the_pod(tmp_path: Path, objects: list[dict[str, Any]], pod_config_text: str) -> None:
    config = load_pod_config(tmp_path, pod_config_text, sidecar_env())
    pod = pod_of(objects)
    sidecar = containers(pod)["shadowtrial"]
    _, store = mount_for(pod, sidecar, config.store.path)
    claim = store["persistentVolumeClaim"]["claimName"]
    assert the(objects, "PersistentVolumeClaim", claim)["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert config.store.intake_dir and PurePosixPath(config.store.intake_dir).parent == PurePosixPath(config.store.path).parent
    jwks_mount, jwks_volume = mount_for(pod, sidecar, config.auth.jwks)
    assert "secret" in jwks_volume and jwks_mount.get("readOnly") is True
    # One writer per SQLite file.
    spec = the(objects, "Deployment")["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    # The gateway's shutdown and then the sidecar's drain share the grace period.
    assert pod["terminationGracePeriodSeconds"] >= config.engine.drain_seconds + 30
    # Every secret the config names by variable is filled from a Secret.
    env = env_of(sidecar)
    for variable in [p.api_key_env for p in config.providers.values()] + [config.tap.token_env]:
        assert "secretKeyRef" in env[variable]["valueFrom"], variable
    # Every incumbent the gateway serves is a model the sidecar knows.
    gateway = containers(pod)["gateway"]
    litellm = yaml.safe_load(config_map_file(objects, pod, gateway, arg_after(gateway, "--config")))
    assert {m["model_name"] for m in litellm["model_list"]} <= set(config.models)


def test_service_links_are_off(tmp_path: Path, objects: list[dict[str, Any]], pod_config_text: str) -> None:
    """Kubernetes puts <SERVICE>_SERVICE_HOST and the like into every container for each Service
    of the namespace; for shadowtrial-admin those are SHADOWTRIAL_* names ``serve`` refuses."""
    injected: dict[str, str] = {}
    for service in (o for o in objects if o["kind"] == "Service"):
        prefix = service["metadata"]["name"].upper().replace("-", "_")
        ip = "10.96.0.10"
        first = service["spec"]["ports"][0]
        injected |= {f"{prefix}_SERVICE_HOST": ip, f"{prefix}_SERVICE_PORT": str(first["port"]),
                     f"{prefix}_PORT": f"tcp://{ip}:{first['port']}"}
        for port in service["spec"]["ports"]:
            n = port["port"]
            if "name" in port:
                injected[f"{prefix}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(n)
            injected |= {f"{prefix}_PORT_{n}_TCP": f"tcp://{ip}:{n}", f"{prefix}_PORT_{n}_TCP_PROTO": "tcp",
                         f"{prefix}_PORT_{n}_TCP_PORT": str(n), f"{prefix}_PORT_{n}_TCP_ADDR": ip}
    with pytest.raises(ConfigError, match="SHADOWTRIAL_ADMIN_"):
        load_pod_config(tmp_path, pod_config_text, sidecar_env(injected))
    assert pod_of(objects)["enableServiceLinks"] is False


def test_secrets_the_pod_reads_are_the_ones_the_readme_creates(objects: list[dict[str, Any]], pod_config_text: str) -> None:
    readme = (DEPLOY / "README.md").read_text().replace("\\\n", " ")
    created: dict[str, set[str]] = {}
    for line in readme.splitlines():
        match = re.search(r"kubectl create secret generic ([\w.-]+)(.*)", line)
        if match:
            keys = set(re.findall(r"--from-(?:literal|file)=([\w.-]+)=", match.group(2)))
            created.setdefault(match.group(1), set()).update(keys)
    pod = pod_of(objects)
    needed: dict[str, set[str]] = {}
    for c in containers(pod).values():
        for e in c.get("env", []):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref and not ref.get("optional"):
                needed.setdefault(ref["name"], set()).add(ref["key"])
    sidecar = containers(pod)["shadowtrial"]
    jwks = tomllib.loads(pod_config_text)["auth"]["jwks"]
    mount, volume = mount_for(pod, sidecar, jwks)
    needed.setdefault(volume["secret"]["secretName"], set()).add(str(PurePosixPath(jwks).relative_to(mount["mountPath"])))
    assert needed, "the pod reads no Secret?"
    for name, keys in needed.items():
        assert keys <= created.get(name, set()), f"Secret {name}: deploy/README.md creates {created.get(name)}, the pod reads {keys}"


def test_every_container_is_bounded_and_unprivileged(objects: list[dict[str, Any]]) -> None:
    pod = pod_of(objects)
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["fsGroup"] == IMAGE_UID and pod["automountServiceAccountToken"] is False
    quantity = re.compile(r"\d+(\.\d+)?(m|Ki|Mi|Gi)?")
    for c in containers(pod).values():
        resources = c["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"], c["name"]
        for value in [*resources["requests"].values(), *resources["limits"].values()]:
            assert quantity.fullmatch(str(value)), f"{c['name']}: {value!r}"
        security = c["securityContext"]
        assert security["allowPrivilegeEscalation"] is False and security["capabilities"]["drop"] == ["ALL"]
        if c["image"].startswith("shadowtrial:"):  # ours: non-root, read-only, the image's uid
            assert "cpu" in resources["limits"]
            assert security["runAsNonRoot"] is True and security["readOnlyRootFilesystem"] is True
            assert security["runAsUser"] == security["runAsGroup"] == IMAGE_UID


def test_the_image_tag_is_the_package_version(objects: list[dict[str, Any]]) -> None:
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    ours = {c["image"] for c in containers(pod_of(objects)).values() if not c["image"].startswith("ghcr.io/")}
    assert ours == {f"shadowtrial:{version}"}
    assert f"-t shadowtrial:{version} ." in (DEPLOY / "Dockerfile").read_text()


# -- the plugin in the gateway -------------------------------------------------------


def shim_import(text: str) -> tuple[str, list[str]]:
    """The one ``from MODULE import NAMES`` of a shim file."""
    (node,) = [n for n in ast.parse(text).body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert isinstance(node, ast.ImportFrom) and node.module
    return node.module, [a.name for a in node.names]


def test_the_gateway_loads_the_plugin_shim_from_its_config_directory(objects: list[dict[str, Any]]) -> None:
    pod = pod_of(objects)
    gateway = containers(pod)["gateway"]
    config_path = arg_after(gateway, "--config")
    litellm = yaml.safe_load(config_map_file(objects, pod, gateway, config_path))
    callback = litellm["litellm_settings"]["callbacks"]
    assert callback == PLUGIN_CALLBACK
    module, instance = callback.rsplit(".", 1)
    # LiteLLM resolves the module as a file in the config file's directory.
    shim = config_map_file(objects, pod, gateway, str(PurePosixPath(config_path).parent / f"{module}.py"))
    assert shim_import(shim) == (PLUGIN_MODULE, [instance])
    assert shim == (COMPOSE_DIR / "litellm" / f"{module}.py").read_text(), "the compose shim differs"
    # The package the shim imports is on the gateway's path, put there by the init container.
    install = containers(pod)["install-plugin"]
    target = install["command"][-1]
    assert env_of(gateway)["PYTHONPATH"]["value"] == target
    mount, volume = mount_for(pod, gateway, target)
    assert mount["mountPath"] == target and mount.get("readOnly") is True and "emptyDir" in volume
    assert mount_for(pod, install, target)[0]["name"] == mount["name"]


def test_the_plugin_copy_step_makes_an_importable_tree(tmp_path: Path, objects: list[dict[str, Any]]) -> None:
    """The install-plugin init container's script, run here against this checkout."""
    install = containers(pod_of(objects))["install-plugin"]
    python, flag, script, _target = install["command"]
    assert (python, flag) == ("python", "-c")
    target = tmp_path / "plugin"
    subprocess.run([sys.executable, "-c", script, str(target)], check=True, timeout=60)
    assert {p.name for p in target.iterdir()} == {"sidecar", "policies"}
    assert not list(target.rglob("__pycache__"))
    # A fresh interpreter with no site-packages (so not this editable install) imports the copy.
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import policies.sampling as s, sidecar; "
             "assert s.__file__.startswith(sys.argv[1]) and sidecar.__file__.startswith(sys.argv[1]); "
             "print(s.is_sampled('trial-1', 'exchange-1', 0.17))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", probe, str(target)], check=True, timeout=60,
                         capture_output=True, text=True)
    assert out.stdout.strip() == "True"  # sample_point("trial-1", "exchange-1") is 0.166


#: What the gateway's environment has besides the standard library: LiteLLM and what it ships.
GATEWAY_PROVIDES = {"litellm", "httpx"}


def _module_file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> Iterator[str]:
    """Modules ``path`` imports, ``if TYPE_CHECKING:`` blocks left out."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            yield base
            yield from (f"{base}.{a.name}" for a in node.names)  # a submodule, when one exists


def foreign_imports(root: Path, module: str) -> list[str]:
    """What importing ``module`` from ``root`` pulls in beyond the stdlib, GATEWAY_PROVIDES and ``root``."""
    seen: set[str] = set()
    foreign: list[str] = []
    todo = [module]
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__, a/b/__init__ too
            prefix = ".".join(parts[:i])
            if prefix in seen:
                continue
            seen.add(prefix)
            top = parts[0]
            path = _module_file(root, prefix)
            if path is not None:
                todo.extend(_imports(path, prefix))
            elif top in sys.stdlib_module_names or top == "__future__" or top in GATEWAY_PROVIDES:
                pass
            elif not _module_file(root, top):
                foreign.append(top)
    return sorted(set(foreign))


def test_the_import_closure_checker_follows_relative_imports_and_skips_type_checking(tmp_path: Path) -> None:
    files = {
        "policies/__init__.py": "",
        "policies/sampling.py": "import hashlib\nimport math\n",
        "sidecar/__init__.py": '"""sidecar."""\n',
        "sidecar/integrations/__init__.py": "",
        "sidecar/integrations/litellm.py": (
            "from __future__ import annotations\nfrom typing import TYPE_CHECKING\nimport httpx\n"
            "from policies.sampling import is_sampled\nfrom ..ingest import wire\n"
            "if TYPE_CHECKING:\n    import numpy\n"
            "def later():\n    from litellm.integrations.custom_logger import CustomLogger\n"),
        "sidecar/ingest/__init__.py": "",
        "sidecar/ingest/wire.py": "import msgspec\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert foreign_imports(tmp_path, PLUGIN_MODULE) == ["msgspec"]
    (tmp_path / "sidecar/ingest/wire.py").write_text("import json\n")
    assert foreign_imports(tmp_path, PLUGIN_MODULE) == []


def test_the_plugin_needs_nothing_the_gateway_lacks() -> None:
    """The init container copies only sidecar/ and policies/: the plugin's import closure must
    stay within them, the standard library and what LiteLLM ships."""
    assert foreign_imports(ROOT, "policies.sampling") == []
    assert {"aiohttp", "msgspec", "numpy"} <= set(foreign_imports(ROOT, "sidecar.app"))
    if _module_file(ROOT, PLUGIN_MODULE) is None:
        pytest.skip(f"{PLUGIN_MODULE} is not in this tree yet (issue 10, item 1)")
    assert foreign_imports(ROOT, PLUGIN_MODULE) == []


# -- compose -------------------------------------------------------------------------

_INTERPOLATION = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def interpolate(value: Any, environ: dict[str, str]) -> Any:
    """Compose's ``${VAR}`` and ``${VAR:-default}`` (default when unset or empty); any other ``$`` form fails."""
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if isinstance(value, str):
        assert "$" not in _INTERPOLATION.sub("", value), f"interpolation this test does not know: {value!r}"
        return _INTERPOLATION.sub(lambda m: environ.get(m["name"]) or (m["default"] or ""), value)
    return value


def compose_file(environ: dict[str, str] | None = None) -> dict[str, Any]:
    loaded: dict[str, Any] = interpolate(yaml.safe_load(COMPOSE.read_text()), environ or {})
    return loaded


def compose_schema_errors(document: dict[str, Any]) -> list[str]:
    schema = json.loads(importlib.resources.files("check_jsonschema.builtin_schemas.vendor")
                        .joinpath("compose-spec.json").read_text())
    validator = jsonschema.validators.validator_for(schema)(schema, format_checker=jsonschema.FormatChecker())
    return [f"{'.'.join(map(str, e.path)) or '$'}: {e.message}" for e in validator.iter_errors(document)]


def test_compose_validates_against_the_compose_spec() -> None:
    assert compose_schema_errors(compose_file()) == []


@pytest.mark.parametrize(("old", "new", "named"), [
    ("    network_mode: service:gateway\n    depends_on", "    network_mod: service:gateway\n    depends_on", "network_mod"),
    ("    read_only: true", "    readonly: true", "readonly"),
    ("    cap_drop: [ALL]\n    security_opt", "    cap_drop: ALL\n    security_opt", "is not of type 'array'"),
], ids=["network_mod", "readonly", "wrong type"])
def test_a_broken_copy_of_the_compose_file_fails(old: str, new: str, named: str) -> None:
    text = COMPOSE.read_text()
    assert old in text
    errors = compose_schema_errors(interpolate(yaml.safe_load(text.replace(old, new, 1)), {}))
    assert errors and any(named in e for e in errors), errors


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment", {})
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def test_compose_shares_one_network_namespace_and_publishes_only_on_loopback() -> None:
    services = compose_file()["services"]
    owners = {name for name, s in services.items() if "network_mode" not in s}
    assert owners == {"gateway"}
    for name, service in services.items():
        if name in owners:
            continue
        assert service["network_mode"] == "service:gateway", name
        # Compose refuses ports, networks and the like on a service in another's namespace.
        assert not {"ports", "networks", "hostname", "dns", "extra_hosts", "expose"} & set(service), name
        assert "gateway" in service["depends_on"], name
    for port in services["gateway"]["ports"]:
        assert str(port).startswith("127.0.0.1:"), port
    for name, service in services.items():
        for target in service.get("depends_on", {}):
            assert target in services, f"{name} depends on {target}"


def test_compose_mounts_and_builds_exist() -> None:
    document = compose_file()
    for name, service in document["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name}: {source}"
            else:
                assert source in document["volumes"], f"{name}: volume {source} is not declared"
        if "build" in service:
            context = (COMPOSE_DIR / service["build"]["context"]).resolve()
            assert context == ROOT and (context / service["build"]["dockerfile"]).is_file()
            version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
            assert service["image"] == f"shadowtrial:{version}"
            assert service["user"] == f"{IMAGE_UID}:{IMAGE_UID}" and service["read_only"] is True
            assert service["cap_drop"] == ["ALL"]


@pytest.mark.parametrize("host_env", [{}, {"UPSTREAM_BASE_URL": "http://127.0.0.1:11434/v1", "UPSTREAM_API_KEY": "k",
                                          "SHADOWTRIAL_TAP_TOKEN": "t0k3n"}], ids=["defaults", "real upstream"])
def test_compose_sidecar_and_gateway_agree(tmp_path: Path, host_env: dict[str, str]) -> None:
    services = compose_file(host_env)["services"]
    sidecar, gateway, fake = services["shadowtrial"], services["gateway"], services["fake-provider"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in sidecar["volumes"]}
    config_path = sidecar["command"][sidecar["command"].index("--config") + 1]
    text = (COMPOSE_DIR / mounts[config_path]).read_text()
    config = load_pod_config(tmp_path, text, service_env(sidecar))
    assert is_loopback(config.tap.listen) and is_loopback(config.admin.listen)  # auth off is loopback-only
    genv = service_env(gateway)
    _, tap_port = split_listen(config.tap.listen)
    assert genv["LITELLM_SHADOWTRIAL_TAP_URL"] == f"http://127.0.0.1:{tap_port}/v1/exchanges"
    assert genv["LITELLM_SHADOWTRIAL_TAP_TOKEN"] == config.secrets.tap_token
    (provider,) = config.providers.values()
    assert provider.base_url == genv["UPSTREAM_BASE_URL"]
    assert config.secrets[next(iter(config.providers))] == genv["UPSTREAM_API_KEY"]
    # The fake provider listens where the default upstream points.
    listen = fake["command"][fake["command"].index("--listen") + 1]
    assert compose_file()["services"]["gateway"]["environment"]["UPSTREAM_BASE_URL"] == f"http://{listen}/v1"
    # The gateway's config registers the plugin; its shim and package are mounted where it looks.
    gmounts = {v.split(":")[1]: v.split(":")[0] for v in gateway["volumes"]}
    config_dir = PurePosixPath(gateway["command"][gateway["command"].index("--config") + 1]).parent
    litellm_dir = COMPOSE_DIR / gmounts[str(config_dir)]
    litellm = yaml.safe_load((litellm_dir / "config.yaml").read_text())
    assert litellm["litellm_settings"]["callbacks"] == PLUGIN_CALLBACK
    module, instance = PLUGIN_CALLBACK.rsplit(".", 1)
    assert shim_import((litellm_dir / f"{module}.py").read_text()) == (PLUGIN_MODULE, [instance])
    plugin_path = genv["PYTHONPATH"]
    for package in ("sidecar", "policies"):
        assert (COMPOSE_DIR / gmounts[f"{plugin_path}/{package}"]).resolve() == ROOT / package
    assert {m["model_name"] for m in litellm["model_list"]} <= set(config.models)


# -- docs/integrations.md ------------------------------------------------------------


def test_the_integration_guide_snippets_parse_and_agree_with_the_code() -> None:
    from policies.sampling import sample_point
    from sidecar.ingest.wire import decode_exchanges

    text = (ROOT / "docs" / "integrations.md").read_text()
    blocks = re.findall(r"```(\w*)\n(.*?)```", text, re.S)
    kinds = [kind for kind, _ in blocks]
    assert {"yaml", "json", "python"} <= set(kinds)
    for kind, body in blocks:
        if kind == "yaml":
            assert yaml.safe_load(body) is not None
        elif kind == "json":
            (exchange,) = decode_exchanges(body.encode())
            assert exchange.exchange_id and not exchange.redacted
        elif kind == "python":
            compile(body, "docs/integrations.md", "exec")
    known = re.search(r'`sample_point\("trial-1", "exchange-1"\)`\s+is `([0-9.]+)`', text)
    assert known and float(known.group(1)) == sample_point("trial-1", "exchange-1")
    assert 'callbacks: shadowtrial_callback.proxy_handler_instance' in text and PLUGIN_MODULE in text


# -- compose: the control plane (issue 25, item 6) -------------------------------------

CONTROL_PLANE = COMPOSE_DIR / "control-plane.yaml"


def control_plane_file(environ: dict[str, str] | None = None) -> dict[str, Any]:
    loaded: dict[str, Any] = interpolate(yaml.safe_load(CONTROL_PLANE.read_text()), environ or {})
    return loaded


def test_control_plane_compose_validates_against_the_compose_spec() -> None:
    assert compose_schema_errors(control_plane_file()) == []
    broken = CONTROL_PLANE.read_text().replace("    depends_on:\n      db:", "    depend_on:\n      db:", 1)
    assert any("depend_on" in e for e in compose_schema_errors(interpolate(yaml.safe_load(broken), {})))


def test_control_plane_compose_hangs_together(tmp_path: Path) -> None:
    document = control_plane_file({"POSTGRES_PASSWORD": "s3cret"})
    services = document["services"]
    assert {"gateway", "shadowtrial", "collector", "db"} <= set(services)
    for name, service in services.items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)
        for target in service.get("depends_on", {}):
            assert target in services, f"{name} depends on {target}"
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).exists(), f"{name}: {source}"
            else:
                assert source in document["volumes"], f"{name}: volume {source} is not declared"
    sidecar_svc, collector_svc = services["shadowtrial"], services["collector"]
    assert sidecar_svc["network_mode"] == "service:gateway"

    def config_of(service: dict[str, Any], name: str) -> Config:
        mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        path = service["command"][service["command"].index("--config") + 1]
        (tmp_path / name).mkdir()
        return load_pod_config(tmp_path / name, (COMPOSE_DIR / mounts[path]).read_text(), service_env(service))

    sidecar = config_of(sidecar_svc, "sidecar")
    collector = config_of(collector_svc, "collector")
    up, cp = sidecar.uplink, collector.collector
    # The sidecar's batches verify at the collector: audience, issuer and key id agree.
    assert (up.audience, up.issuer, up.key_id) == (cp.audience, cp.issuers[0], cp.keys[0].kid)
    keys_mount = {v.split(":")[1]: v.split(":")[0] for v in collector_svc["volumes"]}
    keys_dir = PurePosixPath(cp.keys[0].path).parent
    assert keys_mount[str(keys_dir)] == "keys" and PurePosixPath(up.private_key_file).parent == keys_dir
    assert PurePosixPath(collector.auth.keys[0].path).parent == keys_dir
    # It reaches the collector by its service name, on the port the collector listens on;
    # the operator's browser reaches the console where the collector publishes it.
    _, port = split_listen(cp.listen)
    assert up.collector_url == f"http://collector:{port}"
    host_ip, host_port, container_port = str(collector_svc["ports"][0]).split(":")
    assert int(container_port) == port and up.console_url == f"http://{host_ip}:{host_port}/console/"
    # PostgreSQL: the collector's store is the db service, with the password compose gives both.
    assert cp.location == "postgresql://shadowtrial:s3cret@db:5432/shadowtrial"
    assert services["db"]["environment"]["POSTGRES_PASSWORD"] == "s3cret"
    # Every model the collector and the sidecar call is served by the models service.
    listen = services["models"]["command"][services["models"]["command"].index("--listen") + 1]
    for config in (sidecar, collector):
        (provider,) = config.providers.values()
        assert provider.base_url == f"http://models:{split_listen(listen)[1]}/v1"
