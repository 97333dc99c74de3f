"""Reusable comparison templates with versions (issue 24, item 12) and archiving a group
(item 10).

A template is a saved group configuration (the body of ``POST /v1/comparisons`` without its
readiness token: the suite — a pinned dataset version or slice and exact metric versions —,
the arms, repetitions, primary metric, tolerance and cap), under a name in the suite's team.
Every save is a new immutable version; nothing is edited in place, and launching from a
version is an ordinary readiness check and start with that configuration::

    POST /v1/comparison-templates                {"name": "…", "config": {…}}            version 1
    POST /v1/comparison-templates/{id}/versions  {"expected_revision": 3, "config": {…}}  version 4
    GET  /v1/comparison-templates                ?team=
    GET  /v1/comparison-templates/{id}           the header and every version, newest first

Both saves need an ``Idempotency-Key``. A save names the revision it was made from; when the
template has moved since, it is ``409 template_revision_conflict`` (the message names the
current revision: refresh, then save again) and nothing is written. The same key with the same
body returns the version it committed (``200``; after a lost answer or a restart), even once
the template has moved on — never a conflict and never a duplicate; the same key with another
body is ``409 request_key_conflict``. A taken name is ``409 template_exists``. Saving needs
the team's write roles; reading, its read roles.

``POST /v1/comparisons/{id}/archive`` archives a group (write roles; again: the same answer).
It keeps everything readable; an archived group cannot be compared
(:mod:`sidecar.collector.corpus.evidence`).
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Annotated, Any

import msgspec

from policies.graders import canonical
from policies.roles import Principal
from sidecar.collector.corpus.comparisons import ComparisonIn
from sidecar.collector.corpus.context import CorpusContext
from sidecar.collector.corpus.datasets import Name, require_write
from sidecar.collector.corpus.suites import SuiteService
from sidecar.collector.store.template_records import RevisionConflict, TemplateExists, TemplateRecord, TemplateVersion
from sidecar.errors import BadRequest, Conflict, NotFound
from sidecar.services.access import visible


class TemplateIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A new template: its name and first configuration."""

    name: Name
    config: ComparisonIn


class TemplateVersionIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A template's next version: the revision it was made from and its configuration."""

    expected_revision: Annotated[int, msgspec.Meta(ge=1)]
    config: ComparisonIn


def _missing(template_id: str) -> str:
    return f"no comparison template {template_id!r}"


def _body_hash(*parts: Any) -> str:
    return hashlib.sha256(canonical(list(parts)).encode("utf-8")).hexdigest()


def version_view(v: TemplateVersion) -> dict[str, Any]:
    return {"version": v.version, "config": msgspec.json.decode(v.config), "created_at": v.created_at,
            "created_by": v.created_by}


def template_view(t: TemplateRecord, versions: list[TemplateVersion] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": t.id, "team": t.team, "name": t.name, "revision": t.revision,
                           "created_at": t.created_at, "created_by": t.created_by, "updated_at": t.updated_at}
    if versions is not None:
        out["versions"] = [version_view(v) for v in versions]
    return out


class TemplateService:
    def __init__(self, ctx: CorpusContext, suites: SuiteService) -> None:
        self._ctx = ctx
        self._suites = suites

    async def _config(self, principal: Principal, config: ComparisonIn) -> tuple[str, str]:
        """The configuration as stored (canonical JSON, no readiness token) and its suite's team."""
        if config.readiness_token is not None:
            raise BadRequest("a template keeps no readiness token: launching checks readiness anew",
                             field="$.config.readiness_token")
        suite = await self._suites.get_record(principal, config.suite_id, field="$.config.suite_id")
        require_write(principal, suite.team, "comparison templates")
        return canonical(msgspec.to_builtins(config)), suite.team

    async def _save(self, principal: Principal, header: TemplateRecord, config: str, expected: int | None,
                    key: str, body_hash: str) -> tuple[dict[str, Any], bool]:
        try:
            saved, version, created = await self._ctx.store.save_template(
                header, config, expected_revision=expected, request_key=key, body_hash=body_hash)
        except RevisionConflict as exc:
            raise Conflict(f"template {exc.template_id!r} is at revision {exc.current}, not {exc.expected}: refresh "
                           "its versions and save against the current revision", field="$.expected_revision",
                           code="template_revision_conflict") from exc
        except TemplateExists as exc:
            raise Conflict(str(exc), field="$.name", code="template_exists") from exc
        if not principal.sees(saved.team):
            raise NotFound(_missing(saved.id))
        return {**template_view(saved), "saved": version_view(version)}, created

    async def create(self, principal: Principal, body: TemplateIn, key: str) -> tuple[dict[str, Any], bool]:
        config, team = await self._config(principal, body.config)
        now = self._ctx.clock()
        header = TemplateRecord(f"ct_{uuid.uuid4().hex}", team, body.name, 1, now, principal.subject, now)
        return await self._save(principal, header, config, None, key, _body_hash("create", team, body.name, config))

    async def save_version(self, principal: Principal, template_id: str, body: TemplateVersionIn,
                           key: str) -> tuple[dict[str, Any], bool]:
        current = await self._record(principal, template_id)
        config, team = await self._config(principal, body.config)
        if team != current.team:
            raise BadRequest(f"the suite belongs to team {team!r}, the template to {current.team!r}",
                             field="$.config.suite_id")
        now = self._ctx.clock()
        header = TemplateRecord(current.id, current.team, current.name, current.revision, current.created_at,
                                principal.subject, now)
        return await self._save(principal, header, config, body.expected_revision, key,
                                _body_hash("version", current.id, body.expected_revision, config))

    async def _record(self, principal: Principal, template_id: str) -> TemplateRecord:
        found = await self._ctx.store.get_template(template_id)
        if found is None or not principal.sees(found.team):
            raise NotFound(_missing(template_id))
        return found

    async def get(self, principal: Principal, template_id: str) -> dict[str, Any]:
        found = await self._record(principal, template_id)
        return template_view(found, await self._ctx.store.template_versions(found.id))

    async def listing(self, principal: Principal, team: str | None) -> list[dict[str, Any]]:
        return [template_view(t) for t in await self._ctx.store.list_templates(teams=visible(principal, team))]

    async def archive(self, principal: Principal, comparison_id: str) -> dict[str, Any]:
        record = await self._ctx.store.get_comparison(comparison_id)
        if record is None or not principal.sees(record.team):
            raise NotFound(f"no comparison {comparison_id!r}")
        require_write(principal, record.team, "comparisons")
        at = await self._ctx.store.archive_comparison(comparison_id, now=self._ctx.clock(), by=principal.subject)
        if at is None:
            raise NotFound(f"no comparison {comparison_id!r}")
        return {"id": comparison_id, "archived_at": at}
