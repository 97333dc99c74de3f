"""A real sidecar beside a real fake provider, on loopback, for tests.

``async with Harness(tmp_path, models=...) as h:`` starts the fake provider,
writes a TOML config (through the real loader), starts the sidecar with its tap
and admin listeners on port 0, and on exit checks the product rule that the
sidecar never called the incumbent model.

Admin authentication is off by default (loopback). ``Harness(tmp, auth=True)`` runs it
with JWTs: a throwaway Ed25519 key (:class:`AuthKit`), ``h.token(...)`` mints tokens,
and ``h.admin`` carries a ``platform_admin`` one; ``auth="..."`` gives the ``[auth]``
table's TOML instead, or ``auth=lambda kit: ...`` builds it from the :class:`AuthKit`.
"""

from __future__ import annotations

import asyncio
import functools
import ssl
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

import certifi
import httpx

from sidecar.app import Sidecar
from sidecar.auth.mint import generate_key_pair, load_signing_key, mint
from sidecar.config import Config, load_config
from sidecar.demo.fake_provider import FakeModel, FakeProvider
from sidecar.demo.localconfig import loopback_config
from sidecar.engine.subjects import FinishHook
from sidecar.telemetry import Telemetry

INCUMBENT = "inc-model"
CANDIDATE = "cand-model"
JUDGE = "judge-model"

PRICES = {INCUMBENT: (2.0, 8.0), CANDIDATE: (0.5, 2.0), JUDGE: (1.0, 4.0)}
#: How long a gateway plugin (or its sender) in a test that needs every POST to reach the
#: sidecar may wait for one. The plugin's own default (0.5 s: a gateway never waits on the
#: sidecar) was passed by a loaded CI worker, and the plugin then dropped the exchanges
#: ``timeout``, as it should (tests/integrations/test_litellm_plugin.py shows both).
DELIVERY_TIMEOUT_S = 30.0


@functools.cache
def tls_context() -> ssl.SSLContext:
    """One default TLS context for every test client: httpx builds one per client otherwise, and
    loading the CA bundle costs ~50 ms of CPU each time, twice per harness (the clients are plain
    HTTP on loopback, so it is never used; verification stays on for any client that would)."""
    return ssl.create_default_context(cafile=certifi.where())  # httpx's own default


def default_models() -> dict[str, FakeModel]:
    return {
        INCUMBENT: FakeModel(quality=0.5),
        CANDIDATE: FakeModel(quality=0.6),
        JUDGE: FakeModel(judge=True),
    }


def write_config(
    tmp: Path, base_url: str, *, workers: int = 8, queue_size: int = 10_000, drain: float = 5.0,
    timeout_s: float = 5.0, extra: str = "", db: str = "trials.db",
    max_body_bytes: int | None = None, tap_token_env: str = "", lease_seconds: float | None = None,
    refresh_seconds: float | None = None, store_url: str = "", isolation: str = "thread", journal_dir: str = "",
    store_extra: str = "", admin_extra: str = "", auth: str = "", provider_extra: str = "", tap_lines: str = "",
) -> Path:
    """Write the test config. ``extra`` is appended after the fixed tables (new tables only);
    ``max_body_bytes`` and ``tap_token_env`` go into the ``[tap]`` table, which ``extra`` cannot reopen;
    ``auth`` is the ``[auth]`` table's text (empty: none, authentication off)."""
    path = tmp / "shadowtrial.toml"
    tap_extra = f"{tap_lines}\n" if tap_lines else ""
    if max_body_bytes is not None:
        tap_extra += f"max_body_bytes = {max_body_bytes}\n"
    if tap_token_env:
        tap_extra += f"token_env = \"{tap_token_env}\"\n"
    engine_extra = f"lease_seconds = {lease_seconds}\n" if lease_seconds is not None else ""
    engine_extra += f"refresh_seconds = {refresh_seconds}\n" if refresh_seconds is not None else ""
    # The engine on a thread: most tests start many sidecars, and a process each costs ~1 s;
    # tests/sidecar/engine/test_engine_process.py and the fleet test run the default, a process.
    engine_extra += f'isolation = "{isolation}"\n'
    text = loopback_config(
        base_url=base_url, db=str(tmp / db), judge=JUDGE, prices=PRICES, workers=workers, queue_size=queue_size,
        drain_seconds=drain, timeout_s=timeout_s, tap_extra=tap_extra, engine_extra=engine_extra,
        extra=extra + "\n" + auth,
    )
    if store_url:
        text = text.replace("[store]\n", f'[store]\nurl = "{store_url}"\n', 1)
    if journal_dir:
        text = text.replace("[store]\n", f'[store]\njournal_dir = "{journal_dir}"\n', 1)
    if store_extra:
        text = text.replace("[store]\n", f"[store]\n{store_extra}\n", 1)
    if admin_extra:
        text = text.replace("[admin]\n", f"[admin]\n{admin_extra}\n", 1)
    if provider_extra:
        text = text.replace("[providers.local]\n", f"[providers.local]\n{provider_extra}\n", 1)
    path.write_text(text)
    return path


