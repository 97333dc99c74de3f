"""Who may do what: roles and teams from a token's claims, decided in one place (pure).

DESIGN.md section 13. Writers are ``tenant_admin``, ``developer`` and
``security_officer``; readers add ``auditor``, ``viewer`` and ``finops``;
``platform_admin`` passes every check, on every team. A principal sees only its
teams: another team's object is *not found*, exactly as a missing one is, so its
existence does not leak. A reader's write is *forbidden*. Prompt and answer bodies
(where a team retains them) need the separate content permission. ``gateway`` is the
tap's role: it may report exchanges for its teams and nothing on the admin API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

Role = Literal[
    "platform_admin", "tenant_admin", "developer", "security_officer", "auditor", "viewer", "finops", "gateway"
]
ROLES: frozenset[str] = frozenset(
    ("platform_admin", "tenant_admin", "developer", "security_officer", "auditor", "viewer", "finops", "gateway")
)
WRITERS: frozenset[str] = frozenset(("tenant_admin", "developer", "security_officer"))
READERS: frozenset[str] = WRITERS | frozenset(("auditor", "viewer", "finops"))
SUPER = "platform_admin"

Action = Literal["read", "write", "content", "report"]
Decision = Literal["allow", "not_found", "forbidden"]


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is asking: ``subject`` (the token's ``sub``), its roles (unknown ones are dropped),
    its teams, and whether it may read content (prompt and answer bodies)."""

    subject: str
    roles: frozenset[str]
    teams: frozenset[str]
    content: bool = False

    @classmethod
    def of(cls, subject: str, roles: Iterable[str], teams: Iterable[str], *, content: bool = False) -> Principal:
        return cls(subject, frozenset(r for r in roles if r in ROLES), frozenset(teams), content)

    @property
    def is_super(self) -> bool:
        return SUPER in self.roles

    def sees(self, team: str) -> bool:
        """Whether ``team`` exists for this principal at all."""
        return self.is_super or (team in self.teams and bool(self.roles & (READERS | WRITERS)))

    def visible_teams(self) -> frozenset[str] | None:
        """The teams a listing is filtered to; None: every team (``platform_admin``)."""
        if self.is_super:
            return None
        return self.teams if self.roles & READERS else frozenset()


#: The development principal of an admin API with authentication off (loopback only).
LOCAL_DEVELOPMENT = Principal("local-development", frozenset((SUPER,)), frozenset(), content=True)


def decide(principal: Principal, team: str, action: Action) -> Decision:
    """May ``principal`` do ``action`` on an object of ``team``?

    ``not_found`` for a team it does not see (whatever the action), ``forbidden`` for an
    action its roles do not carry, ``allow`` otherwise."""
    if action == "report":
        return "allow" if principal.is_super or ("gateway" in principal.roles and team in principal.teams) else "forbidden"
    if not principal.sees(team):
        return "not_found"
    if principal.is_super:
        return "allow"
    if action == "write":
        return "allow" if principal.roles & WRITERS else "forbidden"
    if action == "content":
        return "allow" if principal.content else "forbidden"
    return "allow"
