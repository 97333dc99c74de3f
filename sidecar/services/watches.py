"""Watches and alerts as a principal sees them; the Live and Results views.

Watches are born only by promotion (:mod:`sidecar.services.promotion`). Here: read and
stop them, read alerts and move them (``firing`` → ``acknowledged`` → ``resolved``, or
``firing`` → ``resolved``; resolving re-arms the watch's detector for a new period), and
assemble ``/v1/live`` (firing alerts first, then the tiles) and ``/v1/results``
(``traffic`` and ``corpus``, two lists never interleaved).
Isolation as for trials (:mod:`sidecar.services.access`): another team's watch or alert
is ``404`` with the message a missing one gets.
"""

from __future__ import annotations

import builtins
import datetime as _dt
import json
from typing import Any

from policies.promotion import observation, utc_day
from policies.roles import Principal
from sidecar.services.views import list_item, live_item, spend_totals_view
from sidecar.errors import BadRequest, Conflict, NotFound
from sidecar.services.context import WatchesContext
from sidecar.services.access import require, visible
from sidecar.store.watch_logic import alert_id as period_alert_id
from sidecar.store.watch_logic import alert_outbox
from sidecar.store.watch_records import AlertRow, WatchRecord

DAY_S = 86_400.0
#: Paused trial statuses (as :data:`sidecar.services.trials.PAUSED`): shown on Live as needing attention.
PAUSED_STATUSES = ("starter_unauthorized", "posture_changed")

#: ``GET /v1/results`` filters.
RESULT_PARAMS = ("team", "status", "model", "since", "until")


def _no_watch(watch_id: str) -> str:
    return f"no watch {watch_id!r}"


def _no_alert(alert_id: str) -> str:
    return f"no alert {alert_id!r}"


def alert_view(a: AlertRow) -> dict[str, Any]:
    return {
        "id": a.id, "watch_id": a.watch_id, "period": a.period, "team": a.team, "status": a.status,
        "raised_at": a.raised_at,
        "evidence": json.loads(a.evidence_json),
        "acknowledged_at": a.acknowledged_at, "acknowledged_by": a.acknowledged_by,
        "resolved_at": a.resolved_at, "resolved_by": a.resolved_by,
    }


