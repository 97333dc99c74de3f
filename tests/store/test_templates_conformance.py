"""Comparison templates and archived groups in the store (:class:`sidecar.collector.store.base.TemplateStore`,
issue 24 items 10 and 12), on every backend (``-k sqlite`` / ``-k postgres``): a save against a
stale revision writes nothing, the same request key returns the committed version (never a
duplicate), two saves of one revision at once make one version."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import cast

import pytest

from sidecar.collector.store import ControlPlaneStore
from sidecar.collector.store.corpus_records import ComparisonRecord, DatasetRecord, DatasetVersion, SuiteRecord
from sidecar.collector.store.template_records import RevisionConflict, TemplateExists, TemplateRecord
from sidecar.store.errors import IdempotencyConflict
from tests.store.conftest import OpenStore

pytestmark = pytest.mark.collector_store

HEADER = TemplateRecord("ct1", "a", "weekly", 1, 1.0, "alice", 1.0)


async def test_versions_move_only_from_the_current_revision(store: ControlPlaneStore) -> None:
    saved, v1, created = await store.save_template(HEADER, '{"n": 1}', expected_revision=None, request_key="k1",
                                                   body_hash="h1")
    assert created and saved.revision == 1 and v1.version == 1
    with pytest.raises(TemplateExists):
        await store.save_template(dataclasses.replace(HEADER, id="ct2"), "{}", expected_revision=None,
                                  request_key="k-other", body_hash="hx")
    at2 = dataclasses.replace(HEADER, updated_at=2.0)
    saved, v2, created = await store.save_template(at2, '{"n": 2}', expected_revision=1, request_key="k2",
                                                   body_hash="h2")
    assert created and saved.revision == 2 and v2.version == 2 and v2.config == '{"n": 2}'
    with pytest.raises(RevisionConflict) as stale:
        await store.save_template(at2, '{"n": 3}', expected_revision=1, request_key="k3", body_hash="h3")
    assert (stale.value.expected, stale.value.current) == (1, 2)
    assert [v.version for v in await store.template_versions("ct1")] == [2, 1], "the stale save wrote nothing"
    # the stale save's key was not kept: after a refresh it saves against the current revision
    saved, v3, created = await store.save_template(at2, '{"n": 3}', expected_revision=2, request_key="k3",
                                                   body_hash="h3b")
    assert created and v3.version == 3
    # a retried save with its original key returns what it committed, though the template moved on
    again, v2_again, created = await store.save_template(at2, '{"n": 2}', expected_revision=1, request_key="k2",
                                                         body_hash="h2")
    assert not created and v2_again == v2 and again.revision == 3
    with pytest.raises(IdempotencyConflict):
        await store.save_template(at2, '{"n": 9}', expected_revision=3, request_key="k2", body_hash="other")
    assert len(await store.template_versions("ct1")) == 3
    assert [t.id for t in await store.list_templates(teams=["a"])] == ["ct1"]
    assert await store.list_templates(teams=["b"]) == []
    assert (await store.get_template("ct1")) == again


async def test_two_saves_of_one_revision_at_once_make_one_version(stores: OpenStore) -> None:
    first, second = cast(ControlPlaneStore, await stores()), cast(ControlPlaneStore, await stores())
    await first.save_template(HEADER, "{}", expected_revision=None, request_key="k1", body_hash="h1")
    results = await asyncio.gather(
        *(s.save_template(HEADER, f'{{"n": {n}}}', expected_revision=1, request_key=f"k-{n}", body_hash=f"h-{n}")
          for n, s in enumerate([first, second] * 3)),
        return_exceptions=True)
    assert sum(1 for r in results if isinstance(r, tuple)) == 1
    assert all(isinstance(r, RevisionConflict) for r in results if not isinstance(r, tuple))
    assert [v.version for v in await first.template_versions("ct1")] == [2, 1]


async def test_archiving_a_group_once(store: ControlPlaneStore) -> None:
    await store.create_dataset(DatasetRecord("ds1", "a", "d", 1, 1.0, None),
                               DatasetVersion("ds1", 1, "import", None, 0, "d", 1.0, None), [])
    await store.save_suite(SuiteRecord("su1", "a", "s", 0, "ds1", 1, None, None, "[]", "d", 1.0, None))
    await store.create_comparison(ComparisonRecord("cg1", "a", "su1", "{}", "{}", "tok", 4, "admitted", 1.0, None),
                                  request_key="key-cg1", body_hash="h")
    assert await store.comparison_archived("cg1") is None
    assert await store.archive_comparison("cg1", now=5.0, by="alice") == 5.0
    assert await store.archive_comparison("cg1", now=9.0, by="bob") == 5.0, "archived once"
    assert await store.comparison_archived("cg1") == 5.0
    assert await store.archive_comparison("missing", now=5.0, by=None) is None
