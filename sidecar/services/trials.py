"""The trial service: create, show, list, stop, the live view and spend totals, each on
behalf of a :class:`~policies.roles.Principal`.

Isolation is decided here and nowhere else (:mod:`sidecar.services.access`): a
trial of a team the principal does not see answers ``404 not_found`` with the
message a missing trial gets; a reader's stop answers ``403 forbidden``; listings
and sums are filtered by team in the store's own query, so another team's rows
never reach this process's memory on a principal's behalf. A trial records its
starter (``started_by``, the principal's subject).

Fleet-wide figures (:meth:`TrialService.fleet_spend`, the process's counts) carry
no team dimension; they are for ``/metrics`` and the live view's process figures.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from policies.posture import needs_pause
from policies.roles import Principal
from sidecar.services.views import TrialRead, list_item, live_item, read_trial, spend_totals_view, trial_view
from sidecar.errors import BadRequest, Conflict, NotFound
from sidecar.services.context import TrialsContext
from sidecar.services.access import require, require_create, visible
from sidecar.services.posture import current_posture
from sidecar.engine.posture_report import pause_reason
from sidecar.services.replay import as_replay, is_replay
from sidecar.store.records import TrialRecord
from sidecar.trials.spec import pause_effects, spec_effects
from sidecar.trials.create import TrialCreate, build_trial
from sidecar.trials.fold import ALPHA, decides_by_betting


def _missing(trial_id: str) -> str:
    """The one message for a trial that is missing *or* not the caller's to see."""
    return f"no trial {trial_id!r}"


def _no_sink(team: str, site: str) -> str:
    return (f"team {team!r}'s posture puts its trials at execution site {site!r}, and this sidecar has no sink "
            f"for it (GET /v1/teams/{team}/posture shows why)")


#: Statuses a trial pauses in, until a writer resumes it.
PAUSED: tuple[str, ...] = ("starter_unauthorized", "posture_changed")


