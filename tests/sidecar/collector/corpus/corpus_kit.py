"""A corpus API on loopback for tests: the real app (JWT authentication included) over a
real store, a model table the test can change, and tokens of any role."""

from __future__ import annotations

import time
from collections.abc import AsyncIterable
from pathlib import Path
from typing import Any, Sequence

import httpx
from aiohttp import web

from policies.money import Price
from sidecar.auth.keys import KeySet, PemSource
from sidecar.auth.verify import Verifier
from sidecar.collector.corpus.api import corpus_app
from sidecar.collector.corpus.context import CorpusContext, RetainedSource
from sidecar.ingest.wire import Exchange
from sidecar.collector.store import make_collector_store
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.trials.create import Resolved, TrialDefaults
from tests.harness import AuthKit

DEFAULTS = TrialDefaults(judge_model="judge-1", judge_rubric="pairwise-v1", judge_temperature=0.0,
                         judge_max_tokens=512, audit_share=0.1, candidate_max_tokens=256)


class CorpusKit:
    def __init__(self, tmp: Path, *, store_url: str | None = None, retention: dict[str, bool] | None = None,
                 retained: RetainedSource | None = None) -> None:
        self.tmp = tmp
        self.store_url = store_url or str(tmp / "corpus.db")
        self.auth = AuthKit(tmp)
        self.retention = retention or {}
        self.retained = retained
        self.models: dict[str, Resolved] = {
            "model-a": Resolved("fake", "upstream-a", Price(1_000_000, 2_000_000)),
            "model-b": Resolved("fake", "upstream-b", Price(3_000_000, 6_000_000)),
            "free-model": Resolved("fake", "upstream-free", None),
            "judge-1": Resolved("fake", "upstream-judge", Price(1_000_000, 4_000_000)),  # the suites' judge: priced
        }
        self.store: ControlPlaneStore | None = None
        self._runner: web.AppRunner | None = None
        self.client = httpx.AsyncClient(timeout=30.0)
        self.url = ""

    def resolve(self, name: str) -> Resolved:
        if name not in self.models:
            raise LookupError(f"model {name!r} is not a configured alias")
        return self.models[name]

    async def __aenter__(self) -> CorpusKit:
        self.store = make_collector_store(self.store_url)
        await self.store.open()
        ctx = CorpusContext(store=self.store, clock=time.time, resolve=self.resolve, defaults=DEFAULTS,
                            default_retention=lambda team: self.retention.get(team, True), retained=self.retained)
        verifier = Verifier(KeySet([PemSource(str(self.auth.public_path), ("EdDSA",), AuthKit.KID)]),
                            audience=AuthKit.AUDIENCE, issuer=AuthKit.ISSUER)
        self._runner = web.AppRunner(corpus_app(ctx, verifier), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.aclose()
        if self._runner is not None:
            await self._runner.cleanup()
        if self.store is not None:
            await self.store.close()

    def headers(self, roles: Sequence[str] = ("platform_admin",), teams: Sequence[str] = ("team-a",),
                content: bool = False, **extra: str) -> dict[str, str]:
        token = self.auth.token(roles=roles, teams=teams, content=content)
        return {"Authorization": f"Bearer {token}", **extra}

    async def call(self, method: str, path: str, *, roles: Sequence[str] = ("platform_admin",),
                   teams: Sequence[str] = ("team-a",), reads_content: bool = False,
                   headers: dict[str, str] | None = None, **kw: Any) -> httpx.Response:
        return await self.client.request(method, self.url + path,
                                         headers={**self.headers(roles, teams, reads_content), **(headers or {})}, **kw)

    async def import_jsonl(self, lines: Sequence[dict[str, Any]], *, team: str = "team-a", name: str = "ds",
                           **kw: Any) -> httpx.Response:
        import json

        body = "\n".join(json.dumps(line) for line in lines).encode()
        return await self.call("POST", "/v1/datasets", params={"team": team, "name": name, "format": "jsonl"},
                               content=body, **kw)


def items(n: int, *, tag_every: int = 0) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        item: dict[str, Any] = {"input": f"question {i}", "expected": f"answer {i}",
                                "metadata": {"n": i, "lang": "fr" if i % 2 else "en"}}
        if tag_every and i % tag_every == 0:
            item["tags"] = ["hard"]
        out.append(item)
    return out


async def exchanges_of(rows: Sequence[dict[str, Any]]) -> AsyncIterable[Exchange]:
    import msgspec

    for row in rows:
        yield msgspec.convert(row, Exchange)