class AuthKit:
    """A throwaway Ed25519 key pair in ``tmp/auth`` and tokens signed with it."""

    AUDIENCE = "shadowtrial-test"
    ISSUER = "https://issuer.test"
    KID = "test-ed25519"

    def __init__(self, tmp: Path) -> None:
        self.dir = tmp / "auth"
        self.private_path, self.public_path = generate_key_pair(self.dir, name="test")
        self.private_key = load_signing_key(str(self.private_path), "EdDSA")

    def toml(self, *, leeway_seconds: float = 30.0) -> str:
        return (f'[auth]\nmode = "jwt"\naudience = "{self.AUDIENCE}"\nissuer = "{self.ISSUER}"\n'
                f"leeway_seconds = {leeway_seconds}\n"
                f'[[auth.keys]]\npath = "{self.public_path}"\nalgorithms = ["EdDSA"]\nkid = "{self.KID}"\n')

    def token(
        self, *, subject: str = "tester", roles: Sequence[str] = ("platform_admin",), teams: Sequence[str] = (),
        content: bool = False, ttl_s: float = 300.0, **extra: Any,
    ) -> str:
        return mint(key=self.private_key, algorithm="EdDSA", kid=self.KID, subject=subject, audience=self.AUDIENCE,
                    issuer=self.ISSUER, roles=roles, teams=teams, content=content, ttl_s=ttl_s, extra=extra)


def exchange(i: int, *, team: str = "team-a", model: str = INCUMBENT, content: str | None = None, **over: Any) -> dict[str, Any]:
    ex: dict[str, Any] = {
        "exchange_id": f"ex-{i}",
        "team": team,
        "gateway": "gw-1",
        "model": model,
        "request": {"messages": [{"role": "user", "content": f"question {i}"}], "params": {"max_tokens": 64}},
        "response": {
            "content": content if content is not None else f"incumbent answer {i} ⟨q=0.500⟩",
            "finish_reason": "stop",
            "usage": {"input_tokens": 12, "output_tokens": 20},
        },
        "served_at": "2026-11-30T00:00:00Z",
        "latency_ms": 250.0,
    }
    ex.update(over)
    return ex


async def wait_for(
    predicate: Callable[[], Awaitable[bool]],
    *,
    timeout: float = 30.0,
    what: str = "condition",
    wake: asyncio.Event | None = None,
) -> None:
    """Poll ``predicate`` until true or the deadline passes (no fixed sleeps).

    With ``wake`` (e.g. the runtime's progress event), check again when it is set, and at least
    every quarter second; otherwise on a timer. The gap between two checks backs off from 10 ms
    (to :data:`MAX_GAP_S` when woken, :data:`MAX_TIMER_GAP_S` on the timer): a predicate that
    reads a trial's view costs milliseconds, and checking it on every finished case of a
    2,000-case run cost more CPU than the cases did."""
    deadline = time.monotonic() + timeout
    gap = MIN_GAP_S
    while True:
        if wake is not None:
            wake.clear()
        if await predicate():
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(gap)  # the least time to the next check (progress during it is kept)
        if wake is not None and not wake.is_set():
            try:
                await asyncio.wait_for(wake.wait(), timeout=max(0.0, 0.25 - gap))
            except asyncio.TimeoutError:
                pass
        gap = min(gap * 1.5, MAX_GAP_S if wake is not None else MAX_TIMER_GAP_S)


#: Backoff bounds of :func:`wait_for` between two checks of its predicate: woken by progress,
#: up to MAX_GAP_S; on a timer alone, up to MAX_TIMER_GAP_S (a short-lived state a test waits
#: for, such as a call held in flight, is still seen).
MIN_GAP_S = 0.01
MAX_GAP_S = 0.2
MAX_TIMER_GAP_S = 0.05


