"""Sampling is a pure, stable, uniform function of (trial id, exchange id, rate)."""

from __future__ import annotations

import ast
import math
import pathlib

import pytest

from policies import sampling
from policies.sampling import is_sampled, sample_point, sampler

IDS = [f"ex-{i:05d}" for i in range(20_000)]


def test_known_answer_pins_the_algorithm() -> None:
    # Plugins in other languages reproduce this value; changing it resamples every trial.
    assert sample_point("trial-1", "exchange-1") == 0.16599654055679747
    assert "0.16599654055679747" in (sampling.__doc__ or "")


def test_deterministic_and_independent_of_call_order() -> None:
    forward = [sample_point("t1", e) for e in IDS[:2000]]
    backward = [sample_point("t1", e) for e in reversed(IDS[:2000])][::-1]
    interleaved = []
    for e in IDS[:2000]:
        sample_point("other-trial", e)
        interleaved.append(sample_point("t1", e))
    assert forward == backward == interleaved


def test_points_lie_in_unit_interval() -> None:
    points = [sample_point("t1", e) for e in IDS]
    assert all(0.0 <= p < 1.0 for p in points)


@pytest.mark.parametrize("rate", [0.01, 0.1, 0.25, 0.5, 0.9])
def test_share_is_close_to_rate(rate: float) -> None:
    n = len(IDS)
    k = sum(is_sampled("trial-share", e, rate) for e in IDS)
    sd = math.sqrt(n * rate * (1 - rate))
    assert abs(k - n * rate) < 5 * sd


def test_rate_zero_never_and_one_always() -> None:
    assert not any(is_sampled("t", e, 0.0) for e in IDS[:5000])
    assert not any(is_sampled("t", e, 0) for e in IDS[:5000])
    assert all(is_sampled("t", e, 1.0) for e in IDS[:5000])
    assert all(is_sampled("t", e, 1) for e in IDS[:5000])


def test_different_trials_sample_different_subsets() -> None:
    a = {e for e in IDS if is_sampled("trial-a", e, 0.1)}
    b = {e for e in IDS if is_sampled("trial-b", e, 0.1)}
    # Independent 10% samples overlap in about 1% of ids, not 10%.
    overlap = len(a & b) / len(IDS)
    assert a != b
    assert overlap < 0.02


def test_rate_is_monotonic() -> None:
    for e in IDS:
        if is_sampled("trial-m", e, 0.1):
            assert is_sampled("trial-m", e, 0.2)


def test_encoding_separates_ids() -> None:
    # Plain concatenation would make these collide.
    assert sample_point("ab", "c") != sample_point("a", "bc")
    assert sample_point("a|b", "c") != sample_point("a", "b|c")
    assert sample_point("", "x") != sample_point("x", "")


def test_non_ascii_ids_are_accepted() -> None:
    assert 0.0 <= sample_point("essai-é", "交换-1") < 1.0


@pytest.mark.parametrize("rate", [-0.01, 1.01, float("nan"), float("inf")])
def test_rate_out_of_range_is_refused(rate: float) -> None:
    with pytest.raises(ValueError):
        is_sampled("t", "e", rate)


@pytest.mark.parametrize("rate", [True, "0.5", None])
def test_rate_of_wrong_type_is_refused(rate: object) -> None:
    with pytest.raises(TypeError):
        is_sampled("t", "e", rate)  # type: ignore[arg-type]


def test_module_imports_only_the_standard_library() -> None:
    # A gateway plugin copies this file on its own.
    tree = ast.parse(pathlib.Path(sampling.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "hashlib", "math", "typing"}


@pytest.mark.parametrize("rate", [0.0, 1e-9, 0.05, 0.16599654055679747, 0.5, 0.999999, 1.0, 1])
def test_sampler_decides_as_is_sampled(rate: float) -> None:
    # The tap decides through sampler(); an auditor or a plugin re-checks with is_sampled().
    for trial in ("trial-1", "essai-é"):
        decide = sampler(trial, rate)
        assert [decide(e) for e in IDS[:5000]] == [is_sampled(trial, e, rate) for e in IDS[:5000]]
    # The known answer's own point is not below itself, and is below the next float up.
    assert not sampler("trial-1", 0.16599654055679747)("exchange-1")
    assert sampler("trial-1", math.nextafter(0.16599654055679747, 1.0))("exchange-1")


@pytest.mark.parametrize("rate", [-0.01, 1.01, float("nan"), True, "0.5"])
def test_sampler_refuses_what_is_sampled_refuses(rate: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        sampler("t", rate)  # type: ignore[arg-type]


def test_sampler_compares_digests_exactly_at_the_edges() -> None:
    # sampler() compares the digest with a byte bound (issue 29); it must agree with the
    # point's own comparison at each point, just above it, for ids of every length (the
    # length prefixes of short ids are precomputed) and for the largest rate below 1.
    ids = ["", "é", "x" * 255, "x" * 256, "ü" * 200, "exchange-1"] + IDS[:200]
    for exchange_id in ids:
        point = sample_point("trial-1", exchange_id)
        for rate in (point, math.nextafter(point, 1.0), math.nextafter(point, 0.0), math.nextafter(1.0, 0.0)):
            assert sampler("trial-1", rate)(exchange_id) == (point < rate), (exchange_id, rate)
