"""A trial's decision folded case by case, in the store's scoring order: the betting sequence.

The betting confidence sequence (:mod:`policies.betting`) depends on the order of the cases,
so a trial deciding on it folds its scored cases one by one in a defined order, the same for
every sidecar of a fleet and across restarts: the store numbers each scored case of a trial
1, 2, 3, ... in the transaction that scores it (its *scoring sequence*), and a fold takes the
cases after its ``cursor`` in that order. Every case is a look: after each, its interval is
folded into the running intersection (:func:`policies.sequence.fold`) with the case count as
``n``, so the decision and ``decided_at`` are functions of the ordered stream alone, not of
when anyone read the trial.

:class:`StreamState` is everything kept: the cursor, the capital, the running intersection
and this last case's interval. Folding is pure and deterministic; folding cases 1..N at once
or in any number of batches gives the same state bit for bit (see :mod:`policies.betting`).
Cases must arrive gapless (``cursor + 1``, ``cursor + 2``, ...): a fold stops at the first
gap and leaves the rest for a later fold, so no case is ever skipped or folded twice.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from policies import betting
from policies.decision import VerdictCode, decide
from policies.sequence import SequenceState, fold

METHOD = "betting"


@dataclass(frozen=True, slots=True)
class StreamState:
    """``cursor``: the scoring sequence number of the last case folded (0: none).
    ``capital``: the betting state after it. ``sequence``: the running intersection and the
    decision. ``now``: the last case's own interval (win-rate scale)."""

    cursor: int
    capital: betting.BettingState
    sequence: SequenceState | None
    now: tuple[float, float]

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": METHOD,
            "cursor": self.cursor,
            "capital": self.capital.to_dict(),
            "sequence": None if self.sequence is None else self.sequence.to_dict(),
            "now": list(self.now),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamState:
        if data.get("method") != METHOD:
            raise ValueError(f"not a {METHOD} state")
        seq = data["sequence"]
        lo, hi = data["now"]
        return cls(int(data["cursor"]), betting.BettingState.from_dict(data["capital"]),
                   None if seq is None else SequenceState.from_dict(seq), (float(lo), float(hi)))


def is_stream_state(data: Mapping[str, Any]) -> bool:
    """True for a stored state of this module (a trial deciding on the betting sequence)."""
    return data.get("method") == METHOD


@dataclass(frozen=True, slots=True)
class StreamFold:
    """The state after a fold, its verdict, and whether any case of it emptied the intersection."""

    state: StreamState
    verdict: VerdictCode
    contradicted: bool
    folded: int


def fold_cases(
    prior: StreamState | None,
    cases: Sequence[tuple[int, float]],
    *,
    alpha: float,
    tolerance: float,
    min_cases: int,
    expected_cases: int,
    parity: float = 0.5,
) -> StreamFold:
    """Fold ``cases`` — (scoring sequence number, case score in [-1, 1]) in that order — into
    ``prior`` (None: no case folded yet). Cases at or before the cursor are ignored (already
    folded); folding stops at the first gap."""
    cursor = 0 if prior is None else prior.cursor
    take: list[float] = []
    for seq, score in cases:
        if seq <= cursor + len(take):
            continue
        if seq != cursor + len(take) + 1:
            break
        if not -1.0 <= score <= 1.0:
            raise ValueError("case scores must lie in [-1, 1]")
        take.append(score)
    if prior is None:
        cap = betting.BettingState.of(betting.start(1, betting.grid(parity, tolerance).size))
        state = StreamState(0, cap, None, (0.0, 1.0))
    else:
        state = prior
    if not take:
        verdict: VerdictCode = "inconclusive" if state.sequence is None else state.sequence.decision
        return StreamFold(state, verdict, False, 0)
    y = (1.0 + np.asarray(take, dtype=np.float64)) / 2.0
    lows, highs, capital = betting.running_bounds(
        y, alpha=alpha, parity=parity, tolerance=tolerance, method="betting", capital=state.capital.capital(),
    )
    seq_state, contradicted = _fold_looks(
        state.sequence, state.capital.t, lows.tolist(), highs.tolist(), alpha=alpha, tolerance=tolerance,
        min_cases=min_cases, expected_cases=expected_cases, parity=parity,
    )
    new = StreamState(cursor + len(take), betting.BettingState.of(capital), seq_state,
                      (float(lows[-1]), float(highs[-1])))
    return StreamFold(new, seq_state.decision, contradicted, len(take))


