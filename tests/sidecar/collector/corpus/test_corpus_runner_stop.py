"""Issue 21 item 11: a graceful stop drains the item the runner claimed.

The race, reproduced deterministically: the runner has one item in hand (its calls held by the
provider until the stop has begun) and is *taking* the next one (its read of the run, held by
the store until the stop has begun) when the stop begins. Before the fix the stop waited on a
snapshot of the items in hand only: the next item was created after it, claimed its
invocations, and was cancelled as soon as the first item finished — left
``invocation_indeterminate`` although the drain deadline was far off. Now the item being taken
as the stop began claims nothing, the item in hand completes and is graded, and nothing is
indeterminate.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Mapping, cast

from sidecar.collector.corpus.runner import CorpusRunner, RunnerSettings
from sidecar.demo.fake_provider import FakeProvider
from sidecar.engine.parts import open_providers, price_book, resolver
from sidecar.providers.base import ChatRequest, Provider, ProviderResult
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.collector.store.corpus_run_records import RunRecord
from tests.harness import wait_for
from tests.sidecar.collector.corpus.runs_kit import Api, collector_toml, config_of, group_body, open_collector, planted_models, start_group


class HeldProvider:
    """The real provider; a call about the first item waits until the stop has begun, one about
    any later item until the stop has returned (so a later item still in hand at the end of the
    stop is one the stop did not drain)."""

    def __init__(self, inner: Provider, gates: Gates) -> None:
        self._inner, self._gates = inner, gates

    async def chat(self, request: ChatRequest) -> ProviderResult:
        first = any("question 0" in str(m.get("content")) for m in request.messages)
        if first:
            self._gates.first_calls += 1
            self._gates.first_called.set()
            await self._gates.stop_begun.wait()
        else:
            self._gates.later_calls += 1
            await self._gates.stop_returned.wait()
        return await self._inner.chat(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class Gates:
    def __init__(self) -> None:
        self.first_called = asyncio.Event()
        self.taking_next = asyncio.Event()
        self.stop_begun = asyncio.Event()
        self.stop_returned = asyncio.Event()
        self.first_calls = 0
        self.later_calls = 0


class TakingStore:
    """The collector's store; the runner's second read of the run — as it takes the second item,
    after the first is in hand — waits until the stop has begun."""

    def __init__(self, inner: ControlPlaneStore, gates: Gates) -> None:
        self._inner, self._gates = inner, gates
        self._reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def get_run(self, comparison_id: str) -> RunRecord | None:
        self._reads += 1
        if self._reads == 2:
            self._gates.taking_next.set()
            await self._gates.stop_begun.wait()
        return await self._inner.get_run(comparison_id)


async def test_a_stop_while_an_item_is_being_taken_drains_what_was_claimed(tmp_path: Path) -> None:
    async with FakeProvider(planted_models(), seed=5) as fake:
        path, auth = collector_toml(tmp_path, fake.base_url)
        config = config_of(path)
        server = await open_collector(path)
        api = Api(auth, server.url)
        runner: CorpusRunner | None = None
        gates = Gates()
        try:
            assert server.corpus_runner is not None and server.store is not None
            await server.corpus_runner.stop()  # this test runs the groups with its own runner
            server.corpus_runner = None
            suite = await api.suite(await api.dataset(4), [{"name": "pref", "kind": "paired_judge"},
                                                           {"name": "latency", "kind": "latency"}])
            started = await start_group(api, group_body(suite), "k-stop")
            assert started.status_code == 201, started.text
            gid = started.json()["id"]

            def providers() -> Mapping[str, Provider]:
                return {name: HeldProvider(p, gates) for name, p in open_providers(config).items()}

            runner = CorpusRunner(store=cast(ControlPlaneStore, TakingStore(server.store, gates)), open_providers=providers,
                                  resolve=resolver(config, price_book(config)),
                                  settings=RunnerSettings(drain_s=30.0, items_in_flight=2))
            await runner.start()
            await asyncio.wait_for(asyncio.gather(gates.first_called.wait(), gates.taking_next.wait()), 30)

            stopping = asyncio.create_task(runner.stop())

            async def begun() -> bool:
                return runner is not None and runner.stopping

            await wait_for(begun, what="the stop to begin")
            gates.stop_begun.set()  # the first item's calls answer; the second item's read returns
            await asyncio.wait_for(stopping, 30)
            runner = None
            gates.stop_returned.set()

            attempts = await server.store.run_attempts(gid)
            statuses = sorted((a.item_id, a.arm, a.status) for a in attempts)
            scores = await server.store.run_scores(gid)
            print(f"\nat the stop: {statuses}; scores {sorted((s.metric, s.status) for s in scores)}")
            assert not [a for a in attempts if a.status in ("invocation_indeterminate", "claimed")], statuses
            assert len(attempts) == 2 and {a.status for a in attempts} == {"completed"}, \
                "the item in hand completed; the item being taken claimed nothing"
            assert gates.first_calls >= 2 and gates.later_calls == 0
            assert {s.metric for s in scores if s.status == "scored"} == {"pref", "latency"}, \
                "the item in hand was graded"
        finally:
            gates.stop_begun.set()
            gates.stop_returned.set()
            if runner is not None:
                await runner.stop()
            await api.aclose()
            await server.stop()