class TrialService:
    """Trials as a principal may see and change them, through its
    :class:`~sidecar.services.context.TrialsContext` (the store, the tap's routes, the sinks' sites).

    Every method raises :class:`~sidecar.errors.ApiError` subclasses only for refusals
    (not found, forbidden, conflict, bad input); store failures propagate unchanged to
    the admin API's guard, which answers ``503 store_unavailable``."""

    def __init__(self, ctx: TrialsContext) -> None:
        self._ctx = ctx

    # -- reads -------------------------------------------------------------------

    async def _read(self, principal: Principal, trial_id: str) -> TrialRead:
        read = await read_trial(self._ctx.views, trial_id)
        if read is None or read.record.kind != "trial":  # a watch's day row is the watch's (/v1/watches)
            raise NotFound(_missing(trial_id))
        require(principal, read.record.team, "read", not_found=_missing(trial_id), forbidden=_missing(trial_id))
        return read

    async def get(self, principal: Principal, trial_id: str) -> dict[str, Any]:
        """The whole view of a trial the principal sees (its statistics folded and kept)."""
        return await trial_view(self._ctx.views, await self._read(principal, trial_id))

    async def decision_path(self, principal: Principal, trial_id: str) -> list[tuple[int, float, float]]:
        """The trial's decision bounds after each judged case, in the order the cases were
        claimed (:func:`policies.verdict.bounds_path`): content-free, for the decision chart."""
        from policies.stream import bounds_path as stream_bounds_path  # numpy: on first use
        from policies.verdict import bounds_path

        record = (await self._read(principal, trial_id)).record
        if decides_by_betting(record):  # the stream in scoring order, as the trial folded it (issue 31)
            stream = await self._ctx.store.scores_after(trial_id, 0)
            return stream_bounds_path(stream, alpha=ALPHA, tolerance=record.delta, min_cases=record.min_cases,
                                      expected_cases=record.expected_cases)
        scores = [float(score) for c in await self._ctx.store.cases(trial_id)
                  if c.get("outcome") == "judged" and isinstance(score := c.get("score"), (int, float))]
        return bounds_path(scores, expected_cases=record.expected_cases)

    async def list(
        self, principal: Principal, *, status: str | None = None, team: str | None = None
    ) -> list[dict[str, Any]]:
        """The principal's trials, newest first, optionally of one status and one team."""
        teams = visible(principal, team)
        if teams is not None and not teams:
            return []
        records = await self._ctx.store.list_trials(teams=teams, status=status, kind="trial")
        return [await list_item(self._ctx.views, r) for r in records]

    async def spend(self, principal: Principal) -> dict[str, Any]:
        """Evaluation spend summed over the principal's teams' trials."""
        teams = visible(principal)
        if teams is not None and not teams:
            return spend_totals_view({"spent": 0, "known": 0, "reserved": 0, "unknown_calls": 0})
        return spend_totals_view(await self._ctx.store.total_spend(teams=teams))

    async def fleet_spend(self) -> dict[str, int]:
        """Evaluation spend over every trial, as plain sums with no team dimension (``/metrics``)."""
        return await self._ctx.store.total_spend()

    async def live(self, principal: Principal) -> dict[str, Any]:
        """``/v1/live``: the principal's running trials and spend, beside this process's
        intake figures and counters (fleet-wide, and free of team names)."""
        ctx = self._ctx
        teams = visible(principal)
        running = [] if teams is not None and not teams else await ctx.store.list_trials(teams=teams, status="running", kind="trial")
        return {
            "alerts": [],
            "running_trials": [await live_item(ctx.views, r) for r in running],
            "watches": [],
            "evaluation_spend": await self.spend(principal),
            "intake": ctx.live.intake(),
            "counters": ctx.live.counts(),
        }

    # -- writes ------------------------------------------------------------------

    async def create(
        self, principal: Principal, body: TrialCreate, raw: bytes, idempotency_key: str | None
    ) -> tuple[dict[str, Any], bool]:
        """Create (or, for a repeated Idempotency-Key, return) a trial; (its view, created).

        The principal must write ``body.team`` (else 403 naming ``$.team``), checked before
        anything of the body is resolved. ``raw`` is what the key's fingerprint is taken
        over; the admin API passes the canonical encoding of ``body``. A repeat returns the
        first trial with its first starter."""
        require_create(principal, body.team)
        ctx = self._ctx
        posture = await current_posture(ctx.posture, body.team)
        record = dataclasses.replace(
            build_trial(
                body,
                resolve=ctx.resolve,
                defaults=ctx.defaults,
                prompt_retention=posture.prompt_retention,
                execution_site=posture.site,
                now=ctx.clock(),
            ),
            started_by=principal.subject,
        )
        if is_replay(body):
            record = await as_replay(ctx, body, record, posture)
        if record.execution_site not in ctx.sites:
            raise BadRequest(_no_sink(body.team, record.execution_site), field="$.team")
        body_hash = hashlib.sha256(raw).hexdigest() if idempotency_key else None
        stored = await ctx.store.create_trial(
            record, idempotency_key=idempotency_key, body_hash=body_hash,
            effects=spec_effects(record, status="running", reason=None, at=record.created_at),
        )
        created = stored.id == record.id
        if created:
            ctx.routing.add(stored)  # the tap matches it at once; peers see it on their next refresh
            ctx.replays.feed(stored)  # a replay reads the retention window instead (no route)
            await self._recheck_posture(stored)
        # The key's fingerprint covers the team, so a repeat is the same team's trial; checked all the same.
        return await self.get(principal, stored.id), created

    async def stop(self, principal: Principal, trial_id: str) -> dict[str, Any]:
        """Stop a running trial of a team the principal writes; its view after."""
        record = await self._record(principal, trial_id)
        require(
            principal, record.team, "write", not_found=_missing(trial_id),
            forbidden=f"your roles may read trial {trial_id!r} but not stop it",
        )
        ctx = self._ctx
        now = ctx.clock()
        updated, changed = await ctx.store.set_trial_status(
            trial_id, "stopped", "stopped by operator", ended=True, now=now,
            effects=spec_effects(record, status="stopped", reason="stopped by operator", at=now),
        )
        if updated is None:
            raise NotFound(_missing(trial_id))
        if not changed:  # the update is conditional, so of two concurrent stops exactly one wins
            raise Conflict(f"trial {trial_id} is already {'adopted' if updated.status == 'adopted' else 'stopped'}",
                           code="trial_not_running")
        ctx.routing.remove(trial_id)
        return await self.get(principal, trial_id)

    async def resume(self, principal: Principal, trial_id: str) -> dict[str, Any]:
        """Run a paused trial again (``starter_unauthorized``, ``posture_changed``); the resumer
        becomes its starter, whose rights are checked before each dispatch from then on. The
        team's site and retention are evaluated again and pinned with the resume; a site this
        sidecar has no sink for is ``409 site_unavailable`` (the trial stays paused)."""
        record = await self._record(principal, trial_id)
        require(
            principal, record.team, "write", not_found=_missing(trial_id),
            forbidden=f"your roles may read trial {trial_id!r} but not resume it",
        )
        ctx = self._ctx
        if record.status not in PAUSED:
            raise Conflict(f"trial {trial_id} is {record.status}, not paused", code="trial_not_paused")
        # The site is evaluated again and pinned anew with the resume (a posture change paused it,
        # or the posture may have changed while it was paused for another reason).
        posture = await current_posture(ctx.posture, record.team)
        if posture.site not in ctx.sites:
            raise Conflict(_no_sink(record.team, posture.site) + "; the trial stays paused", code="site_unavailable")
        if record.source == "replay" and not (posture.prompt_retention and posture.site == "local"):
            raise Conflict(f"trial {trial_id} replays team {record.team!r}'s retention window, which its posture "
                           "no longer keeps here (prompt retention off, or control-plane execution); the trial "
                           "stays paused", code="site_unavailable" if posture.prompt_retention else "retention_off")
        now = ctx.clock()
        updated, changed = await ctx.store.resume_trial(
            trial_id, paused=PAUSED, started_by=principal.subject,
            execution_site=posture.site, prompt_retention=posture.prompt_retention, now=now,
            effects=spec_effects(record, status="running", reason=None, at=now, site=posture.site,
                                 retention=posture.prompt_retention, started_by=principal.subject),
        )
        if updated is None:
            raise NotFound(_missing(trial_id))
        if not changed:
            raise Conflict(f"trial {trial_id} is {updated.status}, not paused", code="trial_not_paused")
        ctx.routing.add(updated)
        ctx.replays.feed(updated)
        await self._recheck_posture(updated)
        return await self.get(principal, trial_id)

    async def _recheck_posture(self, record: TrialRecord) -> None:
        """A posture write that committed between this request's read of the posture and its
        pin did not pause ``record`` (it was not running yet): read the posture again, and if
        it moves the trial, pause the team's trials it moves (as the write would have)."""
        ctx = self._ctx
        now = await current_posture(ctx.posture, record.team)
        if needs_pause(pinned_site=record.execution_site, pinned_retention=record.prompt_retention,
                       site=now.site, prompt_retention=now.prompt_retention):
            reason = pause_reason(now.site, now.prompt_retention)
            paused = await ctx.store.pause_mismatched(
                record.team, site=now.site, prompt_retention=now.prompt_retention, reason=reason, now=now.now,
                effects=await pause_effects(ctx.store, record.team, reason=reason, at=now.now),
            )
            for trial_id in paused:
                ctx.routing.remove(trial_id)
        await self._tell_collector(record)

    async def _tell_collector(self, record: TrialRecord) -> None:
        """A pause that committed between another writer's listing of the team's trials and its
        update paused ``record`` without its ``trial_spec`` (the writer did not know the trial yet):
        if ``record`` is paused now, write the spec (the first copy of an id wins)."""
        ctx = self._ctx
        fresh = await ctx.store.get_trial(record.id)
        if fresh is None or fresh.status == "running":
            return
        at = ctx.clock()
        effects = spec_effects(fresh, status=fresh.status, reason=fresh.status_reason, at=at)
        if effects:
            await ctx.store.enqueue_outbox(effects, now=at)

    async def _record(self, principal: Principal, trial_id: str) -> TrialRecord:
        record = await self._ctx.store.get_trial(trial_id)
        if record is None or record.kind != "trial":
            raise NotFound(_missing(trial_id))
        require(principal, record.team, "read", not_found=_missing(trial_id), forbidden=_missing(trial_id))
        return record
