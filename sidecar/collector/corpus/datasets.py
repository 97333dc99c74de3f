"""The dataset service: imports, versions, edits, slices and seeding, as a principal may.

Rights (:mod:`policies.roles`): listing datasets, versions and slices needs a role on the
team; importing, editing and saving slices a writer's role; reading items — prompts and
expected outputs — the content permission too. Another team's dataset is ``404 not_found``
exactly as a missing one is.

Versions. Every import or edit makes a new immutable version whose ``parent`` is the
version it was made from; an edit or re-import names its base (``base_version``) and is
``409 version_conflict`` when another one landed first — never applied over content its
author did not see.

Seeding from traffic needs the team's prompt retention (DESIGN.md section 9): with it off
the answer is ``409 dataset_seeding_unavailable`` with the posture's reason, and nothing
is read. :func:`seed_items` is the seam retention storage plugs into: it takes any async
iterable of exchanges.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, AsyncIterable, Sequence

import msgspec

from policies.posture import retention_features
from policies.roles import Action, Principal, decide
from policies.slices import SliceFilter, keeps
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.errors import InvalidDataset, NotBuilt, SeedingUnavailable
from sidecar.collector.corpus.items import Item, ItemIn, build_items, decode_row, make_item, parse, version_digest
from sidecar.errors import BadRequest, Conflict, Forbidden, NotFound
from sidecar.ingest.wire import Exchange, split_path
from sidecar.services.access import require, visible
from sidecar.collector.store.corpus_records import DatasetRecord, DatasetVersion, ItemRow, SliceRecord
from sidecar.trials.create import MAX_NAME_CHARS, NAME_PATTERN, NAME_RULE

Name = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_CHARS, pattern=NAME_PATTERN)]
MAX_PAGE = 10_000


class EditIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``POST /v1/datasets/{id}/edits``: items to add or replace (by id; without an id, by the
    id its input derives) and ids to remove, over ``base_version``."""

    base_version: Annotated[int, msgspec.Meta(ge=1)]
    upsert: list[ItemIn] = []
    remove: list[str] = []


class FilterIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    tags_all: list[str] = []
    tags_any: list[str] = []
    metadata: dict[str, str | int | float | bool | None] = {}


class SliceIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``POST /v1/datasets/{id}/slices``: a named filter over one version (pinned)."""

    name: Name
    version: Annotated[int, msgspec.Meta(ge=1)]
    filter: FilterIn = FilterIn()


class SeedIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``POST /v1/datasets/seed``: a new dataset from the team's retained traffic."""

    team: Name
    name: Name


def decode(body: bytes, kind: type[Any]) -> Any:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        raise BadRequest(message, field=path) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc


def _missing(dataset_id: str) -> str:
    return f"no dataset {dataset_id!r}"


def dataset_view(d: DatasetRecord) -> dict[str, Any]:
    return {"id": d.id, "team": d.team, "name": d.name, "latest_version": d.latest_version,
            "created_at": d.created_at, "created_by": d.created_by, "evidence": "corpus"}


def version_view(v: DatasetVersion) -> dict[str, Any]:
    return {"dataset_id": v.dataset_id, "version": v.version, "source": v.source, "parent": v.parent,
            "item_count": v.item_count, "digest": v.digest, "created_at": v.created_at, "created_by": v.created_by}


def slice_view(s: SliceRecord) -> dict[str, Any]:
    return {"dataset_id": s.dataset_id, "name": s.name, "version": s.version, "dataset_version": s.dataset_version,
            "filter": msgspec.json.decode(s.filter), "item_count": s.item_count, "created_at": s.created_at,
            "created_by": s.created_by}


def require_write(principal: Principal, team: str, what: str) -> None:
    """Creating under a team named in the request: ``403`` naming ``team`` (as trials do)."""
    decision = decide(principal, team, "write")
    if decision == "not_found":
        raise Forbidden(f"team {team!r} is not one of your teams", field="team")
    if decision == "forbidden":
        raise Forbidden(f"your roles may read team {team!r}'s {what} but not change them", field="team")


def apply_edit(base: Sequence[Item], edit: EditIn) -> list[Item]:
    """The items of ``base`` after ``edit``: upserts replace in place or append, removals go."""
    ids = {item.id for item in base}
    upserts = build_items(((n, entry) for n, entry in enumerate(edit.upsert)),
                          lambda n, name: f"$.upsert[{n}].{name}")
    seen = {item.id for item in upserts}
    for n, item_id in enumerate(edit.remove):
        if item_id not in ids:
            raise InvalidDataset(f"remove[{n}]: no item {item_id!r} in version {edit.base_version}",
                                 field=f"$.remove[{n}]")
        if item_id in seen:
            raise InvalidDataset(f"remove[{n}]: {item_id!r} is also upserted", field=f"$.remove[{n}]")
    removed = set(edit.remove)
    replacing = {item.id: item for item in upserts}
    out = [replacing.pop(item.id, item) for item in base if item.id not in removed]
    out.extend(item for item in upserts if item.id in replacing)
    return out