class Harness:
    def __init__(
        self,
        tmp: Path,
        *,
        models: dict[str, FakeModel] | None = None,
        seed: int = 1,
        environ: Mapping[str, str] | None = None,
        hooks: Sequence[FinishHook] = (),
        auth: bool | str | Callable[[AuthKit], str] = False,
        telemetry: Telemetry | None = None,
        never_called: Sequence[str] = (INCUMBENT,),
        clock: Callable[[], float] | None = None,
        **config_kw: Any,
    ) -> None:
        """``environ`` is what the config loader sees (secrets such as the tap token); ``config_kw`` go to
        :func:`write_config`; ``auth``: see the module's docstring; ``telemetry``: the sidecar
        process's OpenTelemetry providers (e.g. in-memory ones; the test closes them)."""
        self.tmp = tmp
        self.auth: AuthKit | None = AuthKit(tmp) if auth else None
        if self.auth is not None:
            config_kw["auth"] = (auth if isinstance(auth, str) else auth(self.auth) if callable(auth)
                                 else self.auth.toml())
        self.environ: dict[str, str] = dict(environ or {})
        self.fake = FakeProvider(models or default_models(), seed=seed)
        self.config_kw = config_kw
        self.hooks = tuple(hooks)
        self.telemetry = telemetry
        #: Models the sidecar must never call (product rule 2). A watch's test passes the
        #: promoted model instead: after promotion the replaced model is the one dispatched.
        self.never_called = tuple(never_called)
        self.clock = clock
        self.sidecar: Sidecar | None = None
        self.config: Config | None = None
        self.admin: httpx.AsyncClient | None = None
        self.tap: httpx.AsyncClient | None = None

    async def __aenter__(self) -> Harness:
        await self.fake.start()
        path = write_config(self.tmp, self.fake.base_url, **self.config_kw)
        self.config = load_config(str(path), self.environ)
        runtime_kw: dict[str, Any] = {} if self.clock is None else {"clock": self.clock}
        self.sidecar = Sidecar(self.config, hooks=self.hooks, telemetry=self.telemetry, **runtime_kw)
        await self.sidecar.start()
        headers = {"Authorization": f"Bearer {self.auth.token()}"} if self.auth is not None else None
        self.admin = httpx.AsyncClient(base_url=self.sidecar.admin_url, timeout=30.0, headers=headers,
                                       verify=tls_context())
        self.tap = httpx.AsyncClient(base_url=self.sidecar.tap_url, timeout=30.0, verify=tls_context())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.admin and self.tap and self.sidecar
        await self.admin.aclose()
        await self.tap.aclose()
        await self.sidecar.stop()
        await self.fake.stop()
        # Product rule 2: the incumbent's answer is reused; the sidecar never calls it.
        for model in self.never_called:
            assert self.fake.calls[model] == 0, f"the sidecar called the incumbent {model} {self.fake.calls[model]} time(s)"

    def token(self, **claims: Any) -> str:
        """A token the sidecar accepts (``Harness(auth=True)`` only); see :meth:`AuthKit.token`."""
        assert self.auth is not None, "Harness(auth=True) mints tokens"
        return self.auth.token(**claims)

    @property
    def admin_app(self) -> Any:
        """The admin listener's aiohttp application (its ``VERIFIER`` holds the key set)."""
        assert self.sidecar and self.sidecar._admin_runner
        return self.sidecar._admin_runner.app

    @property
    def runtime(self) -> Any:
        assert self.sidecar
        return self.sidecar.runtime

    async def create_trial(self, **over: Any) -> dict[str, Any]:
        assert self.admin
        # ``continue``: most tests read a trial past its first decision (the API's default is
        # ``stop``, tests/sidecar/trials/test_decided.py); a test passes ``on_decision`` to change it.
        body: dict[str, Any] = {
            "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
            "spend_cap_usd": 10.0, "sample_rate": 1.0, "on_decision": "continue",
        }
        body.update(over)
        r = await self.admin.post("/v1/trials", json=body)
        assert r.status_code == 201, r.text
        return r.json()

    async def send(self, exchanges: list[dict[str, Any]]) -> dict[str, Any]:
        assert self.tap
        r = await self.tap.post("/v1/exchanges", json=exchanges)
        assert r.status_code == 202, r.text
        return r.json()

    async def trial(self, trial_id: str) -> dict[str, Any]:
        assert self.admin
        r = await self.admin.get(f"/v1/trials/{trial_id}")
        assert r.status_code == 200, r.text
        return r.json()

    async def settle(self, trial_id: str, expected_total: int, timeout: float = 60.0) -> dict[str, Any]:
        """Wait until the trial's funnel accounts for ``expected_total`` pairs with nothing in flight."""
        view: dict[str, Any] = {}

        async def done() -> bool:
            nonlocal view
            # The trial's progress first (funnel and case states, a light read); the whole view,
            # which folds every judgment, only once that says done, and it decides.
            if view and not await self._settled(trial_id, expected_total):
                return False
            view = await self.trial(trial_id)
            f = view["funnel"]
            return f["total"] >= expected_total and f["in_flight"] == 0 and self.runtime.handoff.depth == 0

        try:
            await wait_for(done, timeout=timeout, what=f"{expected_total} outcomes of {trial_id}", wake=self.runtime.progress)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last funnel {view.get('funnel')}, queue depth {self.runtime.handoff.depth}") from None
        return view

    async def _settled(self, trial_id: str, expected_total: int) -> bool:
        """What :meth:`settle` waits for, from the store's progress read and the unflushed counts.

        A queued case means not settled whatever the store says, so while the engine's queue
        holds any the store is not read: its progress read groups every case of the trial
        (about 5 ms of store CPU at 2,000 cases), and a big run's queue drains only at its end."""
        if self.runtime.handoff.depth:
            return False
        async with self.runtime.funnel.consistent():
            progress = await self.runtime.store.progress(trial_id)
            pending = self.runtime.funnel.pending(trial_id)
        if progress is None or self.runtime.handoff.depth:
            return False
        states = progress.case_states
        in_flight = states.get("claimed", 0) + states.get("reserved", 0) + states.get("dispatched", 0)
        return bool(sum(progress.funnel.values()) + sum(pending.values()) >= expected_total and not in_flight)
