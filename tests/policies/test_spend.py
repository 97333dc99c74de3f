"""Spend decisions (policies/spend.py): refusals and charges, against hand-worked figures."""

from __future__ import annotations

import pytest

from policies import spend
from policies.money import Cost, Price
from policies.spend import Charge, charge_call, refusal, total, typical_worst_case


@pytest.mark.parametrize(
    ("status", "spent", "amount", "typical", "expected"),
    [
        ("stopped", 0, 10, 10, "not_running"),
        ("cap_reached", 0, 10, 10, "not_running"),
        ("running", 95, 10, 10, "trial_exhausted"),  # 5 left < a typical 10: spend only grows
        ("running", 60, 50, 10, "case_too_large"),  # 40 left: fine for a typical case, never for this one
        ("running", 60, 30, 10, "wait"),  # 40 left once others release: worth waiting
        ("running", 90, 10, 10, "wait"),  # exactly a typical case left
    ],
)
def test_refusal(status: str, spent: int, amount: int, typical: int, expected: str) -> None:
    assert refusal(status=status, cap=100, spent=spent, amount=amount, typical=typical) == expected


def test_typical_is_the_median_of_recent_first_reservations() -> None:
    assert typical_worst_case([], fallback=7) == 7
    assert typical_worst_case([5, 100, 6], fallback=7) == 6


def test_a_known_cost_within_the_worst_case_is_charged_as_is() -> None:
    assert charge_call(Cost(40, "complete"), 100) == Charge(40, Cost(40, "complete"))


@pytest.mark.parametrize("coverage", ["partial", "unknown"])
def test_an_incomplete_cost_holds_the_worst_case(coverage: str) -> None:
    c = charge_call(Cost(10 if coverage == "partial" else 0, coverage), 100)  # type: ignore[arg-type]
    assert c.charged_micros == 100 and c.unknown and not c.disputed


def test_a_report_beyond_the_worst_case_is_disputed_and_capped() -> None:
    c = charge_call(Cost(10**12, "complete"), 100)
    assert c == Charge(100, Cost(100, "partial"), disputed=True)
    assert c.unknown  # not complete: the report is not believed


def test_total_adds_charges_and_keeps_unknown_unknown() -> None:
    assert total([]) == (0, Cost.zero(), 0, 0, 0)
    charged, cost, unknown, priced, disputed = total([charge_call(Cost.unknown(), 50)])
    assert (charged, cost.coverage, unknown, priced, disputed) == (50, "unknown", 1, 0, 0)
    charged, cost, unknown, priced, disputed = total(
        [charge_call(Cost(30, "complete"), 50), charge_call(Cost.unknown(), 50), charge_call(Cost(99, "complete"), 60)]
    )
    assert (charged, cost.known_micros, cost.coverage, unknown, priced, disputed) == (140, 90, "partial", 2, 2, 1)


def test_a_usage_report_no_call_can_have_is_disputed_and_charged_the_worst_case() -> None:
    price = Price(1_000_000, 2_000_000)  # $1 / $2 per million tokens
    assert spend.charge_usage(price, 100, 50, 10_000) == spend.Charge(200, Cost(200, "complete"))
    for counts in ((-1000, 5), (5, -1), (10**12, 10**12)):
        charge = spend.charge_usage(price, *counts, 10_000)
        assert charge.disputed and charge.charged_micros == 10_000 and charge.cost.coverage == "partial", counts
    # Not reported at all: held at the worst case, unknown (not disputed: nothing to dispute).
    held = spend.charge_usage(price, None, None, 10_000)
    assert (held.charged_micros, held.cost.coverage, held.disputed) == (10_000, "unknown", False)


def test_an_unreadable_usage_report_is_disputed_and_charged_the_worst_case() -> None:
    """Issue 21, item 4: counts the provider client could not read (None, flagged disputed)
    are charged the worst case, coverage not complete — even with the other count readable."""
    price = Price(1_000_000, 4_000_000)
    for counts in ((None, None), (10, None), (None, 10)):
        charge = spend.charge_usage(price, *counts, 500, disputed=True)
        assert (charge.charged_micros, charge.disputed, charge.cost.coverage) == (500, True, "partial")
    assert spend.charge_usage(price, 10, 10, 500) == Charge(50, Cost(50, "complete"))
