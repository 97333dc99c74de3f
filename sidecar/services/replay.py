"""Replay trials: a candidate run over the team's retained traffic (issue 14).

``POST /v1/trials`` with ``"source": {"kind": "replay", "from": …, "to": …}`` (and the
usual team, incumbent model, route and gateway filters, and an optional ``sample_size``)
creates a trial like a live one — the same judge, cap, funnel, statistics and traffic
wording; it is traffic evidence — whose exchanges are the team's retained ones served in
that window, fed by :mod:`sidecar.retention.replay`. It ends when the window is exhausted.

Refusals (``409`` unless said otherwise), each naming the reason in its code:

- ``retention_unavailable`` — this sidecar keeps no retention window (``[retention]
  key_env`` unset);
- ``retention_off`` — the team's prompt retention is off: nothing of it is kept to replay;
- ``site_unavailable`` — the team's posture runs its trials on the control plane, and the
  window is this sidecar's;
- ``replay_window_empty`` — the window holds no exchange of that team and model in that
  time range (nothing to replay);
- ``400 invalid_request`` — ``from``/``to`` missing or not in order, or ``sample_size`` on a
  live trial.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from sidecar.errors import BadRequest, Conflict
from sidecar.retention.replay import selection
from sidecar.services.context import TrialsContext
from sidecar.services.posture import Current
from sidecar.store.records import TrialRecord
from sidecar.trials.create import TrialCreate


def _epoch(when: datetime) -> float:
    return (when if when.tzinfo is not None else when.replace(tzinfo=timezone.utc)).timestamp()


def is_replay(body: TrialCreate) -> bool:
    """Whether ``body`` asks for a replay trial; :class:`BadRequest` for a live body with replay-only fields."""
    if body.source is not None and body.source.kind == "replay":
        return True
    if body.sample_size is not None:
        raise BadRequest('sample_size is for replay trials (source {"kind": "replay", ...}); '
                         "a live trial samples with sample_rate", field="$.sample_size")
    if body.source is not None and (body.source.from_ is not None or body.source.to is not None):
        raise BadRequest("from and to are for replay trials", field="$.source.kind")
    return False


async def as_replay(ctx: TrialsContext, body: TrialCreate, record: TrialRecord, posture: Current) -> TrialRecord:
    """``record`` (built from ``body`` like a live trial) as a replay trial of its window, or the refusal."""
    assert body.source is not None
    if body.source.from_ is None or body.source.to is None:
        field = "$.source.from" if body.source.from_ is None else "$.source.to"
        raise BadRequest("a replay needs its window: source.from and source.to (RFC 3339 times)", field=field)
    start, end = _epoch(body.source.from_), _epoch(body.source.to)
    if end <= start:
        raise BadRequest("source.to must be after source.from", field="$.source.to")
    if ctx.retention is None:
        raise Conflict("replay is unavailable: this sidecar keeps no retention window ([retention] key_env is "
                       "unset, so no served exchange is kept)", code="retention_unavailable", field="$.source")
    if not posture.prompt_retention:
        raise Conflict(f"replay is unavailable: team {body.team!r} has prompt retention off, so none of its "
                       f"traffic is kept to replay (GET /v1/teams/{body.team}/posture)",
                       code="retention_off", field="$.team")
    if posture.site != "local":
        raise Conflict(f"team {body.team!r}'s trials run at execution site {posture.site!r}; a replay reads this "
                       "sidecar's retention window and runs here only", code="site_unavailable", field="$.team")
    replay = dataclasses.replace(record, source="replay", source_from=start, source_to=end, execution_site="local")
    held = await ctx.store.count_retained(selection(replay, kept_after=ctx.retention.keep_after()))  # expired: not held
    if held == 0:
        raise Conflict(f"the retention window holds no exchange of team {body.team!r} and model "
                       f"{body.incumbent_model!r} served in that range (what it kept more than window_seconds ago has "
                       "expired)", code="replay_window_empty", field="$.source")
    size = min(body.sample_size or held, held)
    # Selected by the live sampling hash at this rate: about ``size`` of the window, never more.
    return dataclasses.replace(replay, source_size=size, sample_rate=min(1.0, size / held))
