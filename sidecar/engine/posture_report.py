"""A sidecar's report of its gateway's content uplink, and the pauses it may cause.

Run by the engine at start and on each heartbeat (:meth:`sidecar.engine.engine.Engine._heartbeat`),
with its own store. Imports no runtime, so the engine can use it. A gateway turned on or
off, or one gone stale, can change a team's site: each running trial of the team that the
posture now moves is paused ``posture_changed`` (docs/posture.md).
"""

from __future__ import annotations

from typing import Callable, Sequence

from policies.posture import Report, posture_site
from sidecar.store.base import Store
from sidecar.store.records import GatewayReport, OutboxRecord
from sidecar.trials.spec import pause_effects
from uplink.schema import PostureRecord, encode_record


def reports_of(reports: Sequence[GatewayReport]) -> list[Report]:
    return [Report(r.gateway, r.content_uplink, r.last_seen) for r in reports]


def pause_reason(site: str, retention: bool) -> str:
    """The status reason of a trial paused ``posture_changed``."""
    return (f"the team's posture changed (execution site now {site}, prompt retention "
            f"{'on' if retention else 'off'}); resume it to pin the new posture")


async def report_and_pause(
    store: Store, *, teams: Sequence[str], gateway: str, content_uplink: bool, now: float, stale_after_s: float,
    default_retention: Callable[[str], bool], sent: dict[str, tuple[bool, bool, str]] | None = None,
    resend: bool = False,
) -> list[str]:
    """Report ``gateway``'s content uplink for each of ``teams`` at ``now``, then pause per team
    the running trials the posture now moves. ``default_retention(team)``: the config's
    retention of a team with no stored posture. With ``sent`` (the sidecar has an uplink: what
    it last sent per team), a team whose posture differs from it gets a ``posture`` record in
    the outbox for the collector (:class:`uplink.schema.PostureRecord`), and ``sent`` is updated;
    with ``resend`` too every team gets one, changed or not (a collector restarted with an empty
    store, or a record lost on the way, leaves it with a stale posture otherwise).
    Returns the ids paused."""
    paused: list[str] = []
    for team in teams:
        await store.report_uplink(team, gateway, content_uplink=content_uplink, now=now)
        stored = await store.get_posture(team)
        retention = default_retention(team) if stored is None else stored.prompt_retention
        cut_over = False if stored is None else stored.cut_over
        site = posture_site(
            reports_of(await store.gateway_reports(team)), prompt_retention=retention, cut_over=cut_over, now=now,
            stale_after_s=stale_after_s,
        )
        if sent is not None and (resend or sent.get(team) != (content_uplink, retention, site)):
            record = PostureRecord(id=f"posture:{team}:{gateway}:{int(now * 1e6)}", team=team, gateway=gateway,
                                   revision=int(now * 1e6), at=now, content_uplink=content_uplink,
                                   prompt_retention=retention, site=site)
            await store.enqueue_outbox([OutboxRecord(record.id, "posture", encode_record(record).decode())], now=now)
            sent[team] = (content_uplink, retention, site)
        reason = pause_reason(site, retention)
        paused += await store.pause_mismatched(
            team, site=site, prompt_retention=retention, reason=reason, now=now,
            effects=await pause_effects(store, team, reason=reason, at=now),
        )
    return paused
