"""The collector's records over the sidecar's store contract, and the trials it runs.

:class:`CollectedRecords` is the :class:`uplink.collector_store.CollectorStore` of
``shadowtrial collector``: each record is kept once by id in ``collected_records``
(SQLite by default, PostgreSQL for scale: :meth:`~sidecar.collector.store.base.CollectedStore.put_collected`).

Control-plane execution (issue 11 item 5). A stored ``trial_spec`` record makes the
collector's own copy of the trial (same id) follow the *latest* spec it holds — highest
revision, whatever order records came in (:func:`apply_spec`): created as the spec says,
paused or stopped with it, run again (and re-pinned) when a resume says so. A trial whose
copy has ended here (its cap reached at this site, or stopped) stays ended. Stored
``exchange`` records are then run by :class:`~sidecar.collector.control_plane.ControlPlane` while the
copy is running at the control plane; those of a copy paused or re-pinned elsewhere before
they ran are recorded ``shed_stopped`` there, once (issue 21 item 8). ``GET /v1/trials`` shows
each copy's own figures, its funnel included.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import msgspec

from policies.wording import traffic_wording
from sidecar.services.views import spend_view
from sidecar.collector.control_plane import ControlPlane
from sidecar.trials.fold import fold_trial
from sidecar.trials.segments import evaluate_segments, segments_of, segments_view
from sidecar.collector.store.base import ControlPlaneStore
from sidecar.trials.spec import record_of
from uplink.collector_store import Held
from uplink.schema import PostureRecord, TrialSpec

log = logging.getLogger("shadowtrial.collector")

#: Statuses a copy pauses in (its sidecar's pause); ended ones are final.
_PAUSED = ("posture_changed", "starter_unauthorized")
_ENDED = ("stopped", "cap_reached")
_spec = msgspec.json.Decoder(TrialSpec)
_posture = msgspec.json.Decoder(PostureRecord)


async def apply_spec(store: ControlPlaneStore, trial_id: str, *, now: float) -> str | None:
    """Make the collector's copy of ``trial_id`` follow the latest ``trial_spec`` held for it;
    its status after (None: no spec, or none usable)."""
    body = await store.latest_spec(trial_id)
    if body is None:
        return None
    try:
        spec = _spec.decode(body)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        log.error("trial %s: its latest trial_spec is not usable (%s)", trial_id, type(exc).__name__)
        return None
    copy = await store.get_trial(trial_id)
    if copy is None:
        return (await store.create_trial(record_of(spec))).status
    if copy.status in _ENDED:
        return copy.status
    if spec.status in _ENDED:
        after, _ = await store.set_trial_status(trial_id, spec.status, spec.status_reason, ended=True, now=now)
    elif spec.status != "running":
        after, _ = await store.set_trial_status(trial_id, spec.status, spec.status_reason, ended=False, now=now)
    elif (copy.status, copy.execution_site, copy.prompt_retention) != ("running", spec.execution_site,
                                                                         spec.prompt_retention):
        if copy.status == "running":  # a pause this collector never saw: moved in two steps
            await store.set_trial_status(trial_id, "posture_changed", "re-pinned by its sidecar", ended=False, now=now)
        after, _ = await store.resume_trial(
            trial_id, paused=_PAUSED, started_by=spec.started_by, execution_site=spec.execution_site,
            prompt_retention=spec.prompt_retention,
        )
    else:
        after = copy
    return None if after is None else after.status


class CollectedRecords:
    """The collector's store (see the module's docs); the caller opens and closes ``store``."""

    def __init__(
        self, store: ControlPlaneStore, *, control_plane: ControlPlane | None, clock: Callable[[], float]
    ) -> None:
        self.store = store
        self.control_plane = control_plane
        self._clock = clock

    async def put(self, records: Sequence[Held]) -> list[str]:
        # The batch's specs are stored and applied before its other records: an exchange that
        # comes in the same batch as its trial's pause is never seen pending under the old
        # status, so it is counted ``shed_stopped`` (issue 21 item 8) rather than run for a
        # paused trial. Each part is one transaction; a batch stored in part is sent again.
        spec_records = [h for h in records if h.kind == "trial_spec"]
        stored = await self.store.put_collected(spec_records) if spec_records else []
        # Applied for every spec of the batch, held before or not: a batch whose apply failed after
        # its records were stored is sent again, and applying the latest spec is idempotent.
        specs = sorted({h.trial_id for h in spec_records if h.trial_id})
        for trial_id in specs:
            await apply_spec(self.store, trial_id, now=self._clock())
        rest = [h for h in records if h.kind != "trial_spec"]
        if rest:
            stored += await self.store.put_collected(rest)
        if self.control_plane is not None and (specs or any(h.kind == "exchange" for h in records)):
            self.control_plane.wake()  # new exchanges to run, or a trial to run (again)
        return stored

    async def content_posture(self, team: str) -> tuple[int, bool] | None:
        """The team's live posture as stored: its latest ``posture`` record's (any sidecar's)
        revision, and whether it lets the team's content reach the control plane (its trials
        run here). None when no sidecar has sent one for it (the static ``content_teams``
        alone decides then)."""
        body = await self.store.latest_posture(team)
        if body is None:
            return None
        try:
            record = _posture.decode(body)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return (0, False)  # unreadable: no content on its word
        return (record.revision, record.site == "control_plane")

    async def halted(self, trial_ids: Sequence[str]) -> dict[str, str]:
        """Of ``trial_ids``, the copies this collector holds that no longer run — ended here
        (``cap_reached``, ``stopped``) or paused — with their status: a batch's answer names them,
        so its sidecar stops forwarding their exchanges (issue 25 item 5)."""
        out: dict[str, str] = {}
        for trial_id in trial_ids:
            copy = await self.store.get_trial(trial_id)
            if copy is not None and copy.status != "running":
                out[trial_id] = copy.status
        return out

    async def trials(self) -> list[dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = {str(r["trial_id"]): dict(r) for r in await self.store.collected_trials()}
        for record in await self.store.list_trials():
            view = await self._figures(record.id)
            if view is None:
                continue
            rows.setdefault(record.id, {"trial_id": record.id, "state": None, "case_results": {}})
            rows[record.id]["control_plane"] = view
        return [rows[k] for k in sorted(rows)]

    async def _figures(self, trial_id: str) -> dict[str, Any] | None:
        """A copy's status, funnel, spend and verdict from this collector's own figures."""
        snap = await self.store.snapshot(trial_id)
        if snap is None:
            return None
        r = snap.record
        folded = await fold_trial(self.store, r, snap.score_counts, snap.judgments)
        ev = folded.evaluation
        wording = traffic_wording(ev.verdict, ended=r.status != "running", promoted=False)
        segments = None
        if segments_of(r):  # issue 27: the same per-segment verdicts a sidecar's view gives
            results = evaluate_segments(r, await self.store.tracked_segments(r.id), await self.store.segment_cases(r.id))
            segments = segments_view(r, results, wording)
        return {
            "team": r.team,
            "status": r.status,
            "status_reason": r.status_reason,
            "execution_site": r.execution_site,
            "judge_version_id": r.judge_version_id,
            "funnel": dict(snap.funnel),
            "spend": spend_view(r),
            "verdict": {"code": ev.verdict, "wording": wording, "cases": ev.n},
            "segments": segments,
            "run_here": self.control_plane is not None,
        }
