"""The execution-site predicate (DESIGN.md section 9). Pure."""

from __future__ import annotations

from typing import Literal, Mapping

Site = Literal["local", "control_plane"]


def execution_site(*, content_uplink: Mapping[str, bool], prompt_retention: bool, cut_over: bool) -> Site:
    """Control plane iff content uplink is on for every gateway the team runs (and
    it runs at least one), retention is on, and the team is cut over; local otherwise."""
    if content_uplink and all(content_uplink.values()) and prompt_retention and cut_over:
        return "control_plane"
    return "local"


def runs_here(pinned: str, here: Site) -> bool:
    """Whether a case of a trial pinned to ``pinned`` may run at ``here`` (rule 7:
    one execution site per trial, checked before every case is claimed)."""
    return pinned == here
