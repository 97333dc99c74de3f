"""A collector with providers (the fake provider) serving the corpus API and running
comparison groups, for the tests of running experiments (issue 13, items 3-4, 6)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import httpx

from sidecar.collector.server import CollectorServer
from sidecar.config import Config, load_config
from sidecar.demo.fake_provider import FakeModel, FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, AuthKit, write_config
from tests.uplink.kit import AUDIENCE, ISSUER, KID, UplinkKit

TEAM = "team-a"
GENERATORS = (INCUMBENT, CANDIDATE)


def planted_models(baseline_q: float = 0.5, candidate_q: float = 0.8, **candidate: Any) -> dict[str, FakeModel]:
    """The baseline and candidate arms with a planted quality gap, and a judge."""
    return {INCUMBENT: FakeModel(quality=baseline_q, quality_noise=0.02, filler_words=(2, 6)),
            CANDIDATE: FakeModel(quality=candidate_q, quality_noise=0.02, filler_words=(2, 6), **candidate),
            JUDGE: FakeModel(judge=True)}


def collector_toml(tmp: Path, base_url: str, *, lease_seconds: float = 15.0, workers: int = 8,
                   store_url: str = "") -> tuple[Path, AuthKit]:
    """The collector's config (its provider: the fake at ``base_url``; its store the SQLite file
    of :class:`UplinkKit`, or ``store_url``) and the key its admin tokens are signed with."""
    kit = UplinkKit(tmp)
    auth = AuthKit(tmp)
    where = f'store_url = "{store_url}"' if store_url else f'db_path = "{kit.db}"'
    table = (f'[collector]\nlisten = "127.0.0.1:0"\n{where}\naudience = "{AUDIENCE}"\n'
             f'issuers = ["{ISSUER}"]\n[[collector.keys]]\nkid = "{KID}"\npath = "{kit.public}"\n')
    path = write_config(tmp, base_url, extra=table, db="collector-unused.db", auth=auth.toml(),
                        lease_seconds=lease_seconds, workers=workers)
    return path, auth


def provider_calls(fake: FakeProvider, models: Sequence[str] = GENERATORS) -> int:
    return sum(fake.calls[m] for m in models)


class Api:
    """An httpx client for the corpus API that keeps every response body it saw."""

    def __init__(self, auth: AuthKit, url: str) -> None:
        self.auth = auth
        self.url = url
        self.client = httpx.AsyncClient(base_url=url, timeout=30.0)
        self.bodies: list[str] = []

    async def aclose(self) -> None:
        await self.client.aclose()

    async def call(self, method: str, path: str, *, roles: Sequence[str] = ("tenant_admin",),
                   teams: Sequence[str] = (TEAM,), reads_content: bool = False, **kw: Any) -> httpx.Response:
        token = self.auth.token(roles=roles, teams=teams, content=reads_content)
        headers = {"Authorization": f"Bearer {token}", **kw.pop("headers", {})}
        r = await self.client.request(method, path, headers=headers, **kw)
        self.bodies.append(r.text)
        return r

    async def dataset(self, n: int, *, name: str = "ds") -> str:
        lines = "\n".join(json.dumps({"input": f"question {i}", "expected": f"answer {i}"}) for i in range(n))
        r = await self.call("POST", "/v1/datasets", params={"team": TEAM, "name": name, "format": "jsonl"},
                            content=lines.encode())
        assert r.status_code == 201, r.text
        dataset_id: str = r.json()["id"]
        return dataset_id

    async def suite(self, dataset_id: str, metrics: list[dict[str, Any]], *, name: str = "suite") -> str:
        r = await self.call("POST", "/v1/suites", json={"name": name, "dataset_id": dataset_id,
                                                        "dataset_version": 1, "metrics": metrics})
        assert r.status_code == 201, r.text
        suite_id: str = r.json()["id"]
        return suite_id


def group_body(suite_id: str, *, repetitions: int = 1, primary: str = "pref", **extra: Any) -> dict[str, Any]:
    return {"suite_id": suite_id, "repetitions": repetitions, "primary_metric": primary,
            "arms": [{"name": "today", "model": INCUMBENT}, {"name": "next", "model": CANDIDATE}], **extra}


async def start_group(api: Api, body: dict[str, Any], key: str) -> httpx.Response:
    ready = await api.call("POST", "/v1/comparisons/readiness", json=body)
    assert ready.status_code == 200, ready.text
    return await api.call("POST", "/v1/comparisons", json={**body, "readiness_token": ready.json()["readiness_token"]},
                          headers={"Idempotency-Key": key})


def config_of(path: Path) -> Config:
    return load_config(str(path), {})


async def open_collector(path: Path, port: int | None = None) -> CollectorServer:
    config = config_of(path)
    server = CollectorServer(config.collector, config=config, port=port)
    await server.start()
    return server
