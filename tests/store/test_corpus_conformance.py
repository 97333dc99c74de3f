"""The corpus part of the store contract (:class:`sidecar.collector.store.base.CorpusStore`), method by
method, on every backend (``-k sqlite`` / ``-k postgres``)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from sidecar.collector.store import ControlPlaneStore
from sidecar.collector.store.corpus_records import (
    ComparisonRecord,
    DatasetRecord,
    DatasetVersion,
    ItemRow,
    SliceRecord,
    SuiteRecord,
)
from sidecar.store.errors import IdempotencyConflict
from tests.store.conftest import OpenStore

pytestmark = pytest.mark.collector_store


def dataset(id_: str = "ds1", team: str = "a", name: str = "hard", at: float = 1.0) -> DatasetRecord:
    return DatasetRecord(id_, team, name, 1, at, "alice")


def version(ds: str = "ds1", n: int = 1, parent: int | None = None, count: int = 2) -> DatasetVersion:
    return DatasetVersion(ds, n, "import" if parent is None else "edit", parent, count, f"digest-{n}", 1.0 + n, "alice")


def items(*pairs: tuple[str, str]) -> list[ItemRow]:
    return [ItemRow(i, r, f'{{"item":"{i}","rev":"{r}"}}') for i, r in pairs]


def suite(id_: str, name: str = "s", team: str = "a", at: float = 1.0) -> SuiteRecord:
    return SuiteRecord(id_, team, name, 0, "ds1", 1, None, None, "[]", "d", at, "alice")


def comparison(id_: str, team: str = "a", at: float = 1.0) -> ComparisonRecord:
    return ComparisonRecord(id_, team, "su1", "{}", "{}", "tok", 10, "admitted", at, "alice")


async def test_create_dataset_round_trips_and_a_taken_name_writes_nothing(store: ControlPlaneStore) -> None:
    assert await store.create_dataset(dataset(), version(), items(("i1", "r1"), ("i2", "r2")))
    assert await store.get_dataset("ds1") == dataset()
    assert await store.get_dataset("nope") is None
    assert await store.dataset_versions("ds1") == [version()]
    assert await store.version_items("ds1", 1) == items(("i1", "r1"), ("i2", "r2"))
    assert not await store.create_dataset(dataset("ds2"), version("ds2"), items(("x", "y")))
    assert await store.get_dataset("ds2") is None and await store.version_items("ds2", 1) == []
    assert await store.create_dataset(dataset("ds3", team="b"), version("ds3"), [])  # same name, other team


async def test_versions_are_conditional_on_the_parent_and_share_revisions(store: ControlPlaneStore) -> None:
    await store.create_dataset(dataset(), version(), items(("i1", "r1"), ("i2", "r2")))
    assert await store.add_dataset_version(version(n=2, parent=1, count=2), items(("i2", "r2"), ("i1", "r1b")))
    assert not await store.add_dataset_version(version(n=2, parent=1, count=1), items(("i9", "r9")))  # stale
    assert not await store.add_dataset_version(version(ds="nope", n=2, parent=1), [])
    got = await store.get_dataset("ds1")
    assert got is not None and got.latest_version == 2
    assert [v.version for v in await store.dataset_versions("ds1")] == [1, 2]
    assert await store.version_items("ds1", 1) == items(("i1", "r1"), ("i2", "r2"))  # immutable
    assert await store.version_items("ds1", 2) == items(("i2", "r2"), ("i1", "r1b"))


async def test_concurrent_edits_of_one_version_land_once(stores: OpenStore) -> None:
    one, two = await stores(), await stores()
    await one.create_dataset(dataset(), version(), items(("i1", "r1")))
    results = await asyncio.gather(
        one.add_dataset_version(version(n=2, parent=1, count=1), items(("i1", "ra"))),
        two.add_dataset_version(version(n=2, parent=1, count=1), items(("i1", "rb"))),
    )
    assert sorted(results) == [False, True]
    assert len(await one.version_items("ds1", 2)) == 1


async def test_list_datasets_newest_first_filtered_by_team(store: ControlPlaneStore) -> None:
    await store.create_dataset(dataset("d1", "a", "x", 1.0), version("d1"), [])
    await store.create_dataset(dataset("d2", "b", "x", 2.0), version("d2"), [])
    await store.create_dataset(dataset("d3", "a", "y", 3.0), version("d3"), [])
    assert [d.id for d in await store.list_datasets()] == ["d3", "d2", "d1"]
    assert [d.id for d in await store.list_datasets(teams=["a"])] == ["d3", "d1"]
    assert await store.list_datasets(teams=[]) == []


async def test_slices_number_their_versions(stores: OpenStore) -> None:
    store, peer = await stores(), await stores()
    await store.create_dataset(dataset(), version(), items(("i1", "r1")))
    base = SliceRecord("ds1", "easy", 0, 1, '{"tags_all":["easy"]}', 1, 5.0, "alice")
    first = await store.save_slice(base)
    assert first == dataclasses.replace(base, version=1)
    both = await asyncio.gather(store.save_slice(base), peer.save_slice(base))
    assert sorted(s.version for s in both) == [2, 3]
    other = await store.save_slice(dataclasses.replace(base, name="alpha"))
    assert other.version == 1
    assert [(s.name, s.version) for s in await store.list_slices("ds1")] == [
        ("alpha", 1), ("easy", 1), ("easy", 2), ("easy", 3)]


async def test_suites_number_versions_per_team_and_name(stores: OpenStore) -> None:
    store, peer = await stores(), await stores()
    await store.create_dataset(dataset(), version(), [])
    s1 = await store.save_suite(suite("su1"))
    assert s1.version == 1 and await store.get_suite("su1") == s1
    both = await asyncio.gather(store.save_suite(suite("su2", at=2.0)), peer.save_suite(suite("su3", at=3.0)))
    assert sorted(s.version for s in both) == [2, 3]
    assert (await store.save_suite(suite("su4", team="b", at=4.0))).version == 1
    assert [s.id for s in await store.list_suites(teams=["a"])] == ["su3", "su2", "su1"]
    assert await store.get_suite("nope") is None


async def test_comparison_request_keys(stores: OpenStore) -> None:
    store, peer = await stores(), await stores()
    await store.create_dataset(dataset(), version(), [])
    await store.save_suite(suite("su1"))
    first, created = await store.create_comparison(comparison("c1"), request_key="k1", body_hash="h1")
    assert created and first == comparison("c1")
    again, created = await peer.create_comparison(comparison("c2", at=2.0), request_key="k1", body_hash="h1")
    assert not created and again == first
    assert await peer.find_request_key("k1") == ("h1", first)
    assert await peer.find_request_key("k9") is None
    with pytest.raises(IdempotencyConflict):
        await store.create_comparison(comparison("c3"), request_key="k1", body_hash="h2")
    assert await store.get_comparison("c2") is None and await store.get_comparison("c3") is None
    raced = await asyncio.gather(
        store.create_comparison(comparison("c4", at=4.0), request_key="k2", body_hash="h"),
        peer.create_comparison(comparison("c5", at=5.0), request_key="k2", body_hash="h"),
    )
    assert raced[0][0] == raced[1][0] and sorted(c for _, c in raced) == [False, True]
    await store.create_comparison(comparison("c6", team="b", at=6.0), request_key="k3", body_hash="h")
    listed = [c.id for c in await store.list_comparisons(teams=["a"])]
    assert listed[-1] == "c1" and len(listed) == 2
    assert len(await store.list_comparisons(limit=1)) == 1
    assert [c.id for c in await store.list_comparisons(suite_id="su1", teams=["b"])] == ["c6"]
    assert await store.list_comparisons(suite_id="su9") == []


async def test_a_1000_item_version_round_trips(store: ControlPlaneStore, backend: Any) -> None:
    import time

    rows = [ItemRow(f"item-{n:04d}", f"rev-{n:04d}", '{"input":[{"role":"user","content":"q%d"}]}' % n)
            for n in range(1000)]
    started = time.perf_counter()
    assert await store.create_dataset(dataset(), version(count=1000), rows)
    wrote = time.perf_counter() - started
    got = await store.version_items("ds1", 1)
    read = time.perf_counter() - started - wrote
    print(f"\n1,000 items, {backend.kind}: written in {wrote * 1000:.0f} ms, read in {read * 1000:.0f} ms")
    assert got == rows
