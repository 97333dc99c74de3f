"""Slices: saved filters over a dataset version (issue 13, item 1). Pure.

A filter keeps an item when it has *every* tag of ``tags_all``, *at least one* of
``tags_any`` (when given), and for each ``metadata`` key exactly that value (``None``
matches an item whose metadata lacks the key or holds null). An empty filter keeps every
item. Tags and values compare exactly (case matters), as the stored content has them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence


@dataclass(frozen=True, slots=True)
class SliceFilter:
    tags_all: tuple[str, ...] = ()
    tags_any: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"tags_all": sorted(set(self.tags_all)), "tags_any": sorted(set(self.tags_any)),
                "metadata": dict(sorted(self.metadata.items()))}


def keeps(f: SliceFilter, tags: Sequence[str], metadata: Mapping[str, Any]) -> bool:
    """Whether the filter keeps an item with ``tags`` and ``metadata``."""
    have = set(tags)
    if not have.issuperset(f.tags_all):
        return False
    if f.tags_any and have.isdisjoint(f.tags_any):
        return False
    return all(metadata.get(key) == value for key, value in f.metadata.items())
