"""The posture service: a team's posture as a principal may read and set it
(``GET``/``PUT /v1/teams/{team}/posture``), and the posture a new or resumed trial is
pinned to (docs/posture.md).

Rights. Reading needs a role on the team (any reader or writer role of
:mod:`policies.roles`); a team the principal does not see is ``404 not_found`` with
the message an unknown team gets. Setting needs ``tenant_admin`` on the team or
``platform_admin`` (:func:`policies.posture.may_set_posture`); another role on the team
is ``403 forbidden``.

Effective posture. The store's row when there is one; otherwise the ``[teams.NAME]``
config (retention; never cut over), which the runtime also stores at start
(:meth:`PostureService.seed`). Gateways count while their last report is younger than
``[uplink] stale_seconds``.

Writes. ``PUT`` replaces retention and cut-over; with ``If-Match: "<revision>"`` it
applies only over that revision (``412 revision_mismatch`` otherwise; ``"0"``: only if
none is stored). The same values again are a no-op keeping the revision (idempotent).
In the store's same transaction, every running trial of the team pinned to another
site or retention is paused ``posture_changed``; the answer lists them.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Sequence

import msgspec

from policies.posture import live_uplink, may_set_posture, posture_site, retention_features
from policies.roles import Principal
from policies.site import Site
from sidecar.errors import ApiError, BadRequest, Forbidden
from sidecar.ingest.wire import split_path
from sidecar.services.context import PostureContext
from sidecar.services.access import require
from sidecar.engine.posture_report import pause_reason, reports_of
from sidecar.store.records import GatewayReport
from sidecar.trials.spec import pause_effects
from sidecar.trials.create import MAX_NAME_CHARS, NAME_PATTERN, NAME_RULE

log = logging.getLogger("shadowtrial.posture")

IF_MATCH = "If-Match"
_REVISION = re.compile(r'^(?:W/)?"?([0-9]{1,18})"?$')


class PreconditionFailed(ApiError):
    status = 412
    code = "revision_mismatch"


class PostureIn(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The body of ``PUT /v1/teams/{team}/posture``: the whole settable posture. Content
    uplink is not here: each gateway's sidecar reports its own (``[uplink] content``)."""

    prompt_retention: bool
    cut_over: bool


_decoder = msgspec.json.Decoder(PostureIn)


def decode_posture(body: bytes) -> PostureIn:
    """Decode a posture body; :class:`BadRequest` names the first bad field's JSON path."""
    try:
        return _decoder.decode(body)
    except msgspec.ValidationError as exc:
        message, path = split_path(str(exc))
        raise BadRequest(message, field=path) from exc
    except msgspec.DecodeError as exc:
        raise BadRequest(f"body is not JSON: {exc}") from exc


def check_team(team: str) -> str:
    """The path's team name, or :class:`BadRequest` naming ``team``."""
    if not (1 <= len(team) <= MAX_NAME_CHARS and re.search(NAME_PATTERN, team)):
        raise BadRequest(f"team must be {NAME_RULE}", field="team")
    return team


def check_if_match(values: Sequence[str]) -> int | None:
    """The revision an ``If-Match`` header asks for (``"3"``, ``3`` or ``W/"3"``), or None
    without one; :class:`BadRequest` naming the header otherwise."""
    if not values:
        return None
    if len(values) > 1:
        raise BadRequest(f"send one {IF_MATCH} header, not {len(values)}", field=IF_MATCH)
    match = _REVISION.match(values[0].strip())
    if match is None:
        raise BadRequest(f'{IF_MATCH} must be a posture revision such as "3" (the ETag of a GET)', field=IF_MATCH)
    return int(match.group(1))


@dataclass(frozen=True, slots=True)
class Current:
    """A team's effective posture now, and the site it puts a new trial at."""

    team: str
    prompt_retention: bool
    cut_over: bool
    revision: int
    stored: bool
    updated_at: float | None
    updated_by: str | None
    reports: tuple[GatewayReport, ...]
    site: Site
    now: float


async def current_posture(ctx: PostureContext, team: str) -> Current:
    """The team's effective posture (stored, else seeded from config) and its site now."""
    stored = await ctx.store.get_posture(team)
    reports = tuple(await ctx.store.gateway_reports(team))
    now = ctx.clock()
    if stored is None:
        retention, cut_over = ctx.default_retention(team), False
    else:
        retention, cut_over = stored.prompt_retention, stored.cut_over
    site = posture_site(
        reports_of(reports), prompt_retention=retention, cut_over=cut_over, now=now,
        stale_after_s=ctx.stale_after_s,
    )
    return Current(
        team=team, prompt_retention=retention, cut_over=cut_over,
        revision=0 if stored is None else stored.revision, stored=stored is not None,
        updated_at=None if stored is None else stored.updated_at, updated_by=None if stored is None else stored.updated_by,
        reports=reports, site=site, now=now,
    )


