"""Dataset items: decoding an import (JSONL or CSV), item ids and revision ids.

**An item** is ``input`` (a string — one user message — or a list of chat messages
``{role, content}`` in the OpenAI shape), an optional ``expected`` output, ``tags`` and a
flat ``metadata`` object (string, number, boolean or null values). Unknown fields are
refused, to catch typos.

**JSONL**: one item object per line; blank lines are skipped. **CSV**: a header row, then
one item per row. Columns: ``input`` (text, one user message) *or* ``messages`` (a JSON
array of messages); optional ``id``, ``expected`` (an empty cell is no expected output),
``tags`` (separated by ``;``), ``metadata`` (a JSON object) and ``metadata.KEY`` columns
(one key each; an empty cell leaves the key out). Any other column is refused.

Errors are :class:`InvalidDataset` (``400 invalid_dataset``) naming the line and the field:
``line 12: $.input[0].role`` for JSONL, ``line 12: expected`` (the column) for CSV. The
line is the file's physical line where the item starts (the header is line 1).

**Ids.** An item keeps the ``id`` it is given; without one its id is derived from its
input (``h`` + 24 hex of a sha256), the second and later items of the same input getting
``~2``, ``~3``… in file order — so re-importing the same file gives the same ids, and an
edited expected output keeps its item's id. A given id twice in one import is refused.

**Revisions.** An item's revision id is a content hash over its id and all its content
(input, expected, tags as a set, metadata): identical content is the same revision in any
import, and any change is a new one, so revised content never pairs with its old self.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Iterable, Literal, Mapping, Sequence

import msgspec

from policies.graders import canonical, content_hash
from sidecar.collector.corpus.errors import InvalidDataset
from sidecar.collector.corpus.formats import FORMATS as FORMATS  # re-exported: callers name it from here
from sidecar.ingest.wire import split_path
from sidecar.ingest.wording import PATTERN_WORDS
from sidecar.collector.store.corpus_records import ItemRow
from sidecar.trials.create import NAME_PATTERN, NAME_RULE

MAX_ITEMS = 100_000
MAX_ID_CHARS = 256
MAX_TAG_CHARS = 128
TAG_SEPARATOR = ";"

Role = Literal["system", "user", "assistant", "tool", "developer"]
ItemId = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS, pattern=NAME_PATTERN)]
Tag = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_TAG_CHARS)]
Scalar = str | int | float | bool | None


class Message(msgspec.Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    role: Role
    content: str
    name: str | None = None


class ItemIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One item as imported (a JSONL line, a CSV row, an edit's upsert)."""

    input: Annotated[str, msgspec.Meta(min_length=1)] | Annotated[list[Message], msgspec.Meta(min_length=1)]
    id: ItemId | None = None
    expected: str | None = None
    tags: list[Tag] = []
    metadata: dict[str, Scalar] = {}


@dataclass(frozen=True, slots=True)
class Item:
    id: str
    revision_id: str
    messages: tuple[Mapping[str, Any], ...]
    expected: str | None
    tags: tuple[str, ...]
    metadata: Mapping[str, Any]

    def content(self) -> dict[str, Any]:
        return {"input": list(self.messages), "expected": self.expected, "tags": list(self.tags),
                "metadata": dict(self.metadata)}

    def row(self) -> ItemRow:
        return ItemRow(self.id, self.revision_id, canonical(self.content()))

    def view(self) -> dict[str, Any]:
        return {"id": self.id, "revision_id": self.revision_id, **self.content()}


_item_decoder = msgspec.json.Decoder(ItemIn)
_messages_decoder = msgspec.json.Decoder(list[Message])


def _messages(item: ItemIn) -> tuple[dict[str, Any], ...]:
    if isinstance(item.input, str):
        return ({"role": "user", "content": item.input},)
    return tuple(msgspec.to_builtins(m) for m in item.input)


def input_id(messages: Sequence[Mapping[str, Any]]) -> str:
    return "h" + content_hash({"input": list(messages)}, chars=24)


def revision_id(item_id: str, content: Mapping[str, Any]) -> str:
    return content_hash({"scheme": "item-revision-v1", "id": item_id, **content})


def make_item(item_id: str, entry: ItemIn) -> Item:
    messages = _messages(entry)
    tags = tuple(sorted(set(entry.tags)))
    metadata = dict(sorted(entry.metadata.items()))
    content = {"input": list(messages), "expected": entry.expected, "tags": list(tags), "metadata": metadata}
    return Item(item_id, revision_id(item_id, content), messages, entry.expected, tags, metadata)


def _at_line(n: int, name: str) -> str:
    return f"line {n}: {name}"


def build_items(entries: Iterable[tuple[int, ItemIn]],
                where: Callable[[int, str], str] = _at_line) -> list[Item]:
    """Items with their ids and revisions, in order. ``entries`` are (position, item);
    ``where(position, name)`` names a field in an error (``line 3: id``, ``$.upsert[2].id``)."""
    out: list[Item] = []
    given: dict[str, int] = {}
    derived: dict[str, int] = {}
    pending: list[tuple[int, ItemIn]] = list(entries)
    for pos, entry in pending:
        if entry.id is not None:
            if entry.id in given:
                first = where(given[entry.id], "id")
                raise InvalidDataset(f"{where(pos, 'id')}: {entry.id!r} is already the id at {first}",
                                     field=where(pos, "id"))
            given[entry.id] = pos
    for pos, entry in pending:
        if entry.id is not None:
            item_id = entry.id
        else:
            base = input_id(_messages(entry))
            derived[base] = derived.get(base, 0) + 1
            item_id = base if derived[base] == 1 else f"{base}~{derived[base]}"
            if item_id in given:
                raise InvalidDataset(
                    f"{where(pos, 'id')}: this item's derived id {item_id!r} is the id given at "
                    f"{where(given[item_id], 'id')}; give this item an id", field=where(pos, "id"))
        out.append(make_item(item_id, entry))
    return out


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = body[: exc.start].count(b"\n") + 1
        raise InvalidDataset(f"line {line}: the file is not UTF-8", field=f"line {line}") from exc


