"""A real LiteLLM proxy for the tests and the gateway benchmark.

LiteLLM runs in an environment of its own, as a gateway does in production:
``litellm[proxy]`` at :data:`LITELLM_VERSION` (pinned: newer proxy extras depend on
a package the registries lack) is installed into a virtual environment cached
outside the repository, ``$XDG_CACHE_HOME/shadowtrial/litellm-1.80.0-py3.11``
(``~/.cache`` without XDG), or wherever ``SHADOWTRIAL_LITELLM_VENV`` says.

- :func:`ensure_litellm_venv` builds it once: under an exclusive ``flock`` on a
  lock file beside it (a second run waits, then finds it built), in a temporary
  directory renamed into place when the install and a smoke import succeeded,
  with a marker naming the requirement. A half-built or stale directory is never
  used: it is rebuilt. Cold, the build takes about 40 s (2 cores); warm, a file read.
- :func:`litellm_or_skip` turns a failed build into ``pytest.fail`` when ``CI``
  is set and ``pytest.skip`` (with the reason) otherwise.
- :class:`LiteLLMProxy` runs ``python -m litellm.proxy.proxy_cli --config ...``
  from that environment on a free 127.0.0.1 port, waits for ``/health/readiness``
  (polled with a deadline, never a fixed sleep) and stops it with SIGTERM, then
  SIGKILL after a grace period.
- :func:`write_proxy_dir` writes a proxy's ``config.yaml`` (JSON, which YAML reads)
  and the modules it loads from its directory: the plugin shim (the repository's
  ``deploy/gateways/litellm/shadowtrial_callback.py``), the key → team table
  (:data:`TEAM_KEYS`, through LiteLLM's ``custom_auth`` hook: its key and team
  management needs a database, see ``tests/integrations/FINDINGS.md``), and a
  sender of the generic API logger's wire format (:data:`GENERIC_SENDER`).

The proxy's environment is built from scratch (:func:`proxy_env`): no proxy
variables of the caller, ``PYTHONPATH`` = the checkout (so the plugin imports
``sidecar.integrations.litellm`` from it), and ``LITELLM_LOCAL_MODEL_COST_MAP``
so that importing LiteLLM reads the price map it ships instead of downloading one.
Nothing here talks to any address but 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

LITELLM_VERSION = "1.80.0"
REQUIREMENT = f"litellm[proxy]=={LITELLM_VERSION}"
#: What LiteLLM's ``otel`` callback needs to export over OTLP/HTTP (``litellm[proxy]`` brings only
#: the API; the callback imports the gRPC exporter too, whichever it uses): installed with LiteLLM,
#: and into an environment built before they were listed (:func:`ensure_otel_exporter`), so the
#: marker and every other test's cached build stay valid.
OTEL_REQUIREMENTS = (
    "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http", "opentelemetry-exporter-otlp-proto-grpc",
)
_OTEL_PROBE = ("import opentelemetry.sdk.trace, opentelemetry.exporter.otlp.proto.http.trace_exporter, "
               "opentelemetry.exporter.otlp.proto.grpc.trace_exporter")
VENV_ENV = "SHADOWTRIAL_LITELLM_VENV"
REPO_ROOT = Path(__file__).resolve().parent.parent
PLUGIN_SHIM = REPO_ROOT / "deploy" / "gateways" / "litellm" / "shadowtrial_callback.py"
HOST = "127.0.0.1"
MASTER_KEY = "sk-shadowtrial-master"
#: The gateway's keys: key -> (team id, team alias). Teams come only from the key.
TEAM_KEYS: dict[str, tuple[str, str]] = {
    f"sk-{team}": (f"{team}-id", team)
    for team in ("team-a", "team-b", "team-c", "team-d", "team-e", "team-f", "team-g", "team-h", "victim")
}
_MARKER = ".shadowtrial-ready"
_OTEL_MARKER = ".shadowtrial-otel-ready"
_BUILD_TIMEOUT_S = 900.0

T = TypeVar("T")


class LiteLLMUnavailable(RuntimeError):
    """The LiteLLM environment could not be built (the message says why)."""


# --- the environment ---------------------------------------------------------------


def default_venv_dir(environ: Mapping[str, str] = os.environ) -> Path:
    if environ.get(VENV_ENV):
        return Path(environ[VENV_ENV]).expanduser()
    cache = Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    tag = f"py{sys.version_info.major}.{sys.version_info.minor}"
    return cache / "shadowtrial" / f"litellm-{LITELLM_VERSION}-{tag}"


def _marker_text() -> str:
    return f"{REQUIREMENT}\npython {sys.version_info.major}.{sys.version_info.minor}\n"


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def is_built(venv: Path) -> bool:
    marker = venv / _MARKER
    try:
        return marker.read_text() == _marker_text() and venv_python(venv).exists()
    except OSError:
        return False


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if not line.startswith("WARNING: Location")]
    return "\n".join(kept[-lines:])


def ensure_litellm_venv(venv: Path | None = None, *, timeout_s: float = _BUILD_TIMEOUT_S) -> Path:
    """The built environment's directory, building it first when needed (see the module docstring).

    Raises :class:`LiteLLMUnavailable` with the reason (the install log's tail) when it
    cannot be built; leaves no partial directory behind."""
    venv = (venv or default_venv_dir()).resolve()
    if is_built(venv):
        return venv
    try:
        venv.parent.mkdir(parents=True, exist_ok=True)
        lock = open(venv.parent / f".{venv.name}.lock", "w")
    except OSError as exc:
        raise LiteLLMUnavailable(f"cannot create {venv.parent}: {exc}") from exc
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another run building it: wait for it, then use its result
        if is_built(venv):
            return venv
        if venv.exists():  # left by an interrupted or older build: never half-used
            shutil.rmtree(venv)
        build = Path(tempfile.mkdtemp(prefix=f".{venv.name}.build-", dir=venv.parent))
        try:
            _build(build, timeout_s)
            build.chmod(0o755)  # mkdtemp made it private
            os.rename(build, venv)
        except BaseException:
            shutil.rmtree(build, ignore_errors=True)
            raise
    return venv


def _build(target: Path, timeout_s: float) -> None:
    log_path = target.parent / f"{target.name}.log"
    deadline = time.monotonic() + timeout_s
    steps: list[tuple[str, list[str]]] = [
        ("create the virtual environment", [sys.executable, "-m", "venv", str(target)]),
        ("install " + REQUIREMENT,
         [str(venv_python(target)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", REQUIREMENT,
          *OTEL_REQUIREMENTS]),
        # A smoke test of what the proxy needs, without importing litellm itself (which is slow).
        ("import the proxy's dependencies",
         [str(venv_python(target)), "-c",
          "import importlib.metadata as m, fastapi, uvicorn, backoff, orjson, yaml;"
          f"v = m.version('litellm'); assert v == {LITELLM_VERSION!r}, v"]),
    ]
    try:
        with open(log_path, "w") as log:
            for what, argv in steps:
                remaining = deadline - time.monotonic()
                try:
                    done = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                          timeout=max(remaining, 1.0), env=_build_env())
                except subprocess.TimeoutExpired:
                    raise LiteLLMUnavailable(f"building the LiteLLM environment timed out ({what})") from None
                except OSError as exc:
                    raise LiteLLMUnavailable(f"cannot {what}: {exc}") from exc
                if done.returncode != 0:
                    log.flush()
                    raise LiteLLMUnavailable(
                        f"could not {what} (exit {done.returncode}) into {target}:\n{_tail(log_path)}")
        (target / _MARKER).write_text(_marker_text())
    finally:
        log_path.unlink(missing_ok=True)


def _build_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PIP_NO_INPUT"] = "1"
    return env


def _otel_marker_text() -> str:
    return f"{_marker_text()}{' '.join(OTEL_REQUIREMENTS)}\n"


def ensure_otel_exporter(venv: Path, *, timeout_s: float = 300.0) -> None:
    """Install :data:`OTEL_REQUIREMENTS` into a built environment that lacks them (under the
    build's lock). Raises :class:`LiteLLMUnavailable` when pip cannot.

    A probe that imported them leaves a marker (:data:`_OTEL_MARKER`) naming the build and the
    requirements, so later sessions read a file instead of starting a Python that imports them."""
    marker = venv / _OTEL_MARKER
    try:
        if marker.read_text() == _otel_marker_text():
            return
    except OSError:
        pass
    probe = [str(venv_python(venv)), "-c", _OTEL_PROBE]
    if subprocess.run(probe, capture_output=True, env=_build_env(), timeout=120).returncode != 0:
        with open(venv.parent / f".{venv.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if subprocess.run(probe, capture_output=True, env=_build_env(), timeout=120).returncode != 0:
                done = subprocess.run(
                    [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                     *OTEL_REQUIREMENTS], capture_output=True, text=True, env=_build_env(), timeout=timeout_s)
                if done.returncode != 0:
                    raise LiteLLMUnavailable(
                        f"could not install {', '.join(OTEL_REQUIREMENTS)}:\n{done.stdout[-2000:]}")
    try:
        marker.write_text(_otel_marker_text())
    except OSError:
        pass  # a read-only environment: probed again next time


def litellm_or_skip(*, otel: bool = False) -> Path:
    """The LiteLLM environment (with ``otel``, its OTLP exporter too: :func:`ensure_otel_exporter`),
    or the test ends: ``pytest.fail`` under CI, ``pytest.skip`` elsewhere."""
    try:
        venv = ensure_litellm_venv()
        if otel:
            ensure_otel_exporter(venv)
        return venv
    except LiteLLMUnavailable as exc:
        reason = f"a real LiteLLM proxy ({REQUIREMENT}) is not available: {exc}"
        if os.environ.get("CI"):
            pytest.fail(reason + " (CI is set, so this fails instead of skipping)")
        pytest.skip(reason)


# --- the proxy's directory ------------------------------------------------------------


@dataclass(frozen=True)
class Deployment:
    """One ``model_list`` entry: ``name`` is what callers ask for, ``upstream`` what the fake
    provider serves. ``price`` is (input, output) USD per token; None leaves the deployment
    out of LiteLLM's cost map (an unpriced model)."""

    name: str
    upstream: str
    price: tuple[float, float] | None = None


#: A custom_auth hook: fixed keys -> teams (LiteLLM builds the call's key metadata from it).
AUTH_MODULE = '''
"""Keys for the test gateway: LiteLLM's custom_auth hook, mapping fixed keys to teams."""
import json, os
from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth

KEYS = json.loads(os.environ["SHADOWTRIAL_TEST_KEYS"])
MASTER = os.environ["SHADOWTRIAL_TEST_MASTER_KEY"]


async def user_api_key_auth(request, api_key):
    if api_key == MASTER:
        return UserAPIKeyAuth(api_key=api_key, user_role=LitellmUserRoles.PROXY_ADMIN)
    if api_key in KEYS:
        team_id, alias = KEYS[api_key]
        return UserAPIKeyAuth(api_key=api_key, team_id=team_id, team_alias=alias, key_alias="key-" + alias,
                              user_role=LitellmUserRoles.INTERNAL_USER)
    raise Exception("invalid api key")
'''

#: What LiteLLM 1.80.0's generic API logger sends — a JSON array of standard logging objects
#: through litellm's ``safe_dumps``, batched by count or every flush interval, no retries —
#: built from the open-source parts only: the real one (``litellm_enterprise``) refuses to
#: send without an enterprise licence. One difference on purpose: the real logger clears its
#: queue *after* awaiting the POST, so events logged meanwhile are lost (FINDINGS.md, 4);
#: this one takes the batch out of the queue before it awaits.
GENERIC_SENDER = '''
"""A stand-in for LiteLLM's generic API logger (see tests/litellm_proxy.py)."""
import asyncio, os
from litellm.integrations.custom_logger import CustomLogger
from litellm.litellm_core_utils.safe_json_dumps import safe_dumps
from litellm.llms.custom_httpx.http_handler import get_async_httpx_client, httpxSpecialProvider


class GenericFormatSender(CustomLogger):
    def __init__(self):
        super().__init__()
        self.endpoint = os.environ["SHADOWTRIAL_TEST_GENERIC_ENDPOINT"]
        self.headers = {"Content-Type": "application/json"}
        self.batch_size = int(os.environ.get("SHADOWTRIAL_TEST_GENERIC_BATCH", "512"))
        self.flush_interval = float(os.environ.get("SHADOWTRIAL_TEST_GENERIC_FLUSH_S", "5"))
        self.log_queue = []
        self._task = None
        self._client = None

    def _start(self):
        if self._task is None:  # on the proxy's loop, at the first event
            self._client = get_async_httpx_client(llm_provider=httpxSpecialProvider.LoggingCallback)
            self._task = asyncio.ensure_future(self._periodic_flush())

    async def _periodic_flush(self):
        while True:
            await asyncio.sleep(self.flush_interval)
            await self._send()

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._start()
        self.log_queue.append(kwargs.get("standard_logging_object"))
        if len(self.log_queue) >= self.batch_size:
            await self._send()

    async def _send(self):
        batch, self.log_queue = self.log_queue, []
        if not batch:
            return
        try:
            await self._client.post(url=self.endpoint, headers=self.headers, data=safe_dumps(batch))
        except Exception:
            pass


sender = GenericFormatSender()
'''

PLUGIN_CALLBACK = "shadowtrial_callback.proxy_handler_instance"
GENERIC_CALLBACK = "shadowtrial_generic_sender.sender"
LITELLM_GENERIC_API = "generic_api"


def write_proxy_dir(
    directory: Path, *, upstream: str, deployments: Sequence[Deployment], callbacks: Sequence[str] = (),
) -> Path:
    """Write ``config.yaml`` and the modules it names into ``directory``; return the config's path.

    ``upstream`` is the fake provider's OpenAI base URL (``http://127.0.0.1:N/v1``)."""
    directory.mkdir(parents=True, exist_ok=True)
    model_list: list[dict[str, Any]] = []
    for d in deployments:
        params: dict[str, Any] = {"model": f"openai/{d.upstream}", "api_base": upstream, "api_key": "sk-upstream"}
        entry: dict[str, Any] = {"model_name": d.name, "litellm_params": params}
        if d.price is not None:
            entry["model_info"] = {"input_cost_per_token": d.price[0], "output_cost_per_token": d.price[1]}
        model_list.append(entry)
    settings: dict[str, Any] = {"drop_params": True}
    if callbacks:
        settings["callbacks"] = list(callbacks)
    config = {
        "model_list": model_list,
        "litellm_settings": settings,
        "general_settings": {"master_key": MASTER_KEY, "custom_auth": "shadowtrial_test_keys.user_api_key_auth"},
    }
    (directory / "shadowtrial_test_keys.py").write_text(AUTH_MODULE)
    if PLUGIN_CALLBACK in callbacks:
        shutil.copyfile(PLUGIN_SHIM, directory / "shadowtrial_callback.py")
    if GENERIC_CALLBACK in callbacks:
        (directory / "shadowtrial_generic_sender.py").write_text(GENERIC_SENDER)
    path = directory / "config.yaml"
    path.write_text(json.dumps(config, indent=2))
    return path


def proxy_env(extra: Mapping[str, str] = {}) -> dict[str, str]:
    """The proxy's whole environment (nothing else of the caller's leaks in; see the module docstring)."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(REPO_ROOT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "NO_PROXY": "*",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "SHADOWTRIAL_TEST_KEYS": json.dumps(TEAM_KEYS),
        "SHADOWTRIAL_TEST_MASTER_KEY": MASTER_KEY,
    }
    env.update(extra)
    return env


def free_port() -> int:
    """A port free on 127.0.0.1 right now (the proxy binds it a moment later; a clash is retried)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


_TLS: ssl.SSLContext | None = None


def tls_context() -> ssl.SSLContext:
    """One default TLS context for every HTTP client here (``verify=``): an httpx client built
    without one loads the CA bundle, tenths of a second of CPU, though all it calls is plain
    HTTP on 127.0.0.1."""
    global _TLS
    if _TLS is None:
        _TLS = ssl.create_default_context()
    return _TLS


# --- the proxy process -----------------------------------------------------------------


class ProxyFailed(RuntimeError):
    """The proxy exited or did not become ready (the message carries its log's tail)."""


@dataclass
class LiteLLMProxy:
    """One ``litellm`` proxy process (see the module docstring).

    ``start()`` spawns it; ``wait_ready()`` polls ``GET /health/readiness`` until 200, raising
    :class:`ProxyFailed` if the process exits first or the deadline passes (a port taken in
    between is retried on another port); ``stop()`` sends SIGTERM, then SIGKILL after
    ``grace_s``. Its stdout and stderr go to ``<directory>/proxy.log``."""

    name: str
    venv: Path
    config: Path
    env: dict[str, str]
    grace_s: float = 10.0
    port: int = 0
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _attempts: int = field(default=0, repr=False)

    @property
    def root_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.root_url}/v1"

    @property
    def log_path(self) -> Path:
        return self.config.parent / "proxy.log"

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def start(self) -> None:
        self.port = free_port()
        self._attempts += 1
        argv = [str(venv_python(self.venv)), "-m", "litellm.proxy.proxy_cli", "--config", str(self.config),
                "--host", HOST, "--port", str(self.port), "--num_workers", "1", "--telemetry", "False"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(argv, cwd=self.config.parent, env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def wait_ready(self, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        with httpx.Client(timeout=2.0, trust_env=False, verify=tls_context()) as client:
            while True:
                assert self.process is not None
                code = self.process.poll()
                if code is not None:
                    if "address already in use" in self.log_text().lower() and self._attempts < 3:
                        self.start()
                        continue
                    raise ProxyFailed(f"LiteLLM proxy {self.name} exited with {code}:\n{self._log_tail()}")
                try:
                    # custom_auth sees every route, health checks included: ask as the admin.
                    ready = client.get(f"{self.root_url}/health/readiness", headers={"Authorization": f"Bearer {MASTER_KEY}"})
                    if ready.status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise ProxyFailed(f"LiteLLM proxy {self.name} not ready in {timeout_s:.0f} s:\n{self._log_tail()}")
                time.sleep(0.05)  # polling with a deadline, not synchronising on a guess

    def _log_tail(self) -> str:
        return "\n".join(self.log_text().splitlines()[-30:])

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(self.grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # its own session: the proxy and any child it started
            process.wait(5.0)


def start_proxies(proxies: Sequence[LiteLLMProxy], timeout_s: float = 120.0) -> None:
    """Start all, then wait for all (they import LiteLLM in parallel); on failure stop them all."""
    try:
        for proxy in proxies:
            proxy.start()
        for proxy in proxies:
            proxy.wait_ready(timeout_s)
    except BaseException:
        for proxy in proxies:
            proxy.stop()
        raise


# --- the callers ------------------------------------------------------------------------


def caller_http_client() -> Any:
    """The HTTP client for one official ``openai`` client calling a proxy (``http_client=``):
    openai's own defaults, with one TLS context for the whole session (:func:`tls_context`).
    Without it every client loads the CA bundle again, about 50 ms of CPU, and the tests build
    one per call. (``openai`` closes it with its client.)"""
    import openai

    return openai.DefaultAsyncHttpxClient(verify=tls_context())  # openai's own httpx, not this module's


# --- servers on a loop of their own ----------------------------------------------------


class BackgroundLoop:
    """An asyncio loop on a daemon thread, for servers that outlive one test's loop
    (session fixtures): ``run(coro)`` runs a coroutine there and returns its result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="litellm-fixture-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)
        self.loop.close()


@dataclass(frozen=True)
class Delivery:
    """One POST the relay took: path, query, the headers that matter to the tap, the body, the answer."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    status: int

    def items(self) -> list[dict[str, Any]]:
        """The JSON array (or the one object, or the NDJSON lines) the body carried."""
        text = self.body.decode()
        try:
            value = json.loads(text) if text.strip() else []
        except ValueError:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return value if isinstance(value, list) else [value]


_FORWARDED = ("content-type", "content-encoding", "authorization", "shadowtrial-plugin-stats")


class Relay:
    """Sits where the gateway's tap URL points: records every POST (a :class:`Delivery`) and
    forwards it unchanged to ``target`` (a sidecar's tap root, set per test), answering what
    the sidecar answered; with no target it answers 503 — but a POST to one of the ``absorb``
    paths it records and answers 200 (an OTLP exporter retries a 503 for seconds, so a span
    exported between two tests would reach the next test's sidecar). Runs on a
    :class:`BackgroundLoop`, so a proxy started once per session can feed a fresh sidecar in
    every test.

    ``hold()`` keeps every POST waiting unanswered (``held`` counts them) until ``release()``:
    a plugin that posts one batch at a time then gathers what comes meanwhile into the
    next batches, so a test can make calls share a batch without a long flush interval."""

    def __init__(self, loop: BackgroundLoop, absorb: Sequence[str] = ()) -> None:
        self._loop = loop
        self._absorb = frozenset(absorb)
        self.target: str | None = None
        self.held = 0
        self._open: asyncio.Event | None = None
        self._lock = threading.Lock()
        self._deliveries: list[Delivery] = []
        self._runner: Any = None
        self._client: httpx.AsyncClient | None = None
        self.port = 0

    @property
    def root_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        self._loop.run(self._start())

    async def _start(self) -> None:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/{path:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, HOST, 0).start()
        self.port = self._runner.addresses[0][1]
        self._client = httpx.AsyncClient(timeout=30.0, trust_env=False, verify=tls_context())
        self._open = asyncio.Event()
        self._open.set()

    def hold(self) -> None:
        assert self._open is not None
        self._loop.loop.call_soon_threadsafe(self._open.clear)

    def release(self) -> None:
        assert self._open is not None
        self._loop.loop.call_soon_threadsafe(self._open.set)

    async def _handle(self, request: Any) -> Any:
        from aiohttp import web

        body = await request.read()
        assert self._open is not None
        if not self._open.is_set():
            self.held += 1
            await self._open.wait()
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() in _FORWARDED}
        target, status, answer = self.target, 503, b'{"error": {"code": "no_sidecar"}}'
        if target is not None and self._client is not None:
            try:
                r = await self._client.post(target + request.path_qs, content=body, headers=headers)
                status, answer = r.status_code, r.content
            except httpx.TransportError:
                status = 502
        elif request.path in self._absorb:
            status, answer = 200, b"{}"
        with self._lock:
            self._deliveries.append(Delivery(request.path, dict(request.query), headers, body, status))
        return web.Response(status=status, body=answer, content_type="application/json")

    def deliveries(self, path: str | None = None) -> list[Delivery]:
        with self._lock:
            return [d for d in self._deliveries if path is None or d.path == path]

    def clear(self) -> None:
        with self._lock:
            self._deliveries.clear()

    def stop(self) -> None:
        async def _stop() -> None:
            if self._client is not None:
                await self._client.aclose()
            if self._runner is not None:
                await self._runner.cleanup()

        self._loop.run(_stop())


def run_upstream(loop: BackgroundLoop, models: Mapping[str, Any], seed: int = 1) -> Any:
    """A started :class:`sidecar.demo.fake_provider.FakeProvider` on ``loop`` (stop it with
    ``loop.run(fp.stop())``)."""
    from sidecar.demo.fake_provider import FakeProvider

    fp = FakeProvider(models, seed=seed)
    loop.run(fp.start())
    return fp


@dataclass
class ProxySet:
    """The proxies one session started, by name, and what stops them."""

    proxies: dict[str, LiteLLMProxy]

    def __getitem__(self, name: str) -> LiteLLMProxy:
        return self.proxies[name]

    def stop(self) -> None:
        for proxy in self.proxies.values():
            proxy.stop()


@contextmanager
def launch(
    venv: Path, root: Path, *, upstream: str, deployments: Sequence[Deployment],
    specs: Mapping[str, tuple[Sequence[str], Mapping[str, str]]],
) -> Iterator[ProxySet]:
    """Start one proxy per ``specs`` entry (name -> (callbacks, extra env)), in parallel;
    yield them ready; stop them all afterwards."""
    proxies = {
        name: LiteLLMProxy(name, venv, write_proxy_dir(root / name, upstream=upstream, deployments=deployments,
                                                       callbacks=callbacks), proxy_env(env))
        for name, (callbacks, env) in specs.items()
    }
    start_proxies(list(proxies.values()))
    proxy_set = ProxySet(proxies)
    try:
        yield proxy_set
    finally:
        proxy_set.stop()


# --- the session's gateway -------------------------------------------------------------

#: The upstream (fake provider) models behind the test gateway; the incumbent answers at a
#: planted quality of 0.2, so a candidate at 0.9 wins every judged case.
PRICED = (2e-6, 8e-6)  # USD per token: the sidecar's list price for the incumbent (tests/harness.py)
DEPLOYMENTS = (
    Deployment("inc-model", "inc-model", PRICED),
    Deployment("unpriced-model", "unpriced-model", None),  # not in LiteLLM's cost map, no model_info price
    Deployment("fixed-model", "fixed-model", PRICED),  # the same bytes on every call
    Deployment("repeat-model", "repeat-model", PRICED),  # the same response id on every call
    # Re-priced by a caller in the re-pricing test only (the price stays changed for the proxy's life):
    Deployment("map-model", "gpt-4o-mini", None),  # priced by LiteLLM's shipped map, no model_info price
    Deployment("unlisted-model", "unlisted-model", None),  # in no price map, no model_info price
)
WEBHOOK_TEAM = "team-w"


def upstream_models() -> dict[str, Any]:
    from sidecar.demo.fake_provider import FakeModel

    return {
        "inc-model": FakeModel(quality=0.2, quality_noise=0.0),
        "unpriced-model": FakeModel(quality=0.2, quality_noise=0.0),
        "fixed-model": FakeModel(quality=0.5, quality_noise=0.0, filler_words=(12, 12), response_id="chatcmpl-fixed"),
        "repeat-model": FakeModel(quality=0.2, quality_noise=0.0, response_id="chatcmpl-repeat"),
        "gpt-4o-mini": FakeModel(quality=0.2, quality_noise=0.0),
        "unlisted-model": FakeModel(quality=0.2, quality_noise=0.0),
    }


#: The team the ``webhook`` proxy's OpenTelemetry spans are bound to (``OTEL_RESOURCE_ATTRIBUTES``),
#: and the path they are exported to.
OTEL_TEAM = "team-o"
OTLP_TRACES = "/v1/traces"


@dataclass
class Gateway:
    """What the ``gateway`` fixture yields: three proxies in front of one fake upstream —
    ``plain`` (no callbacks), ``plugin`` (shadowtrial's plugin, tap URL = the relay's
    ``/v1/exchanges``) and ``webhook`` (the generic-API-format sender to the relay's
    ``/v1/integrations/litellm?team=team-w``, LiteLLM's own ``generic_api`` logger to the
    same URL with ``&via=generic_api``, and LiteLLM's built-in ``otel`` callback exporting
    OTLP/HTTP to the relay's ``/v1/traces``, its spans bound to :data:`OTEL_TEAM`; also
    :attr:`otel`) — and the :class:`Relay` they post to.

    One session starts these three and no more: each proxy imports LiteLLM, several seconds
    of CPU, so the OpenTelemetry tests share the webhook proxy rather than start their own.
    The fixture lives in ``tests/integrations/conftest.py``: a test module importing it would
    define a second, separate session fixture and start three more proxies."""

    proxies: ProxySet
    relay: Relay
    upstream: Any

    @property
    def plain(self) -> LiteLLMProxy:
        return self.proxies["plain"]

    @property
    def plugin(self) -> LiteLLMProxy:
        return self.proxies["plugin"]

    @property
    def webhook(self) -> LiteLLMProxy:
        return self.proxies["webhook"]

    @property
    def otel(self) -> LiteLLMProxy:
        """The proxy running LiteLLM's ``otel`` callback (the webhook one)."""
        return self.proxies["webhook"]


@pytest.fixture(scope="session")
def litellm_venv() -> Path:
    return litellm_or_skip(otel=True)


@pytest.fixture(scope="session")
def gateway(litellm_venv: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    loop = BackgroundLoop()
    upstream = run_upstream(loop, upstream_models())
    relay = Relay(loop, absorb=(OTLP_TRACES,))
    relay.start()
    webhook_url = f"{relay.root_url}/v1/integrations/litellm?team={WEBHOOK_TEAM}"
    specs: dict[str, tuple[Sequence[str], Mapping[str, str]]] = {
        "plain": ((), {}),
        "plugin": ((PLUGIN_CALLBACK,), {
            "LITELLM_SHADOWTRIAL_TAP_URL": f"{relay.root_url}/v1/exchanges",
            "LITELLM_SHADOWTRIAL_GATEWAY": "litellm-test",
            "LITELLM_SHADOWTRIAL_FLUSH_S": "0.05",
            "LITELLM_SHADOWTRIAL_TIMEOUT_S": "30",  # outlasts a Relay.hold()
            "LITELLM_SHADOWTRIAL_STATS_EVERY_S": "0.1",
        }),
        "webhook": ((GENERIC_CALLBACK, LITELLM_GENERIC_API, "otel"), {
            "SHADOWTRIAL_TEST_GENERIC_ENDPOINT": webhook_url,
            "SHADOWTRIAL_TEST_GENERIC_FLUSH_S": "0.05",
            "GENERIC_LOGGER_ENDPOINT": webhook_url + "&via=generic_api",
            "DEFAULT_FLUSH_INTERVAL_SECONDS": "1",
            "OTEL_EXPORTER": "otlp_http", "OTEL_ENDPOINT": relay.root_url + OTLP_TRACES,
            "OTEL_RESOURCE_ATTRIBUTES": f"shadowtrial.team={OTEL_TEAM}", "OTEL_SERVICE_NAME": "litellm-otel",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }),
    }
    try:
        with launch(litellm_venv, tmp_path_factory.mktemp("litellm"), upstream=upstream.base_url,
                    deployments=DEPLOYMENTS, specs=specs) as proxies:
            yield Gateway(proxies, relay, upstream)
    finally:
        relay.stop()
        loop.run(upstream.stop())
        loop.close()
