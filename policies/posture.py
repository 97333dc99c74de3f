"""A team's posture, decided (DESIGN.md section 9). Pure: plain data in, plain data out;
the time is an argument.

- :func:`live_uplink`: which gateways' content-uplink reports still count. A gateway whose
  sidecar has not reported for ``stale_after_s`` no longer runs the team as far as the site
  is concerned (a gateway taken away must not hold a team local for ever).
- :func:`posture_site`: the execution site of a posture, through
  :func:`policies.site.execution_site`.
- :func:`needs_pause`: whether a running trial pinned to (site, retention) must be paused
  ``posture_changed`` under the posture now.
- :func:`retention_features`: what retention off makes unavailable (replay, dataset
  seeding), each with the reason an API answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from policies.roles import Principal
from policies.site import Site, execution_site


@dataclass(frozen=True, slots=True)
class Report:
    """A gateway's last content-uplink report for a team."""

    gateway: str
    content_uplink: bool
    last_seen: float


def is_live(report: Report, *, now: float, stale_after_s: float) -> bool:
    """Whether ``report`` still counts: heard within ``stale_after_s`` of ``now``."""
    return now - report.last_seen <= stale_after_s


def live_uplink(reports: Iterable[Report], *, now: float, stale_after_s: float) -> dict[str, bool]:
    """Gateway name → content uplink, over the reports that still count."""
    return {r.gateway: r.content_uplink for r in reports if is_live(r, now=now, stale_after_s=stale_after_s)}


def posture_site(
    reports: Iterable[Report], *, prompt_retention: bool, cut_over: bool, now: float, stale_after_s: float
) -> Site:
    """The site a new trial of the team is pinned to now."""
    return execution_site(
        content_uplink=live_uplink(reports, now=now, stale_after_s=stale_after_s),
        prompt_retention=prompt_retention,
        cut_over=cut_over,
    )


def needs_pause(*, pinned_site: str, pinned_retention: bool, site: Site, prompt_retention: bool) -> bool:
    """A running trial is paused when its pinned site or retention is not the posture's now."""
    return pinned_site != site or pinned_retention != prompt_retention


@dataclass(frozen=True, slots=True)
class Availability:
    available: bool
    reason: str | None = None


def retention_features(prompt_retention: bool) -> dict[str, Availability]:
    """``replay`` and ``dataset_seeding`` need kept prompts: unavailable, with the reason, when
    the team's retention is off. Trials keep working either way."""
    if prompt_retention:
        return {"replay": Availability(True), "dataset_seeding": Availability(True)}
    why = "prompt retention is off for this team: no prompt is kept after its case is judged"
    return {"replay": Availability(False, why), "dataset_seeding": Availability(False, why)}


def may_set_posture(principal: Principal, team: str) -> bool:
    """Setting a team's posture moves where its content goes: ``tenant_admin`` on the team, or
    ``platform_admin``. (Reading it needs any role on the team: :func:`policies.roles.decide`.)"""
    return principal.is_super or ("tenant_admin" in principal.roles and team in principal.teams)
