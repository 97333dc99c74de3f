"""``shadowtrial collector``: the reference collector composed from its config.

``async with CollectorServer(cfg, config=config) as c:`` opens the collector's store
(``[collector] store_url``, else the SQLite file ``db_path``: the sidecar's store contract,
:mod:`sidecar.collector.collected`), loads each ``[[collector.keys]]`` public key, starts the engine
of control-plane trials when ``config`` names providers (:mod:`sidecar.collector.control_plane`;
with none it runs no trial and says so at start) and, beside it, the runner of comparison
groups (:mod:`sidecar.collector.corpus.runner`, resuming admitted and running groups), and listens on ``listen`` (port 0 binds
a free port; ``c.url`` is the bound address). Shutdown: stop accepting, stop the corpus runner
and the engine (drain, retire), close the store.

Its workers (the control plane's driver and engine, the corpus runner's driver and lease
refresher) are supervised (:mod:`sidecar.supervise`): ``/readyz`` answers 503 naming one that
died; the loops are restarted after a backoff, and the engine's thread ending unbidden makes
:func:`serve_collector` stop in order and exit non-zero.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import time
from typing import Callable, Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from policies.roles import decide
from sidecar.api.authn import authenticate, build_verifier, unauthorized
from sidecar.api.listener import Listener, ListenerRunner
from sidecar.api.readiness import readiness
from sidecar.auth.errors import Unauthorized
from sidecar.auth.revocations import Revocations
from sidecar.auth.verify import Verifier as AdminVerifier
from sidecar.collector.collected import CollectedRecords
from sidecar.collector.console_experiments import add_routes as add_experiment_pages
from sidecar.collector.console_traffic import OPERATOR, results_api
from sidecar.collector.console_traffic import add_routes as add_traffic_pages
from sidecar.collector.operator_views import OperatorViews
from sidecar.collector.corpus.pages import corpus_console_app
from sidecar.collector.corpus.api import Services, corpus_app
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.runner import CorpusRunner, RunnerSettings
from sidecar.collector.corpus.targets import targets
from sidecar.engine.parts import configured_retention, open_providers, price_book, resolver, trial_defaults
from sidecar.config import CollectorConfig, Config, split_listen
from sidecar.collector.control_plane import ControlPlane, collected_traffic
from sidecar.errors import StartupError
from sidecar.collector.store import make_collector_store
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.supervise import Death, Supervisor
from uplink.collector import CollectorSettings, Reader, collector_app
from uplink.signing import Verifier, load_public_key

log = logging.getLogger("shadowtrial.collector")

#: The exit status after a worker died that only a new process mends (EX_SOFTWARE).
WORKER_DIED_EXIT = 70


class CollectorServer:
    def __init__(
        self, cfg: CollectorConfig, *, config: Config | None = None, port: int | None = None,
        middlewares: Sequence[Middleware] = (),
    ) -> None:
        """``config``: the whole config, whose ``[providers]``, ``[models]``, ``[judge]`` and
        ``[engine]`` run control-plane trials (None or no providers: none is run);
        ``port``: bind this port instead of the configured one (a test restarting on the same
        port); ``middlewares``: wrap the handlers (e.g. to capture bodies in a test)."""
        self.cfg = cfg
        self.config = config
        self._port = port
        self._middlewares = tuple(middlewares)
        self._runner: web.AppRunner | None = None
        self.store: ControlPlaneStore | None = None
        self.records: CollectedRecords | None = None
        self.control_plane: ControlPlane | None = None
        self.corpus_runner: CorpusRunner | None = None
        self.url = ""
        #: This process's workers (``/readyz``); a fatal death sets :attr:`failed`.
        self.supervisor = Supervisor(on_fatal=self._worker_failed)
        self.failed = asyncio.Event()

    def _worker_failed(self, death: Death) -> None:
        self.failed.set()

    async def start(self) -> None:
        cfg = self.cfg
        self.supervisor.bind(asyncio.get_running_loop())
        try:
            keys = {k.kid: load_public_key(k.path) for k in cfg.keys}
        except ValueError as exc:
            raise StartupError(f"collector.keys: {exc}") from exc
        verifier = Verifier(keys, audience=cfg.audience, issuers=frozenset(cfg.issuers), leeway_s=cfg.leeway_seconds)
        store = make_collector_store(cfg.location)
        try:
            await store.open()
        except Exception as exc:
            raise StartupError(f"collector store {_where(cfg)}: cannot open: {type(exc).__name__}: {exc}") from exc
        self.store = store
        try:
            await self._start_engine(store)
            self.records = CollectedRecords(store, control_plane=self.control_plane, clock=time.time)
            # Readers (trials, corpus, console) use the admin API's tokens; batches use the uplink's keys.
            admin = None if self.config is None else build_verifier(self.config.auth)
            revocations = None if self.config is None else Revocations(self.config.auth.revoked_subjects_file)
            settings = CollectorSettings(content_teams=frozenset(cfg.content_teams), max_body_bytes=cfg.max_body_bytes,
                                         reader=None if self.config is None else readers(admin, revocations),
                                         halted=self.records.halted, content_posture=self.records.content_posture)
            app = collector_app(self.records, verifier, settings, middlewares=self._middlewares)
            app.router.add_get("/readyz", self._readyz)
            app.router.add_get("/favicon.ico", _favicon)  # a browser's every page: 204, never an error
            if self.config is not None:  # corpus evidence lives in the control plane (docs/experiments.md)
                ctx = corpus_context(self.config, store)
                if self.corpus_runner is not None:
                    ctx = dataclasses.replace(ctx, on_change=self.corpus_runner.wake)
                services = Services(ctx)
                # One console and /v1/results: the gateways' traffic beside the corpus (issue 25).
                operator = OperatorViews(store, self.records, services, time.time)
                api = corpus_app(ctx, admin, revocations=revocations, prefix="")
                api[OPERATOR] = operator
                api.router.add_get("/results", results_api)
                app.add_subapp("/v1", api)
                # The console: Live, Results, Trials, Watches, Experiments, Datasets, Comparisons.
                console = corpus_console_app(services, admin, revocations, teams=sorted(self.config.teams),
                                             more=(add_traffic_pages, add_experiment_pages), home="/live")
                console[OPERATOR] = operator
                app.add_subapp("/console", console)
            listener = Listener("collector", read_timeout_s=cfg.read_timeout_seconds,
                                idle_timeout_s=cfg.idle_timeout_seconds)
            self._runner = ListenerRunner(app, listener, auto_decompress=False)  # the app gunzips itself
            await self._runner.setup()
            host, port = split_listen(cfg.listen)
            await web.TCPSite(self._runner, host, port if self._port is None else self._port).start()
        except OSError as exc:
            await self.stop()
            raise StartupError(f"collector.listen {cfg.listen}: cannot listen: {exc.strerror or exc}") from exc
        except BaseException:
            await self.stop()
            raise
        bound = self._runner.addresses[0]
        self.url = f"http://{bound[0]}:{bound[1]}"

    async def _start_engine(self, store: ControlPlaneStore) -> None:
        config = self.config
        if config is None or not config.providers:
            log.warning("the collector runs no control-plane trial: no [providers] are configured "
                        "(their exchanges are kept, and run once a collector with providers starts)")
            return
        self.control_plane = ControlPlane(config, location=self.cfg.location, supervisor=self.supervisor)
        await self.control_plane.start(store)
        # Comparison groups (corpus evidence) run here too, on this loop and store (docs/experiments.md).
        self.corpus_runner = corpus_runner(config, store, supervisor=self.supervisor)
        await self.corpus_runner.start()

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def _readyz(self, _request: web.Request) -> web.Response:
        status, body = readiness(self.supervisor, ready=not self.failed.is_set(),
                                 reason="a worker died; this collector stops and exits non-zero")
        return web.json_response(body, status=status)

    async def stop(self) -> None:
        self.supervisor.stop()  # from here on a worker's end is ours: nothing is restarted
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.corpus_runner is not None:
            await self.corpus_runner.stop()
            self.corpus_runner = None
        if self.control_plane is not None:
            await self.control_plane.stop()
            self.control_plane = None
        if self.store is not None:
            await self.store.close()
            self.store = None

    async def __aenter__(self) -> CollectorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def readers(verifier: AdminVerifier | None, revocations: Revocations | None) -> Reader:
    """Who may read the collector's trials: the admin API's principals (``[auth]``), each seeing
    the teams it may read; with no verifier (``auth.mode = "off"``), everyone every team (loopback only)."""

    def reader(request: web.Request) -> Callable[[str], bool] | web.Response:
        if verifier is None:
            return lambda team: True
        try:
            principal = authenticate(verifier, revocations, request.headers.getall("Authorization", []))
        except Unauthorized as exc:
            return unauthorized(exc.message)
        return lambda team: decide(principal, team, "read") == "allow"

    return reader


def corpus_context(config: Config, store: ControlPlaneStore) -> CorpusContext:
    """What the corpus services need on the collector, from its config and store. Seeding from
    traffic reads the exchanges forwarded for the team's control-plane trials (the traffic
    the control plane holds; a team judged locally keeps its traffic in its sidecars)."""
    book = price_book(config)
    return CorpusContext(
        store=store, clock=time.time, resolve=resolver(config, book),
        defaults=trial_defaults(config), default_retention=lambda team: configured_retention(config, team),
        retained=collected_traffic(store), targets=targets(config, book),
    )


def corpus_runner(config: Config, store: ControlPlaneStore, *, supervisor: Supervisor | None = None) -> CorpusRunner:
    """The runner of comparison groups, with the collector's providers, models and engine settings."""
    e = config.engine
    per_group = max(1, min(8, e.workers // 2))
    # The pool runs several groups side by side, each at most ``per_group`` items at once.
    settings = RunnerSettings(lease_s=e.lease_seconds, drain_s=e.drain_seconds, items_in_flight=per_group,
                              workers=max(per_group, 2 * e.workers), shadow_header=e.shadow_header)
    book = price_book(config)
    revocations = Revocations(config.auth.revoked_subjects_file)  # a revoked starter's group stops (issue 24)
    return CorpusRunner(store=store, open_providers=lambda: open_providers(config),
                        resolve=resolver(config, book), settings=settings, supervisor=supervisor,
                        targets=targets(config, book),
                        authorized=lambda subject: not revocations.revoked(subject))


def _where(cfg: CollectorConfig) -> str:
    """The store's location without credentials."""
    if cfg.store_url:
        return cfg.store_url.split("@")[-1] if "@" in cfg.store_url else cfg.store_url
    return cfg.db_path


async def serve_collector(config: Config) -> None:
    """Run until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with CollectorServer(config.collector, config=config) as server:
        print(f"shadowtrial collector: {server.url}", flush=True)
        print(f"console (live, results, trials, watches, experiments, datasets, comparisons): {server.url}/console/",
              flush=True)
        failed = asyncio.ensure_future(server.failed.wait())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({failed, stopped}, return_when=asyncio.FIRST_COMPLETED)
        for waiter in (failed, stopped):
            waiter.cancel()
    if server.failed.is_set():  # stopped in order above; the orchestrator restarts us
        raise SystemExit(WORKER_DIED_EXIT)


async def _favicon(_request: web.Request) -> web.Response:
    """No icon at the root (the console's pages name theirs); 204, so a browser logs no error."""
    return web.Response(status=204, headers={"Cache-Control": "public, max-age=86400"})
