"""A principal's rights as the admin API answers them: :func:`policies.roles.decide`,
translated to :mod:`sidecar.errors` in this one place.

Another team's object is :class:`~sidecar.errors.NotFound` with the very message a
missing one gets (the caller passes it), so an answer never tells whether a trial
exists in a team the principal does not see. A write by a principal who sees the team
but whose roles only read is :class:`~sidecar.errors.Forbidden`.

Creating is the one write with no object yet: the team is the caller's own input, so
naming it in the refusal reveals nothing. Whether the caller does not see the team or
only reads it, creating is ``403 forbidden`` naming ``$.team`` — clearer than a 404 for
a resource (``POST /v1/trials``) that plainly exists.
"""

from __future__ import annotations

from typing import Sequence

from policies.roles import Action, Principal, decide
from sidecar.errors import Forbidden, NotFound


def require(principal: Principal, team: str, action: Action, *, not_found: str, forbidden: str) -> None:
    """Pass if ``principal`` may do ``action`` on an object of ``team``; else raise.

    ``not_found`` must be the message the caller gives for a missing object."""
    decision = decide(principal, team, action)
    if decision == "not_found":
        raise NotFound(not_found)
    if decision == "forbidden":
        raise Forbidden(forbidden)


def require_create(principal: Principal, team: str) -> None:
    """Pass if ``principal`` may start a trial for ``team``; else ``403`` naming ``$.team``."""
    decision = decide(principal, team, "write")
    if decision == "not_found":
        raise Forbidden(f"team {team!r} is not one of your teams", field="$.team")
    if decision == "forbidden":
        raise Forbidden(f"your roles may read team {team!r}'s trials but not start them", field="$.team")


def visible(principal: Principal, team: str | None = None) -> Sequence[str] | None:
    """The ``teams`` filter of a store query for ``principal``, narrowed to ``team`` if given.

    None means every team (``platform_admin``); an empty list matches nothing. A ``team``
    the principal does not see narrows to nothing, as a team with no trials would."""
    teams = principal.visible_teams()
    if team is not None:
        return [team] if teams is None or team in teams else []
    return None if teams is None else sorted(teams)
