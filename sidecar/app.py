"""The process: two listeners (tap, admin) around one runtime, started and
stopped in order.

Shutdown order (SIGTERM, SIGINT, or leaving the context manager): stop the tap
accepting, drain in-flight cases within ``engine.drain_seconds``, flush the
funnel, close provider clients and the store, flush the telemetry (within
``telemetry.export_timeout_seconds``), then the admin listener.

A supervised worker whose death only a new process mends (:mod:`sidecar.supervise`: the
engine's process or loop) makes :func:`serve` shut down the same way and then exit with
status :data:`WORKER_DIED_EXIT`, so the orchestrator restarts the sidecar.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from typing import Any

from aiohttp import web

from sidecar.api.admin import admin_app
from sidecar.api.listener import Listener, ListenerRunner
from sidecar.config import Config
from sidecar.errors import StartupError
from sidecar.runtime import Runtime
from sidecar.api.tap import tap_runner

log = logging.getLogger("shadowtrial")

#: The exit status after a worker died that only a new process mends (EX_SOFTWARE).
WORKER_DIED_EXIT = 70


def _split(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


class Sidecar:
    """``async with Sidecar(config) as sc:`` — a running sidecar.

    ``sc.tap_url`` and ``sc.admin_url`` are the real bound addresses (port 0 in
    the config binds a free port).
    """

    def __init__(self, config: Config, **runtime_kw: Any) -> None:
        self.runtime = Runtime(config, **runtime_kw)
        self._tap_runner: web.AppRunner | None = None
        self._admin_runner: web.AppRunner | None = None
        self.tap_url = ""
        self.admin_url = ""

    async def start(self) -> None:
        await self.runtime.start()
        cfg = self.runtime.config
        try:
            admin = cfg.admin
            # Bodies undecoded, as admin_app's handler_args say (its read_body refuses encodings in JSON).
            self._admin_runner = ListenerRunner(admin_app(self.runtime), Listener(
                "admin", read_timeout_s=admin.read_timeout_seconds, idle_timeout_s=admin.idle_timeout_seconds),
                auto_decompress=False)
            await self._admin_runner.setup()
            await _bind(self._admin_runner, "admin.listen", cfg.admin.listen)
            self.admin_url = _url(self._admin_runner)
            self._tap_runner = tap_runner(self.runtime)
            await self._tap_runner.setup()
            await _bind(self._tap_runner, "tap.listen", cfg.tap.listen)
            self.tap_url = _url(self._tap_runner)
        except BaseException:
            await self.stop()  # a listener that cannot bind must not leave the engine running
            raise
        log.info("tap listening on %s, admin on %s", self.tap_url, self.admin_url)

    async def stop(self) -> None:
        if self._tap_runner is not None:
            await self._tap_runner.cleanup()  # stop accepting exchanges first
            self._tap_runner = None
        await self.runtime.stop()
        if self._admin_runner is not None:
            await self._admin_runner.cleanup()
            self._admin_runner = None

    async def __aenter__(self) -> Sidecar:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def _bind(runner: web.AppRunner, setting: str, listen: str) -> None:
    host, port = _split(listen)
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        # asyncio's bind error wraps the system's in a long sentence; a resolver error has its own.
        reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else (exc.strerror or str(exc))
        raise StartupError(f"{setting} {listen}: cannot listen: {reason}") from exc


def _url(runner: web.AppRunner) -> str:
    addrs = runner.addresses
    host, port = addrs[0][0], addrs[0][1]
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


async def serve(config: Config) -> None:
    """Run until SIGTERM or SIGINT, then shut down in order."""
    sidecar = Sidecar(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await sidecar.start()
    from sidecar.api.authn import announce, reload_keys  # SIGHUP: re-read the admin API's keys (docs/security.md)

    announce(config.auth)
    loop.add_signal_handler(signal.SIGHUP, reload_keys, sidecar._admin_runner.app if sidecar._admin_runner else None)
    print(f"shadowtrial: tap {sidecar.tap_url}  admin {sidecar.admin_url}", flush=True)
    failed = sidecar.runtime.failed
    try:
        waiters = {asyncio.ensure_future(stop.wait()), asyncio.ensure_future(failed.wait())}
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
    finally:
        log.info("shutting down")
        await sidecar.stop()
    if failed.is_set():
        raise SystemExit(WORKER_DIED_EXIT)