#: Why replay is unavailable whatever the team's posture: this sidecar keeps no exchange to replay.
NO_WINDOW = ("this sidecar keeps no exchanges to replay: its retention window is off "
             "([retention] enabled with a key in retention.key_env)")


def view(current: Current, stale_after_s: float, window: bool = True) -> dict[str, Any]:
    """The JSON answer of the posture routes; ``window``: whether this sidecar runs a retention
    window (a retention key), without which replay is unavailable for every team (issue 28)."""
    live = live_uplink(reports_of(current.reports), now=current.now, stale_after_s=stale_after_s)
    return {
        "team": current.team,
        "prompt_retention": current.prompt_retention,
        "cut_over": current.cut_over,
        "revision": current.revision,
        "stored": current.stored,
        "updated_at": current.updated_at,
        "updated_by": current.updated_by,
        "gateways": [
            {"gateway": r.gateway, "content_uplink": r.content_uplink, "last_seen": r.last_seen,
             "live": r.gateway in live}
            for r in current.reports
        ],
        "stale_after_seconds": stale_after_s,
        "execution_site": current.site,
        "features": {
            name: ({"available": False, "reason": NO_WINDOW} if name == "replay" and not window and a.available
                   else {"available": a.available, "reason": a.reason})
            for name, a in retention_features(current.prompt_retention).items()
        },
    }


def _missing(team: str) -> str:
    return f"no team {team!r}"


class PostureService:
    """Teams' posture as a principal may see and change it, through its
    :class:`~sidecar.services.context.PostureContext`.

    Raises :class:`~sidecar.errors.ApiError` subclasses for refusals only; store failures
    propagate to the admin API's guard (``503 store_unavailable``)."""

    def __init__(self, ctx: PostureContext) -> None:
        self._ctx = ctx

    async def get(self, principal: Principal, team: str) -> dict[str, Any]:
        require(principal, team, "read", not_found=_missing(team), forbidden=_missing(team))
        return view(await current_posture(self._ctx, team), self._ctx.stale_after_s, self._ctx.retention is not None)

    async def put(
        self, principal: Principal, team: str, body: PostureIn, expected_revision: int | None
    ) -> dict[str, Any]:
        """Set the team's posture; pause what it moves (see the module's docs). The answer is
        the posture's view with ``paused_trials``."""
        require(principal, team, "read", not_found=_missing(team), forbidden=_missing(team))
        if not may_set_posture(principal, team):
            raise Forbidden(f"setting team {team!r}'s posture needs tenant_admin on the team or platform_admin")
        ctx = self._ctx
        now = ctx.clock()
        reports = await ctx.store.gateway_reports(team)
        site = posture_site(
            reports_of(reports), prompt_retention=body.prompt_retention, cut_over=body.cut_over, now=now,
            stale_after_s=ctx.stale_after_s,
        )
        reason = pause_reason(site, body.prompt_retention)
        written = await ctx.store.put_posture(
            team, prompt_retention=body.prompt_retention, cut_over=body.cut_over,
            expected_revision=expected_revision, site=site, now=now, by=principal.subject, reason=reason,
            effects=await pause_effects(ctx.store, team, reason=reason, at=now),
        )
        if not written.applied:
            have = 0 if written.posture is None else written.posture.revision
            raise PreconditionFailed(
                f"team {team!r}'s posture is at revision {have}, not {expected_revision}; read it again", field=IF_MATCH
            )
        for trial_id in written.paused:
            ctx.routing.remove(trial_id)
        if ctx.retention is not None:
            ctx.retention.note_posture(team, body.prompt_retention)
        if not body.prompt_retention:  # nothing of the team stays in the retention window (DESIGN.md rule 8)
            await ctx.store.forget_retained(team)
        if written.paused:
            log.warning("team posture change paused %d trial(s) posture_changed", len(written.paused))
        answer = view(await current_posture(ctx, team), ctx.stale_after_s, ctx.retention is not None)
        answer["paused_trials"] = list(written.paused)
        return answer

    async def seed(self) -> None:
        """Store each ``[teams.NAME]`` posture the store has none of (at start)."""
        ctx = self._ctx
        for team, cfg in sorted(ctx.teams.items()):
            await ctx.store.seed_posture(team, prompt_retention=cfg.prompt_retention, cut_over=False, now=ctx.clock())
