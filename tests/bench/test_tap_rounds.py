"""``bench/tap.py --rounds N``: each tap's ratio to the floor is taken round by round.

The table takes each row's best round, so a tap's row and the floor's can come from different
rounds; on a shared machine, where the floor itself moved 4.2 to 8.1 µs between runs, that
ratio mixes two machine speeds. The per-round ratios pair each tap with the floor measured
in the same round.
"""

from __future__ import annotations

import re
from types import ModuleType

import pytest


def phase(tap: ModuleType, name: str, mode: str, rnd: int, own_us: float, per_s: float = 1000.0) -> object:
    n = 1000  # exchanges: 1,000 requests of one exchange
    load = tap.Load(requests=n, errors=0, seconds=n / per_s, client_cpu_s=0.0)
    return tap.Phase(name, mode, 1, load, None, {}, own_us * n / 1e6, round=rnd)


def test_each_tap_is_divided_by_the_floor_of_its_own_round(tap: ModuleType) -> None:
    m = "(b) 100 exchanges/request"
    phases = [
        phase(tap, "reference", m, 0, 2.0), phase(tap, "floor", m, 0, 4.0),
        phase(tap, "tap", m, 0, 8.0), phase(tap, "tap r=0", m, 0, 6.0),
        # The machine at half speed in round 1: every figure doubles, the ratios do not move.
        phase(tap, "reference", m, 1, 4.0), phase(tap, "floor", m, 1, 8.0, per_s=2000.0),
        phase(tap, "tap", m, 1, 16.0), phase(tap, "tap r=0", m, 1, 12.0, per_s=5000.0),
    ]
    ratios = tap.floor_ratios(phases)
    assert ratios == {(m, "tap"): [2.0, 2.0], (m, "tap r=0"): [1.5, 1.5]}
    # The best-of table pairs the floor's round 1 (more exchanges/s) with tap r=0's round 1 and
    # tap's round 0 (a tie, the first kept): 8.0 / 8.0 for the tap, not its 2.0 of either round.
    best = {p.name: p for p in tap.best_of(phases)}
    assert best["tap"].own_us_per_exchange / best["floor"].own_us_per_exchange == pytest.approx(1.0)


def test_a_round_without_its_floor_gives_no_ratio(tap: ModuleType) -> None:
    m = "(a) 1 exchange/request"
    phases = [phase(tap, "floor", m, 0, 100.0), phase(tap, "tap", m, 0, 150.0), phase(tap, "tap", m, 1, 300.0)]
    assert tap.floor_ratios(phases) == {(m, "tap"): [1.5]}


def test_the_report_prints_the_median_and_every_round(tap: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    m = "(b) 100 exchanges/request"
    phases = [phase(tap, "floor", m, r, 4.0) for r in range(3)]
    phases += [phase(tap, "tap", m, r, us) for r, us in enumerate((8.0, 10.0, 9.0))]
    tap.report_rounds(phases)
    out = capsys.readouterr().out
    assert re.search(r"\(b\) 100 exchanges/request +tap +median 2\.25x over 3 rounds \(2\.00, 2\.50, 2\.25\)", out)
