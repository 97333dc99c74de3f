"""Plain records of comparison templates and archived experiments (issue 24, item 12 and
item 10): the collector's migration 4 (:mod:`sidecar.collector.store.templates_schema`).

**Templates.** A template is a header (team, name, ``revision``) and its immutable versions
(1, 2, …), each a saved group configuration (JSON text). Saving a new version names the
revision it was made from (``expected_revision``); the header moves with one conditional
update, so a save against a stale revision writes nothing (:class:`RevisionConflict`). Each
save comes with a request key: the same key and body again returns the version it committed,
the same key with another body is ``IdempotencyConflict``.

**Archive.** An archived group keeps everything; it only stops being comparable.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.store.errors import StoreError


@dataclass(frozen=True, slots=True)
class TemplateRecord:
    id: str
    team: str
    name: str
    #: The latest version's number: what the next save must name as its expected revision.
    revision: int
    created_at: float
    created_by: str | None
    updated_at: float


@dataclass(frozen=True, slots=True)
class TemplateVersion:
    template_id: str
    version: int
    config: str
    created_at: float
    created_by: str | None


class RevisionConflict(StoreError):
    """A save named a revision that is not the template's current one: nothing was written."""

    def __init__(self, template_id: str, expected: int, current: int) -> None:
        super().__init__(f"template {template_id!r} is at revision {current}, not {expected}")
        self.template_id = template_id
        self.expected = expected
        self.current = current


class TemplateExists(StoreError):
    """A new template's name is taken in its team."""

    def __init__(self, team: str, name: str) -> None:
        super().__init__(f"team {team!r} already has a template named {name!r}")