def _check_count(n: int) -> None:
    if n > MAX_ITEMS:
        raise InvalidDataset(f"an import holds at most {MAX_ITEMS:,} items")


def parse_jsonl(body: bytes) -> list[tuple[int, ItemIn]]:
    out: list[tuple[int, ItemIn]] = []
    for lineno, line in enumerate(_text(body).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            out.append((lineno, _item_decoder.decode(line)))
        except msgspec.ValidationError as exc:
            message, path = split_path(str(exc))
            raise InvalidDataset(f"line {lineno}: {_readable(message)}", field=f"line {lineno}: {path or '$'}") from exc
        except msgspec.DecodeError as exc:
            raise InvalidDataset(f"line {lineno}: not a JSON object: {exc}", field=f"line {lineno}: $") from exc
        _check_count(len(out))
    return out


_CSV_COLUMNS = ("id", "input", "messages", "expected", "tags", "metadata")


def parse_csv(body: bytes) -> list[tuple[int, ItemIn]]:
    reader = csv.reader(io.StringIO(_text(body), newline=""), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise InvalidDataset("the CSV file is empty: it needs a header row", field="line 1") from None
    except csv.Error as exc:
        raise InvalidDataset(f"line 1: {exc}", field="line 1") from exc
    for column in header:
        if column not in _CSV_COLUMNS and not (column.startswith("metadata.") and len(column) > 9):
            raise InvalidDataset(
                f"line 1: unknown column {column!r}; columns are {', '.join(_CSV_COLUMNS)} and metadata.KEY",
                field=f"line 1: {column}")
    if len(set(header)) != len(header):
        raise InvalidDataset("line 1: a column is named twice", field="line 1")
    if ("input" in header) == ("messages" in header):
        raise InvalidDataset("line 1: give an input column (text) or a messages column (JSON), one of them",
                             field="line 1: input")
    out: list[tuple[int, ItemIn]] = []
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise InvalidDataset(f"line {start}: {exc}", field=f"line {start}") from exc
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InvalidDataset(f"line {start}: {len(row)} cells, the header has {len(header)}",
                                 field=f"line {start}")
        out.append((start, _csv_item(start, dict(zip(header, row)))))
        _check_count(len(out))
    return out


def _csv_item(line: int, cells: dict[str, str]) -> ItemIn:
    raw: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    for column, cell in cells.items():
        if column == "messages":
            try:
                raw["input"] = msgspec.to_builtins(_messages_decoder.decode(cell))
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                message, path = split_path(str(exc))
                where = f" at {path}" if path else ""
                raise InvalidDataset(f"line {line}: messages is not a JSON array of messages: {message}{where}",
                                     field=f"line {line}: messages") from exc
        elif column == "input":
            raw["input"] = cell
        elif column == "id":
            if cell:
                raw["id"] = cell
        elif column == "expected":
            if cell:
                raw["expected"] = cell
        elif column == "tags":
            raw["tags"] = [t.strip() for t in cell.split(TAG_SEPARATOR) if t.strip()]
        elif column == "metadata":
            if cell.strip():
                try:
                    value = json.loads(cell)
                except ValueError as exc:
                    raise InvalidDataset(f"line {line}: metadata is not JSON: {exc}",
                                         field=f"line {line}: metadata") from exc
                if not isinstance(value, dict):
                    raise InvalidDataset(f"line {line}: metadata must be a JSON object",
                                         field=f"line {line}: metadata")
                metadata.update(value)
        elif cell != "":
            metadata[column.removeprefix("metadata.")] = cell
    raw["metadata"] = metadata
    try:
        return msgspec.convert(raw, ItemIn)
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        column = _column_of(path, cells)
        raise InvalidDataset(f"line {line}: {column}: {_readable(message)}", field=f"line {line}: {column}") from exc


_REGEX_MESSAGE = re.compile(rf"{PATTERN_WORDS} '.*'")


def _readable(message: str) -> str:
    """msgspec's message with the id pattern (for machines) replaced by its rule (for people)."""
    return _REGEX_MESSAGE.sub(f"must be {NAME_RULE}", message)


def _column_of(path: str | None, cells: Mapping[str, str]) -> str:
    if not path or not path.startswith("$."):
        return "$"
    name = path[2:].split(".", 1)[0].split("[", 1)[0]
    if name == "input" and "messages" in cells:
        return "messages"
    return name


def parse(body: bytes, fmt: str) -> list[Item]:
    """The items of an import in ``fmt`` (``jsonl`` or ``csv``); :class:`InvalidDataset`."""
    if fmt not in FORMATS:
        raise InvalidDataset(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}", field="format")
    entries = parse_jsonl(body) if fmt == "jsonl" else parse_csv(body)
    if not entries:
        raise InvalidDataset("the import holds no items", field="line 1")
    return build_items(entries)


def decode_row(row: ItemRow) -> Item:
    """An item as stored."""
    content = json.loads(row.content)
    return Item(row.item_id, row.revision_id, tuple(content["input"]), content["expected"], tuple(content["tags"]),
                content["metadata"])


def version_digest(items: Sequence[ItemRow]) -> str:
    """A version's content identity: a hash of its ordered (item, revision) pairs."""
    return content_hash([[i.item_id, i.revision_id] for i in items])
