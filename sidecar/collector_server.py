"""``shadowtrial collector``: the reference collector composed from ``[collector]``.

``async with CollectorServer(cfg) as c:`` opens the SQLite store at
``db_path``, loads each ``[[collector.keys]]`` public key, and listens on
``listen`` (port 0 binds a free port; ``c.url`` is the bound address).
Shutdown: stop accepting, then close the store.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Sequence

from aiohttp import web
from aiohttp.typedefs import Middleware

from sidecar.config import CollectorConfig, split_listen
from sidecar.errors import StartupError
from uplink.collector import CollectorSettings, collector_app
from uplink.collector_store import SqliteCollectorStore
from uplink.signing import Verifier, load_public_key


class CollectorServer:
    def __init__(self, cfg: CollectorConfig, *, port: int | None = None, middlewares: Sequence[Middleware] = ()) -> None:
        """``port``: bind this port instead of the configured one (a test restarting on the same port);
        ``middlewares``: wrap the handlers (e.g. to capture bodies in a test)."""
        self.cfg = cfg
        self._port = port
        self._middlewares = tuple(middlewares)
        self._runner: web.AppRunner | None = None
        self.store: SqliteCollectorStore | None = None
        self.url = ""

    async def start(self) -> None:
        cfg = self.cfg
        try:
            keys = {k.kid: load_public_key(k.path) for k in cfg.keys}
        except ValueError as exc:
            raise StartupError(f"collector.keys: {exc}") from exc
        verifier = Verifier(keys, audience=cfg.audience, issuers=frozenset(cfg.issuers), leeway_s=cfg.leeway_seconds)
        self.store = await asyncio.to_thread(SqliteCollectorStore, cfg.db_path)
        settings = CollectorSettings(content_teams=frozenset(cfg.content_teams), max_body_bytes=cfg.max_body_bytes)
        self._runner = web.AppRunner(collector_app(self.store, verifier, settings, middlewares=self._middlewares), access_log=None,
                                    auto_decompress=False)  # the app gunzips itself, within its bound
        await self._runner.setup()
        host, port = split_listen(cfg.listen)
        try:
            await web.TCPSite(self._runner, host, port if self._port is None else self._port).start()
        except OSError as exc:
            await self.stop()
            raise StartupError(f"collector.listen {cfg.listen}: cannot listen: {exc.strerror or exc}") from exc
        bound = self._runner.addresses[0]
        self.url = f"http://{bound[0]}:{bound[1]}"

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.store is not None:
            await self.store.close()
            self.store = None

    async def __aenter__(self) -> CollectorServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve_collector(cfg: CollectorConfig) -> None:
    """Run until SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with CollectorServer(cfg) as server:
        print(f"shadowtrial collector: {server.url}", flush=True)
        await stop.wait()
