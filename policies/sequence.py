"""The running intersection of a confidence sequence, and the decision that stands on it.

A confidence sequence (CS) holds at every n at once, so with probability at
least 1 - alpha the truth lies in *every* interval it ever shows, and so in
their intersection. Keeping the running intersection therefore costs nothing in
validity, and makes the interval a verdict is decided from shrink monotonically:
its lower bound never falls and its upper bound never rises. A verdict decided
from it does not flicker when one more case nudges the current interval.

The intersection is carried between evaluations as a :class:`SequenceState`:
plain numbers the caller persists with the trial and hands back next time.
Folding in a look (:func:`fold`):

1. intersect the state's interval with the current interval;
2. if the intersection is **empty**, the evidence contradicts itself: either a
   probability <= alpha event (the CS missed the truth at some n) or the
   traffic changed under the trial (the assumption that cases are exchangeable
   draws failed). The state restarts from the current interval alone, any
   standing decision is withdrawn, ``restarts`` counts it and the look is marked
   ``contradicted``;
3. the verdict of the (new) interval is computed with
   :func:`policies.decision.decide` at the largest case count folded in. On a
   running intersection that verdict is itself monotone: the lower bound never
   falls and the upper bound never rises, so once an interval is above
   ``parity - tolerance`` (``not_worse``, ``equivalent``, ``candidate_better``) or
   below it (``regression``) it stays there. A reached decision therefore
   **stands**; the only change it can make is to sharpen ``not_worse`` into
   ``candidate_better`` or ``equivalent`` (all three read *Adoptable*). A stored
   decision the rule no longer supports (a state kept under an earlier rule) is
   re-read from its interval.

No wrong decision is possible on the event that the CS covers the truth at
every n (the intersection then always contains the truth, is never empty, and
never excludes it), so the error rate stays at most alpha whatever the restart
does. Folding is idempotent (the same look twice changes nothing), and any
subset of looks may be folded, in any order: skipping looks loses tightness,
never validity.

:func:`path` computes the same thing for a whole matrix of looks at once (one
row per simulated trial), for the simulations in tests/.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from policies.decision import INCONCLUSIVE, VERDICT_CODES, VerdictCode, decide, decide_index


@dataclass(frozen=True, slots=True)
class SequenceState:
    """What a trial keeps between evaluations of its confidence sequence (JSON-safe via ``to_dict``).

    ``n``: the largest case count folded in. ``lower``/``upper``: the running
    intersection (on the verdict's scale). ``decision``: the standing decision,
    ``inconclusive`` while none. ``decided_at``: n when it was reached.
    ``restarts``: how often the intersection became empty and restarted.
    ``alpha``, ``expected_cases``, ``tolerance``: the settings it was built
    with; folding a look made with other settings is refused.
    """

    n: int
    lower: float
    upper: float
    decision: VerdictCode
    decided_at: int | None
    restarts: int
    alpha: float
    expected_cases: int
    tolerance: float

    def __post_init__(self) -> None:
        if self.decision not in VERDICT_CODES:
            raise ValueError(f"unknown decision {self.decision!r}")
        if not self.lower <= self.upper:
            raise ValueError("a stored intersection cannot be empty")
        if self.n < 0 or self.restarts < 0:
            raise ValueError("n and restarts cannot be negative")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SequenceState:
        decided = data.get("decided_at")
        return cls(
            n=int(data["n"]),
            lower=float(data["lower"]),
            upper=float(data["upper"]),
            decision=data["decision"],
            decided_at=None if decided is None else int(decided),
            restarts=int(data["restarts"]),
            alpha=float(data["alpha"]),
            expected_cases=int(data["expected_cases"]),
            tolerance=float(data["tolerance"]),
        )


@dataclass(frozen=True, slots=True)
class Fold:
    """The result of folding one look into a state."""

    state: SequenceState
    verdict: VerdictCode
    contradicted: bool


def fold(
    prior: SequenceState | None,
    *,
    n: int,
    lower: float,
    upper: float,
    parity: float,
    tolerance: float,
    min_cases: int,
    alpha: float,
    expected_cases: int,
) -> Fold:
    """Fold the current interval ``[lower, upper]`` at ``n`` cases into ``prior`` (None: no history)."""
    if prior is not None and (
        prior.alpha != alpha or prior.expected_cases != expected_cases or prior.tolerance != tolerance
    ):
        raise ValueError(
            "the stored sequence state was built with other settings "
            f"(alpha {prior.alpha}, expected_cases {prior.expected_cases}, tolerance {prior.tolerance})"
        )
    contradicted = False
    decision: VerdictCode
    if prior is None:
        lo, hi, decision, decided_at, restarts, seen = lower, upper, "inconclusive", None, 0, n
    else:
        lo, hi = max(prior.lower, lower), min(prior.upper, upper)
        decision, decided_at, restarts, seen = prior.decision, prior.decided_at, prior.restarts, max(prior.n, n)
        if lo > hi:
            contradicted = True
            lo, hi, decision, decided_at, restarts = lower, upper, "inconclusive", None, restarts + 1
    now = decide(lo, hi, n=seen, parity=parity, tolerance=tolerance, min_cases=min_cases)
    if now != decision:
        decision, decided_at = now, (None if now == "inconclusive" else n)
    state = SequenceState(seen, lo, hi, decision, decided_at, restarts, alpha, expected_cases, tolerance)
    return Fold(state, decision, contradicted)


def path(
    lower: ArrayLike,
    upper: ArrayLike,
    *,
    parity: float,
    tolerance: float,
    min_cases: int,
) -> tuple[NDArray[np.int8], NDArray[np.int64]]:
    """:func:`fold` applied to every look along the last axis, from no history.

    ``lower``/``upper`` have shape (..., T): the current interval after 1..T
    cases. Returns (verdict indices into ``VERDICT_CODES``, shape (..., T);
    restarts per row, shape (...)). Restarts are rare, so each round of the
    loop handles the next restart of the rows that have one.
    """
    lo_all = np.asarray(lower, dtype=np.float64)
    hi_all = np.asarray(upper, dtype=np.float64)
    shape = lo_all.shape
    t_len = shape[-1]
    lo2, hi2 = lo_all.reshape(-1, t_len), hi_all.reshape(-1, t_len)
    rows = lo2.shape[0]
    codes = np.full((rows, t_len), INCONCLUSIVE, dtype=np.int8)
    restarts = np.zeros(rows, dtype=np.int64)
    n = np.arange(1, t_len + 1)
    todo = np.arange(rows)
    start = np.zeros(rows, dtype=np.int64)
    while todo.size:
        s = start[todo][:, None]
        live = n[None, :] - 1 >= s
        if todo.size == rows and not start.any():  # the first round: every look is live
            run_lo = np.maximum.accumulate(lo2, axis=1)
            run_hi = np.minimum.accumulate(hi2, axis=1)
        else:
            run_lo = np.maximum.accumulate(np.where(live, lo2[todo], -np.inf), axis=1)
            run_hi = np.minimum.accumulate(np.where(live, hi2[todo], np.inf), axis=1)
        empty = run_lo > run_hi
        has_end = empty.any(axis=1)
        end = np.where(has_end, empty.argmax(axis=1), t_len)
        in_epoch = live & (n[None, :] - 1 < end[:, None])
        now = decide_index(run_lo, run_hi, n[None, :], parity=parity, tolerance=tolerance, min_cases=min_cases)
        block = codes[todo]
        block[in_epoch] = now[in_epoch]
        codes[todo] = block
        restarts[todo[has_end]] += 1
        start[todo[has_end]] = end[has_end]
        todo = todo[has_end]
    return codes.reshape(shape), restarts.reshape(shape[:-1])