class WatchService:
    def __init__(self, ctx: WatchesContext) -> None:
        self._ctx = ctx

    # -- watches -------------------------------------------------------------------

    async def view(self, w: WatchRecord) -> dict[str, Any]:
        """A watch: its detector period, that period's judged cases, old-model win rate,
        statistic and threshold and alert (None until it fires), today's spend against the
        daily cap."""
        from policies import cusum  # numpy: imported on the first read of a watch, not with the sidecar

        design = cusum.CusumDesign.from_dict(json.loads(w.design_json))
        day = await self._ctx.store.get_trial(w.current_trial_id)
        today = utc_day(self._ctx.clock())
        spent = reserved = 0
        if day is not None and w.current_day == today:
            spent, reserved = day.spent_micros, day.reserved_micros
        decisive = w.old_wins + w.new_wins
        alert = await self._ctx.store.get_alert(period_alert_id(w.id, w.period))
        promotion = await self._ctx.store.get_promotion(w.id)
        return {
            "id": w.id, "team": w.team, "status": w.status, "trial_id": w.trial_id,
            "old_model": w.old_model, "new_model": w.new_model, "route": w.route, "gateway": w.gateway,
            "sample_rate": w.sample_rate, "judge_version_id": w.judge_version_id,
            "current_day": w.current_day, "current_row": w.current_trial_id,
            "created_at": w.created_at, "created_by": w.created_by, "stopped_at": w.stopped_at,
            # Issue 23, item 5: resolving the period's alert starts the next period; the counts,
            # the detector and "alert" below are the current period's.
            "period": {"number": w.period, "started_at": w.period_start, "judged_before": w.judged_before},
            "judged": w.judged, "decisive": decisive, "old_wins": w.old_wins, "new_wins": w.new_wins, "ties": w.ties,
            "old_win_rate": None if decisive == 0 else w.old_wins / decisive,
            "detector": {
                "kind": "one-sided Bernoulli CUSUM on old-model wins (ties aside)",
                "baseline": design.baseline, "alternative": design.alternative,
                "statistic": w.statistic * design.unit, "threshold": design.threshold_llr,
                "statistic_units": w.statistic, "threshold_units": design.threshold,
                "min_judged": design.min_judged, "arl0_decisive": design.arl0,
                # Issue 23, item 4: an honest bound for this watch, not the design's target alone.
                "false_alarm_within_1000_decisive": cusum.displayed_false_alarm(design),
                "fired": w.fired_at is not None, "fired_at_judged": w.fired_at,
            },
            "spend_today": {
                "day": today, "cap_micros": w.daily_cap_micros, "charged_micros": spent, "reserved_micros": reserved,
                "remaining_micros": w.daily_cap_micros - spent - reserved, "basis": "list_price",
            },
            "alert": None if alert is None else {"id": alert.id, "status": alert.status},
            "promotion": None if promotion is None else {
                "id": promotion.id, "promoted_by": promotion.promoted_by, "promoted_at": promotion.promoted_at,
                "acknowledged_segments": json.loads(promotion.acknowledged_segments or "[]"),
                "evidence": json.loads(promotion.evidence_json),
            },
        }

    async def list(self, principal: Principal, *, status: str | None = None) -> list[dict[str, Any]]:
        teams = visible(principal)
        if teams is not None and not teams:
            return []
        return [await self.view(w) for w in await self._ctx.store.list_watches(teams=teams, status=status)]

    async def _watch(self, principal: Principal, watch_id: str) -> WatchRecord:
        w = await self._ctx.store.get_watch(watch_id)
        if w is None:
            raise NotFound(_no_watch(watch_id))
        require(principal, w.team, "read", not_found=_no_watch(watch_id), forbidden=_no_watch(watch_id))
        return w

    async def get(self, principal: Principal, watch_id: str) -> dict[str, Any]:
        return await self.view(await self._watch(principal, watch_id))

    async def detector_path(self, principal: Principal, watch_id: str) -> builtins.list[tuple[int, float]]:
        """The detector's statistic after each judged case of the sentinel, recomputed from the
        stored case scores of its day rows in the order the cases were claimed
        (:func:`policies.cusum.statistic_path`), from the start of the current period (the
        judged cases of earlier periods skipped): content-free, for the watch's chart."""
        from policies import cusum

        w = await self._watch(principal, watch_id)
        design = cusum.CusumDesign.from_dict(json.loads(w.design_json))
        rows = sorted((r for r in await self._ctx.store.list_trials(teams=[w.team], kind="watch") if r.watch_id == w.id),
                      key=lambda r: (r.created_at, r.id))
        observations: builtins.list[cusum.Observation] = []
        for row in rows:
            observations += [observation(float(score)) for c in await self._ctx.store.cases(row.id)
                             if c.get("outcome") == "judged" and isinstance(score := c.get("score"), (int, float))]
        return cusum.statistic_path(design, observations[w.judged_before:])

    async def stop(self, principal: Principal, watch_id: str) -> dict[str, Any]:
        w = await self._watch(principal, watch_id)
        require(principal, w.team, "write", not_found=_no_watch(watch_id),
                forbidden=f"your roles may read watch {watch_id!r} but not stop it")
        updated, changed = await self._ctx.store.stop_watch(watch_id, now=self._ctx.clock())
        if updated is None:
            raise NotFound(_no_watch(watch_id))
        if not changed:
            raise Conflict(f"watch {watch_id} is already stopped", code="watch_not_active")
        self._ctx.routing.remove(w.current_trial_id)
        return await self.view(updated)

    # -- alerts --------------------------------------------------------------------

    async def alerts(self, principal: Principal, *, status: str | None = None) -> builtins.list[dict[str, Any]]:
        teams = visible(principal)
        if teams is not None and not teams:
            return []
        return [alert_view(a) for a in await self._ctx.store.list_alerts(teams=teams, status=status)]

    async def next_design(self, watch_id: str) -> str | None:
        """The design of a watch's next period: the detector designed afresh for the upper
        bound of the promotion trial's share of old-model wins, by today's rule
        (:func:`policies.cusum.baseline_from_promotion`), so a watch made under an older rule
        gets an honest baseline at its next period. The baseline stays anchored to the
        promotion's evidence, never to the period that fired: a drift that goes on after the
        resolve is seen again. None (the watch keeps its design) without those counts."""
        w = await self._ctx.store.get_watch(watch_id)
        promotion = await self._ctx.store.get_promotion(watch_id)
        if w is None or promotion is None:
            return None
        wins = json.loads(promotion.evidence_json).get("decisive_primary_judgments")
        if not isinstance(wins, dict):
            return None
        from policies import cusum

        current = cusum.CusumDesign.from_dict(json.loads(w.design_json))
        baseline = cusum.baseline_from_promotion(int(wins["incumbent_wins"]), int(wins["candidate_wins"]))
        return json.dumps(cusum.design(baseline, min_judged=current.min_judged).to_dict())

    async def move_alert(self, principal: Principal, alert_id: str, to: str) -> dict[str, Any]:
        """Acknowledge (from firing) or resolve (from firing or acknowledged) an alert; resolving
        re-arms its watch (a new period, in the same transaction)."""
        ctx = self._ctx
        a = await ctx.store.get_alert(alert_id)
        if a is None:
            raise NotFound(_no_alert(alert_id))
        require(principal, a.team, "read", not_found=_no_alert(alert_id), forbidden=_no_alert(alert_id))
        require(principal, a.team, "write", not_found=_no_alert(alert_id),
                forbidden=f"your roles may read alert {alert_id!r} but not change it")
        allowed = ("firing",) if to == "acknowledged" else ("firing", "acknowledged")
        now = ctx.clock()
        outbox = None
        if ctx.uplink_enabled:
            outbox = alert_outbox(alert_id, watch_id=a.watch_id, team=a.team, state=to, at=now)  # type: ignore[arg-type]
        design = await self.next_design(a.watch_id) if to == "resolved" else None
        updated, changed = await ctx.store.transition_alert(
            alert_id, to, allowed_from=allowed, actor=principal.subject, now=now, outbox=outbox,
            next_design_json=design,
        )
        if updated is None:
            raise NotFound(_no_alert(alert_id))
        if not changed:
            raise Conflict(f"alert {alert_id} is {updated.status}; it cannot become {to}", code="alert_transition_refused")
        return alert_view(updated)

    # -- live ----------------------------------------------------------------------

    async def live(self, principal: Principal) -> dict[str, Any]:
        """Firing alerts first, then the tiles: running trials, active watches, firing alerts,
        evaluation spend (today, last 7 days) beside the served exchanges' metered cost."""
        ctx = self._ctx
        teams = visible(principal)
        none = teams is not None and not teams
        firing = [] if none else [alert_view(a) for a in await ctx.store.list_alerts(teams=teams, status="firing")]
        # Issue 26, item 3: an acknowledged alert stays on Live (who, when) until it is resolved.
        acked = [] if none else [alert_view(a) for a in await ctx.store.list_alerts(teams=teams, status="acknowledged")]
        unresolved = [await self._next_steps(a) for a in firing + acked]
        running = [] if none else await ctx.store.list_trials(teams=teams, status="running", kind="trial")
        # Issue 26, item 4: paused trials need attention (resume or stop), never worded Inconclusive.
        paused = [] if none else [r for status in PAUSED_STATUSES
                                  for r in await ctx.store.list_trials(teams=teams, status=status, kind="trial")]
        watches = [] if none else await ctx.store.list_watches(teams=teams, status="active")
        now = ctx.clock()
        midnight = _dt.datetime.fromtimestamp(now, tz=_dt.timezone.utc).replace(
            hour=0, minute=0, second=0, microsecond=0).timestamp()
        windows: dict[str, dict[str, Any]] = {}
        for name, since in (("today", midnight), ("last_7_days", now - 7 * DAY_S)):
            w = {"charged": 0, "cases": 0, "incumbent_known": 0, "incumbent_unknown": 0}
            c = {"charged": 0, "compares": 0, "unknown_calls": 0}
            if not none:
                w = await ctx.store.spend_window(since=since, until=now + 1e-6, teams=teams)
                c = await ctx.store.compare_spend_window(since=since, until=now + 1e-6, teams=teams)
            windows[name] = {
                "since": since,
                # Every evaluation the sidecar ran: trials' and watches' cases, and Compare (issue 28).
                "evaluation": {"charged_micros": w["charged"] + c["charged"], "cases": w["cases"],
                               "basis": "list_price",
                               "by_source": {"trials_and_watches_micros": w["charged"],
                                             "compare_micros": c["charged"]},
                               "compares": c["compares"], "compare_unknown_calls": c["unknown_calls"]},
                "gateway_metered": {
                    "known_micros": w["incumbent_known"], "unknown_exchanges": w["incumbent_unknown"],
                    "scope": "the served exchanges of the evaluated cases, as the gateway metered or list-priced them",
                },
            }
        totals = spend_totals_view(
            {"spent": 0, "known": 0, "reserved": 0, "unknown_calls": 0} if none else await ctx.store.total_spend(teams=teams)
        )
        console = ctx.control_plane_console
        experiments = {  # experiments run on a control plane; their spend is shown there (issue 28)
            "held_here": False, "control_plane_console": console or None,
            "message": (f"experiments run on the control plane; their spend is on its Live, beside trials': {console}"
                        if console else "experiments run on a control plane (shadowtrial collector), not on this "
                        "sidecar; their spend is on its Live; none is configured here ([uplink] console_url)"),
        }
        spend = {**totals, **windows, "experiments": experiments,
                 "note": "evaluation spend is shown beside the gateway's metered spend, never summed with it"}
        running_items = [await live_item(ctx.views, r) for r in running]
        watch_items = [await self.view(w) for w in watches]
        return {
            "alerts": unresolved,
            "tiles": [
                {"tile": "running_trials", "count": len(running_items)},
                {"tile": "active_watches", "count": len(watch_items)},
                {"tile": "firing_alerts", "count": len(firing)},
                {"tile": "evaluation_spend", "today_micros": windows["today"]["evaluation"]["charged_micros"],
                 "last_7_days_micros": windows["last_7_days"]["evaluation"]["charged_micros"]},
            ],
            "running_trials": running_items,
            "paused_trials": [await live_item(ctx.views, r) for r in paused],
            "watches": watch_items,
            "evaluation_spend": spend,
            "intake": ctx.live.intake(),
            "counters": ctx.live.counts(),
        }

    async def _next_steps(self, alert: dict[str, Any]) -> dict[str, Any]:
        """An unresolved alert with where it leads: the rollback gate a promotion flow asks
        (docs/promotion.md), and the trial of the replaced model again — the watch's roles
        reversed (the new incumbent served, the replaced model as the candidate)."""
        w = await self._ctx.store.get_watch(alert["watch_id"])
        steps: dict[str, Any] = {"rollback_gate": "/v1/gates/flagger/rollback",
                                 "watch_gate": f"/v1/watches/{alert['watch_id']}/gate"}
        if w is not None:
            steps["rollback_metadata"] = {"trial": w.trial_id}
            steps["retrial"] = {"team": w.team, "incumbent_model": w.new_model, "candidate_model": w.old_model,
                                "route": w.route, "gateway": w.gateway}
        return {**alert, "next_steps": steps}

    # -- results -------------------------------------------------------------------

    async def results(self, principal: Principal, query: dict[str, str]) -> dict[str, Any]:
        """Two lists, never interleaved: ``traffic`` (trials, replay trials), each worded by the
        traffic table; ``corpus``: None, since a sidecar holds no corpus evidence (experiments and
        A/B comparisons live in the control plane), with ``corpus_source`` saying where it is."""
        team, status, model = query.get("team"), query.get("status"), query.get("model")
        since = _day(query.get("since"), "since")
        until = _day(query.get("until"), "until")
        teams = visible(principal, team)
        traffic: list[dict[str, Any]] = []
        if teams is None or teams:
            for r in await self._ctx.store.list_trials(teams=teams, status=status, kind="trial"):
                if model is not None and model not in (r.incumbent_model, r.candidate_model):
                    continue
                if since is not None and r.created_at < since:
                    continue
                if until is not None and r.created_at >= until + DAY_S:
                    continue
                item = await list_item(self._ctx.views, r)
                item["evidence"] = "traffic"
                traffic.append(item)
        console = self._ctx.control_plane_console
        where = (f"corpus evidence (experiments, A/B comparisons) is held by the control plane: {console}"
                 if console else "corpus evidence (experiments, A/B comparisons) is held by a control plane "
                 "(shadowtrial collector); none is configured here ([uplink] console_url)")
        return {"traffic": traffic, "corpus": None,
                "corpus_source": {"held_here": False, "control_plane_console": console or None, "message": where},
                "note": "traffic and corpus evidence are never mixed; only traffic evidence may promote"}


def _day(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        day = _dt.datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        raise BadRequest(f"{name} must be a UTC date YYYY-MM-DD, got {value!r}", field=name) from None
    return day.timestamp()
