"""The role and team rules of DESIGN.md section 13, as one table."""

from __future__ import annotations

import pytest

from policies.roles import LOCAL_DEVELOPMENT, Principal, decide


def p(*roles: str, teams: tuple[str, ...] = ("a",), content: bool = False) -> Principal:
    return Principal.of("someone", roles, teams, content=content)


@pytest.mark.parametrize(
    ("principal", "team", "action", "expected"),
    [
        (p("tenant_admin"), "a", "write", "allow"),
        (p("developer"), "a", "write", "allow"),
        (p("security_officer"), "a", "write", "allow"),
        (p("auditor"), "a", "read", "allow"),
        (p("viewer"), "a", "write", "forbidden"),
        (p("finops"), "a", "write", "forbidden"),
        (p("auditor"), "a", "write", "forbidden"),
        (p("developer"), "b", "read", "not_found"),  # another team's object is not found, not forbidden
        (p("developer"), "b", "write", "not_found"),
        (p("viewer"), "b", "write", "not_found"),
        (p("platform_admin", teams=()), "b", "write", "allow"),
        (p("platform_admin", teams=()), "b", "content", "allow"),
        (p("developer"), "a", "content", "forbidden"),
        (p("developer", content=True), "a", "content", "allow"),
        (p("developer", content=True), "b", "content", "not_found"),
        (p("gateway"), "a", "read", "not_found"),  # the tap's role reads nothing on the admin API
        (p("gateway"), "a", "report", "allow"),
        (p("gateway"), "b", "report", "forbidden"),
        (p("developer"), "a", "report", "forbidden"),
        (p("made_up_role"), "a", "read", "not_found"),
        (p(), "a", "read", "not_found"),
    ],
)
def test_who_may_do_what(principal: Principal, team: str, action: str, expected: str) -> None:
    assert decide(principal, team, action) == expected  # type: ignore[arg-type]


def test_listings_are_filtered_to_the_principals_teams() -> None:
    assert p("viewer", teams=("a", "c")).visible_teams() == frozenset({"a", "c"})
    assert p("gateway", teams=("a",)).visible_teams() == frozenset()
    assert p("platform_admin").visible_teams() is None
    assert LOCAL_DEVELOPMENT.visible_teams() is None
    assert p("made_up_role").roles == frozenset()
