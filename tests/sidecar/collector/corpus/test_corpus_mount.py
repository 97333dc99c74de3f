"""The corpus API mounted as a sub-application of another app (as the control plane will
host it), and added to an app of its own middlewares with ``install``."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from aiohttp import web

from policies.roles import LOCAL_DEVELOPMENT
from sidecar.api.kit import errors_middleware
from sidecar.api.principal import PRINCIPAL
from sidecar.collector.corpus.api import corpus_app, install
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.store import make_collector_store
from tests.sidecar.collector.corpus.corpus_kit import DEFAULTS


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


async def test_mounted_under_v1_and_installed(tmp_path: Path) -> None:
    store = make_collector_store(str(tmp_path / "c.db"))
    await store.open()
    ctx = CorpusContext(store=store, clock=time.time, resolve=lambda m: (_ for _ in ()).throw(LookupError(m)),
                        defaults=DEFAULTS, default_retention=lambda team: True)

    async def own(_request: web.Request) -> web.Response:
        return web.json_response({"parent": True})

    parent = web.Application()
    parent.router.add_get("/healthz", own)
    parent.add_subapp("/v1", corpus_app(ctx, None, prefix=""))  # authentication off: local development

    @web.middleware
    async def as_dev(request: web.Request, handler: object) -> web.StreamResponse:
        request[PRINCIPAL] = LOCAL_DEVELOPMENT
        return await handler(request)  # type: ignore[operator]

    other = web.Application(middlewares=[as_dev, errors_middleware])
    install(other, ctx)
    runners = []
    try:
        async with httpx.AsyncClient() as client:
            for app in (parent, other):
                runner, url = await serve(app)
                runners.append(runner)
                made = await client.post(f"{url}/v1/datasets", params={"team": "t", "name": f"d{len(runners)}",
                                                                        "format": "csv"}, content=b"input\nhello\n")
                assert made.status_code == 201, made.text
                listed = await client.get(f"{url}/v1/datasets")
                assert len(listed.json()["datasets"]) == len(runners)
                missing = await client.get(f"{url}/v1/suites/su_none")
                assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
            assert (await client.get(f"{url.rsplit(':', 1)[0]}:{parent_port(runners[0])}/healthz")).json() == {"parent": True}
    finally:
        for runner in runners:
            await runner.cleanup()
        await store.close()


def parent_port(runner: web.AppRunner) -> int:
    port: int = runner.addresses[0][1]
    return port
