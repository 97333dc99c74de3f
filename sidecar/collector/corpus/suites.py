"""Suites: a pinned dataset version (or a slice version of it) plus metrics, every metric
pinned to an exact version (issue 13, item 2).

``POST /v1/suites`` body::

    {"name": "support-hard", "dataset_id": "ds_…", "dataset_version": 3,
     "slice": {"name": "billing", "version": 2},                      (optional)
     "metrics": [
        {"name": "pref",   "kind": "paired_judge",   "judge": {"model": "judge-1"}},
        {"name": "score",  "kind": "absolute_judge", "judge": {"rubric_text": "…", "scale": [1, 10]}},
        {"name": "exact",  "kind": "grader", "grader": {"type": "exact_match"}},
        {"name": "label",  "kind": "grader", "grader": {"type": "regex", "pattern": "label: (\\w+)", "capture": true}},
        {"name": "json",   "kind": "grader", "grader": {"type": "json_schema", "schema": {…}}},
        {"name": "latency", "kind": "latency"}, {"name": "cost", "kind": "cost"}]}

Each metric is stored with its ``version`` (:mod:`policies.graders`; the paired judge's is
:func:`judge.version.judge_version`), ``family`` and ``direction``. A metric given with a
``version`` must compute to exactly that version (``422 grader_version_mismatch``
otherwise): a shared definition never silently takes whatever the code makes of it today.
The dataset version is always named — a suite never follows "latest". Saving a suite
name again makes its next version, with a new id; existing suites never change.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

import msgspec

from judge.errors import JudgeError
from judge.version import JudgeSpec, judge_version
from policies.graders import (
    MODEL_GRADERS,
    InvalidMetric,
    absolute_judge_version,
    builtin_version,
    check_direction,
    check_grader,
    content_hash,
    family,
    grader_direction,
    grader_version,
)
from policies.roles import Principal
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.datasets import Name, require_write
from sidecar.collector.corpus.errors import InvalidSuite, VersionMismatch
from sidecar.errors import NotFound
from sidecar.services.access import visible
from sidecar.collector.store.corpus_records import SuiteRecord

MAX_METRICS = 20


class JudgeIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    model: Name | None = None
    rubric: Name | None = None
    rubric_text: Annotated[str, msgspec.Meta(min_length=1, max_length=100_000)] | None = None
    scale: tuple[int, int] | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=2.0)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] | None = None


class MetricIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: Name
    kind: Literal["paired_judge", "absolute_judge", "grader", "latency", "cost"]
    direction: Literal["higher", "lower", "categorical"] | None = None
    grader: dict[str, Any] | None = None
    judge: JudgeIn | None = None
    version: Annotated[str, msgspec.Meta(min_length=1, max_length=128)] | None = None


class SliceRef(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: Name
    version: Annotated[int, msgspec.Meta(ge=1)]


class SuiteIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    name: Name
    dataset_id: Name
    dataset_version: Annotated[int, msgspec.Meta(ge=1)]
    metrics: Annotated[list[MetricIn], msgspec.Meta(min_length=1, max_length=MAX_METRICS)]
    slice: SliceRef | None = None


def _pinned(ctx: CorpusContext, m: MetricIn, at: str) -> dict[str, Any]:
    """The metric with its spec resolved and its exact version; raises with ``field`` under ``at``."""
    if m.kind != "grader" and m.grader is not None:
        raise InvalidSuite(f"a {m.kind} metric takes no grader", field=f"{at}.grader")
    if m.kind not in MODEL_GRADERS and m.judge is not None:
        raise InvalidSuite(f"a {m.kind} metric takes no judge", field=f"{at}.judge")
    d = ctx.defaults
    j = m.judge or JudgeIn()
    spec: dict[str, Any]
    if m.kind == "paired_judge":
        if j.rubric_text is not None or j.scale is not None:
            raise InvalidSuite("the paired judge uses a registered pairwise rubric (rubric); rubric_text and scale "
                               "belong to the absolute judge", field=f"{at}.judge")
        try:
            jv = judge_version(JudgeSpec(
                name=m.name, model=j.model or d.judge_model, rubric_id=j.rubric or d.judge_rubric,
                temperature=d.judge_temperature if j.temperature is None else j.temperature,
                max_tokens=j.max_tokens or d.judge_max_tokens))
        except JudgeError as exc:
            raise InvalidSuite(str(exc), field=f"{at}.judge") from exc
        spec, version, natural = {k: v for k, v in jv.to_dict().items() if k not in ("id", "name")}, jv.id, "higher"
    elif m.kind == "absolute_judge":
        if j.rubric is not None:
            raise InvalidSuite("the absolute judge has its own rubric family: give rubric_text, not a pairwise "
                               "rubric id", field=f"{at}.judge.rubric")
        if j.rubric_text is None:
            raise InvalidSuite("an absolute judge needs rubric_text", field=f"{at}.judge.rubric_text")
        scale = j.scale or (1, 10)
        if scale[0] >= scale[1]:
            raise InvalidSuite("scale is [lowest, highest], lowest below highest", field=f"{at}.judge.scale")
        spec = {"model": j.model or d.judge_model, "rubric_text": j.rubric_text, "scale": list(scale),
                "temperature": 0.0 if j.temperature is None else j.temperature,
                "max_tokens": j.max_tokens or d.judge_max_tokens}
        version = absolute_judge_version(model=spec["model"], rubric=j.rubric_text, scale=scale,
                                         temperature=spec["temperature"], max_tokens=spec["max_tokens"])
        natural = "higher"
    elif m.kind == "grader":
        if m.grader is None:
            raise InvalidSuite("a grader metric needs grader: {\"type\": …}", field=f"{at}.grader")
        params = dict(m.grader)
        kind = params.pop("type", None)
        try:
            checked = check_grader(kind if isinstance(kind, str) else repr(kind), params)
        except InvalidMetric as exc:
            where = "grader.type" if exc.field == "grader" else exc.field.replace("params.", "grader.", 1)
            raise InvalidSuite(str(exc), field=f"{at}.{where}") from exc
        spec, version, natural = {"type": kind, **checked}, grader_version(str(kind), checked), \
            grader_direction(str(kind), checked)
    else:
        spec, version, natural = {}, builtin_version(m.kind), "lower"
    try:
        direction = check_direction(m.kind, m.direction or natural, natural)  # type: ignore[arg-type]
    except InvalidMetric as exc:
        raise InvalidSuite(str(exc), field=f"{at}.{exc.field}") from exc
    if m.version is not None and m.version != version:
        raise VersionMismatch(f"metric {m.name!r} pins version {m.version!r}, but its definition is version "
                              f"{version!r}: define the metric you pinned, or pin the new version on purpose",
                              field=f"{at}.version")
    return {"name": m.name, "kind": m.kind, "family": family(m.kind), "direction": direction,
            "version": version, "spec": spec}


def pin_metrics(ctx: CorpusContext, metrics: list[MetricIn]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: set[str] = set()
    for n, m in enumerate(metrics):
        if m.name in names:
            raise InvalidSuite(f"metric name {m.name!r} is used twice", field=f"$.metrics[{n}].name")
        names.add(m.name)
        out.append(_pinned(ctx, m, f"$.metrics[{n}]"))
    return out


def _missing(suite_id: str) -> str:
    return f"no suite {suite_id!r}"


class SuiteService:
    def __init__(self, ctx: CorpusContext) -> None:
        self._ctx = ctx

    async def item_count(self, suite: SuiteRecord) -> int:
        store = self._ctx.store
        if suite.slice_name is not None:
            for s in await store.list_slices(suite.dataset_id):
                if s.name == suite.slice_name and s.version == suite.slice_version:
                    return s.item_count
            return 0
        for v in await store.dataset_versions(suite.dataset_id):
            if v.version == suite.dataset_version:
                return v.item_count
        return 0

    async def view(self, s: SuiteRecord) -> dict[str, Any]:
        return {"id": s.id, "team": s.team, "name": s.name, "version": s.version,
                "dataset": {"id": s.dataset_id, "version": s.dataset_version},
                "slice": None if s.slice_name is None else {"name": s.slice_name, "version": s.slice_version},
                "item_count": await self.item_count(s), "metrics": msgspec.json.decode(s.metrics),
                "digest": s.digest, "created_at": s.created_at, "created_by": s.created_by, "evidence": "corpus"}

    async def create(self, principal: Principal, body: SuiteIn) -> dict[str, Any]:
        store = self._ctx.store
        dataset = await store.get_dataset(body.dataset_id)
        if dataset is None or not principal.sees(dataset.team):
            raise NotFound(f"no dataset {body.dataset_id!r}", field="$.dataset_id")
        require_write(principal, dataset.team, "suites")
        if body.dataset_version > dataset.latest_version:
            raise NotFound(f"dataset {dataset.id!r} has no version {body.dataset_version}", field="$.dataset_version")
        if body.slice is not None:
            found = [s for s in await store.list_slices(dataset.id)
                     if s.name == body.slice.name and s.version == body.slice.version]
            if not found:
                raise NotFound(f"dataset {dataset.id!r} has no slice {body.slice.name!r} version {body.slice.version}",
                               field="$.slice")
            if found[0].dataset_version != body.dataset_version:
                raise InvalidSuite(f"slice {body.slice.name!r} version {body.slice.version} is over dataset version "
                                   f"{found[0].dataset_version}, not {body.dataset_version}", field="$.slice")
        metrics = pin_metrics(self._ctx, body.metrics)
        slice_ = None if body.slice is None else [body.slice.name, body.slice.version]
        digest = content_hash({"dataset": [dataset.id, body.dataset_version], "slice": slice_, "metrics": metrics})
        stored = await store.save_suite(SuiteRecord(
            f"su_{uuid.uuid4().hex}", dataset.team, body.name, 0, dataset.id, body.dataset_version,
            None if body.slice is None else body.slice.name, None if body.slice is None else body.slice.version,
            msgspec.json.encode(metrics).decode(), digest, self._ctx.clock(), principal.subject))
        return await self.view(stored)

    async def get_record(self, principal: Principal, suite_id: str, *, field: str | None = None) -> SuiteRecord:
        suite = await self._ctx.store.get_suite(suite_id)
        if suite is None or not principal.sees(suite.team):  # another team's suite is missing, as a missing one
            raise NotFound(_missing(suite_id), field=field)
        return suite

    async def get(self, principal: Principal, suite_id: str) -> dict[str, Any]:
        return await self.view(await self.get_record(principal, suite_id))

    async def listing(self, principal: Principal, team: str | None) -> list[dict[str, Any]]:
        return [await self.view(s) for s in await self._ctx.store.list_suites(teams=visible(principal, team))]


__all__ = ["SuiteIn", "SuiteService", "pin_metrics"]