def seed_item(exchange: Exchange) -> Item | None:
    """The item an exchange seeds: its messages, the served answer as the expected output,
    tag ``traffic``, content-free facts as metadata. None when it cannot be one (redacted,
    or messages outside the chat shape items take)."""
    if exchange.redacted:
        return None
    raw = {"id": exchange.exchange_id, "input": exchange.request.messages, "expected": exchange.response.content,
           "tags": ["traffic"],
           "metadata": {"exchange_id": exchange.exchange_id, "model": exchange.model, "route": exchange.route,
                        "gateway": exchange.gateway or None}}
    try:
        entry = msgspec.convert(raw, ItemIn)
    except msgspec.ValidationError:
        return None
    return make_item(exchange.exchange_id, entry)


async def seed_items(exchanges: AsyncIterable[Exchange], *, limit: int) -> tuple[list[Item], int]:
    """Items from ``exchanges`` (first seen wins for a repeated exchange id) up to ``limit``,
    and how many exchanges were skipped."""
    items: list[Item] = []
    seen: set[str] = set()
    skipped = 0
    async for exchange in exchanges:
        item = seed_item(exchange)
        if item is None or item.id in seen:
            skipped += 1
            continue
        seen.add(item.id)
        items.append(item)
        if len(items) >= limit:
            break
    return items, skipped