def _fold_looks(
    prior: SequenceState | None, first: int, lows: list[float], highs: list[float], *, alpha: float,
    tolerance: float, min_cases: int, expected_cases: int, parity: float,
) -> tuple[SequenceState, bool]:
    """Every case's interval folded in turn into ``prior`` (case ``first + 1`` first), as
    :func:`policies.sequence.fold` does look by look: the first look through it (which checks
    the prior's settings), the rest with the same arithmetic on plain floats and one state built
    at the end (a state and a numpy call per case were most of a fold's cost). The state and
    ``contradicted`` are the same, bit for bit (tests/policies/test_stream_fold.py)."""
    lo, hi = _well_formed(lows[0], highs[0])
    result = fold(prior, n=first + 1, lower=lo, upper=hi, parity=parity, tolerance=tolerance,
                  min_cases=min_cases, alpha=alpha, expected_cases=expected_cases)
    s, contradicted = result.state, result.contradicted
    run_lo, run_hi, decision, decided_at, restarts, seen = s.lower, s.upper, s.decision, s.decided_at, s.restarts, s.n
    for i in range(1, len(lows)):
        n = first + i + 1
        lower, upper = _well_formed(lows[i], highs[i])
        run_lo, run_hi = max(run_lo, lower), min(run_hi, upper)
        seen = max(seen, n)
        if run_lo > run_hi:
            contradicted = True
            run_lo, run_hi, decision, decided_at, restarts = lower, upper, "inconclusive", None, restarts + 1
        now = decide(run_lo, run_hi, n=seen, parity=parity, tolerance=tolerance, min_cases=min_cases)
        if now != decision:
            decision, decided_at = now, (None if now == "inconclusive" else n)
    if len(lows) > 1:
        s = SequenceState(seen, run_lo, run_hi, decision, decided_at, restarts, alpha, expected_cases, tolerance)
    return s, contradicted


def _well_formed(lo: float, hi: float) -> tuple[float, float]:
    """Both sides rejected one point (only on the miss event): the interval is kept well formed."""
    if lo > hi:
        lo = hi = (lo + hi) / 2.0
    return lo, hi


def bounds_path(
    cases: Sequence[tuple[int, float]], *, alpha: float, tolerance: float, min_cases: int, expected_cases: int,
    points: int = 120,
) -> list[tuple[int, float, float]]:
    """The kept interval after each case of the stream (from the first), as ``(n, lower, upper)``
    at up to ``points`` evenly spaced case counts, the last always included: what the trial
    decided on, case by case (the decision chart)."""
    n = len(cases)
    if n == 0:
        return []
    y = (1.0 + np.asarray([score for _, score in cases], dtype=np.float64)) / 2.0
    lows, highs, _ = betting.running_bounds(y, alpha=alpha, parity=0.5, tolerance=tolerance, method="betting")
    picks = np.unique(np.linspace(0, n - 1, min(points, n)).round().astype(np.int64))
    run_lo, run_hi = np.empty(n), np.empty(n)
    cur_lo, cur_hi = 0.0, 1.0
    for i in range(n):  # the running intersection of policies.sequence.fold; restarts are rare
        lo, hi = float(lows[i]), float(highs[i])
        if lo > hi:
            lo = hi = (lo + hi) / 2.0
        cur_lo, cur_hi = max(cur_lo, lo), min(cur_hi, hi)
        if cur_lo > cur_hi:
            cur_lo, cur_hi = lo, hi
        run_lo[i], run_hi[i] = cur_lo, cur_hi
    return [(int(i) + 1, float(run_lo[i]), float(run_hi[i])) for i in picks]
