from __future__ import annotations

import math

import pytest

from judge.errors import InvalidArgument, InvalidOrderKey
from judge.order import arrange, audit_selected, presentation_order, swapped

KEY = b"test-order-key"
N = 10_000


def _tolerance(p: float, n: int) -> float:
    return 5 * math.sqrt(p * (1 - p) / n)  # 5 sigma: a seeded hash will not flake


def test_order_is_deterministic() -> None:
    for i in range(200):
        assert presentation_order("t1", f"c{i}", key=KEY) == presentation_order("t1", f"c{i}", key=KEY)


def test_order_is_close_to_half_over_10000_ids() -> None:
    firsts = sum(presentation_order("trial-7", f"case-{i}", key=KEY) == "incumbent_first" for i in range(N))
    assert abs(firsts / N - 0.5) < _tolerance(0.5, N)


def test_order_depends_on_key_and_trial() -> None:
    base = [presentation_order("t1", str(i), key=KEY) for i in range(200)]
    assert base != [presentation_order("t1", str(i), key=b"another-key") for i in range(200)]
    assert base != [presentation_order("t2", str(i), key=KEY) for i in range(200)]


def test_ids_are_length_prefixed() -> None:
    pairs = [(f"a{i}", "bc") for i in range(64)]
    assert [presentation_order(t, c, key=KEY) for t, c in pairs] != [
        presentation_order(t + "b", "c", key=KEY) for t, _ in pairs
    ]


def test_audit_share_close_to_ten_percent() -> None:
    audited = sum(audit_selected("trial-7", f"case-{i}", key=KEY) for i in range(N))
    assert abs(audited / N - 0.10) < _tolerance(0.10, N)


def test_audit_is_independent_of_order() -> None:
    both = sum(
        audit_selected("t", str(i), 0.5, key=KEY) and presentation_order("t", str(i), key=KEY) == "incumbent_first"
        for i in range(N)
    )
    assert abs(both / N - 0.25) < _tolerance(0.25, N)


def test_audit_share_extremes_and_domain() -> None:
    assert not any(audit_selected("t", str(i), 0.0, key=KEY) for i in range(500))
    assert all(audit_selected("t", str(i), 1.0, key=KEY) for i in range(500))
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(InvalidArgument):
            audit_selected("t", "c", bad, key=KEY)


@pytest.mark.parametrize("key", [b"", b"k" * 65])
def test_bad_keys_rejected(key: bytes) -> None:
    with pytest.raises(InvalidOrderKey):
        presentation_order("t", "c", key=key)
    with pytest.raises(InvalidOrderKey):
        audit_selected("t", "c", key=key)


def test_swap_and_arrange() -> None:
    assert swapped("incumbent_first") == "candidate_first"
    assert swapped("candidate_first") == "incumbent_first"
    assert arrange("incumbent_first", "inc", "cand") == ("inc", "cand")
    assert arrange("candidate_first", "inc", "cand") == ("cand", "inc")
    with pytest.raises(InvalidArgument):
        swapped("nope")  # type: ignore[arg-type]