class DatasetService:
    """Datasets as a principal may see and change them. Raises :class:`ApiError` subclasses
    for refusals; store failures propagate (the API's guard answers 503)."""

    def __init__(self, ctx: CorpusContext) -> None:
        self._ctx = ctx

    async def _dataset(self, principal: Principal, dataset_id: str, action: Action) -> DatasetRecord:
        record = await self._ctx.store.get_dataset(dataset_id)
        if record is None:
            raise NotFound(_missing(dataset_id))
        require(principal, record.team, action, not_found=_missing(dataset_id),
                forbidden=f"your roles may read dataset {dataset_id!r} but not change it"
                if action == "write" else "reading dataset items needs the content permission")
        return record

    async def _new(self, principal: Principal, team: str, name: str, source: str, items: Sequence[Item]) -> dict[str, Any]:
        now = self._ctx.clock()
        rows = [i.row() for i in items]
        record = DatasetRecord(f"ds_{uuid.uuid4().hex}", team, name, 1, now, principal.subject)
        version = DatasetVersion(record.id, 1, source, None, len(rows), version_digest(rows), now, principal.subject)
        if not await self._ctx.store.create_dataset(record, version, rows):
            raise Conflict(f"team {team!r} already has a dataset named {name!r}; import a new version of it",
                           field="name", code="dataset_exists")
        return {**dataset_view(record), "version": version_view(version)}

    async def create(self, principal: Principal, team: str, name: str, fmt: str, body: bytes) -> dict[str, Any]:
        require_write(principal, team, "datasets")
        return await self._new(principal, team, name, "import", parse(body, fmt))

    async def _next(self, principal: Principal, record: DatasetRecord, base: int, source: str,
                    items: Sequence[Item]) -> dict[str, Any]:
        rows = [i.row() for i in items]
        now = self._ctx.clock()
        version = DatasetVersion(record.id, base + 1, source, base, len(rows), version_digest(rows), now,
                                 principal.subject)
        if base != record.latest_version or not await self._ctx.store.add_dataset_version(version, rows):
            latest = await self._ctx.store.get_dataset(record.id)
            have = record.latest_version if latest is None else latest.latest_version
            raise Conflict(f"dataset {record.id!r} is at version {have}, not {base}; read it again and redo the change",
                           field="base_version", code="version_conflict")
        return version_view(version)

    async def reimport(self, principal: Principal, dataset_id: str, fmt: str, body: bytes,
                       base_version: int | None) -> dict[str, Any]:
        """A new version holding exactly the file's items; ``base_version`` defaults to the latest."""
        record = await self._dataset(principal, dataset_id, "write")
        items = parse(body, fmt)
        return await self._next(principal, record, base_version or record.latest_version, "import", items)

    async def edit(self, principal: Principal, dataset_id: str, edit: EditIn) -> dict[str, Any]:
        record = await self._dataset(principal, dataset_id, "write")
        if edit.base_version > record.latest_version:
            raise NotFound(f"dataset {dataset_id!r} has no version {edit.base_version}", field="$.base_version")
        base = [decode_row(r) for r in await self._ctx.store.version_items(dataset_id, edit.base_version)]
        return await self._next(principal, record, edit.base_version, "edit", apply_edit(base, edit))

    async def listing(self, principal: Principal, team: str | None) -> list[dict[str, Any]]:
        return [dataset_view(d) for d in await self._ctx.store.list_datasets(teams=visible(principal, team))]

    async def get(self, principal: Principal, dataset_id: str) -> dict[str, Any]:
        record = await self._dataset(principal, dataset_id, "read")
        versions = await self._ctx.store.dataset_versions(dataset_id)
        return {**dataset_view(record), "versions": [version_view(v) for v in versions]}

    async def versions(self, principal: Principal, dataset_id: str) -> list[dict[str, Any]]:
        await self._dataset(principal, dataset_id, "read")
        return [version_view(v) for v in await self._ctx.store.dataset_versions(dataset_id)]

    async def version_rows(self, principal: Principal, dataset_id: str, version: int, action: Action) -> list[ItemRow]:
        record = await self._dataset(principal, dataset_id, action)
        if not 1 <= version <= record.latest_version:
            raise NotFound(f"dataset {dataset_id!r} has no version {version}", field="version")
        return await self._ctx.store.version_items(dataset_id, version)

    async def items(self, principal: Principal, dataset_id: str, version: int, *, offset: int,
                    limit: int) -> dict[str, Any]:
        rows = await self.version_rows(principal, dataset_id, version, "content")
        page = rows[offset:offset + limit]
        return {"dataset_id": dataset_id, "version": version, "total": len(rows), "offset": offset,
                "items": [decode_row(r).view() for r in page]}

    async def save_slice(self, principal: Principal, dataset_id: str, body: SliceIn) -> dict[str, Any]:
        record = await self._dataset(principal, dataset_id, "write")
        if body.version > record.latest_version:
            raise NotFound(f"dataset {dataset_id!r} has no version {body.version}", field="$.version")
        flt = SliceFilter(tuple(body.filter.tags_all), tuple(body.filter.tags_any), dict(body.filter.metadata))
        rows = await self._ctx.store.version_items(dataset_id, body.version)
        count = sum(1 for r in rows if _kept(flt, decode_row(r)))
        stored = await self._ctx.store.save_slice(SliceRecord(
            dataset_id, body.name, 0, body.version, msgspec.json.encode(flt.to_dict()).decode(), count,
            self._ctx.clock(), principal.subject))
        return slice_view(stored)

    async def slices(self, principal: Principal, dataset_id: str) -> list[dict[str, Any]]:
        await self._dataset(principal, dataset_id, "read")
        return [slice_view(s) for s in await self._ctx.store.list_slices(dataset_id)]

    async def seed(self, principal: Principal, body: SeedIn, exchanges: AsyncIterable[Exchange] | None = None,
                   *, limit: int = 100_000) -> dict[str, Any]:
        """A dataset from the team's retained traffic (``exchanges``, default: the context's
        source); refused while the team's retention is off, before anything is read."""
        require_write(principal, body.team, "datasets")
        if not await self._ctx.prompt_retention(body.team):
            reason = retention_features(False)["dataset_seeding"].reason
            raise SeedingUnavailable(f"seeding from traffic is unavailable for team {body.team!r}: {reason}",
                                     field="team")
        if exchanges is None:
            if self._ctx.retained is None:
                raise NotBuilt("seeding from traffic needs retained-traffic storage, which this service does not "
                               "have yet; import a JSONL or CSV file instead")
            exchanges = self._ctx.retained(body.team)
        items, skipped = await seed_items(exchanges, limit=limit)
        if not items:
            raise InvalidDataset(f"team {body.team!r} has no retained exchange a dataset item can be made of",
                                 field="team")
        answer = await self._new(principal, body.team, body.name, "seed", items)
        answer["skipped"] = skipped
        return answer


def _kept(flt: SliceFilter, item: Item) -> bool:
    return keeps(flt, item.tags, item.metadata)


def slice_rows(rows: Sequence[ItemRow], filter_json: str) -> list[ItemRow]:
    """The rows of a version a saved slice keeps."""
    raw = msgspec.json.decode(filter_json)
    flt = SliceFilter(tuple(raw["tags_all"]), tuple(raw["tags_any"]), raw["metadata"])
    return [r for r in rows if _kept(flt, decode_row(r))]


__all__ = ["DatasetService", "EditIn", "SeedIn", "SliceIn", "build_items", "decode", "slice_rows"]
