"""Seeded simulations shared by the statistics tests (vectorised with numpy).

The verdict path of a simulated trial is computed with the same pure functions
``policies.verdict.evaluate`` uses (``confseq.eb_radius`` through
``confseq.running_eb_bounds``, ``decision.decide_index`` and ``sequence.path``,
the array form of ``sequence.fold``); ``test_sequential`` checks the two agree
look by look.
"""

from __future__ import annotations

import numpy as np

from policies import confseq, sequence
from policies.decision import BETTER, REGRESSION

# Distinct case scores a simulated case can take (one judgment, or two when audited).
VALUES = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])


def simulate_case_scores(
    rng: np.random.Generator,
    trials: int,
    cases: int,
    *,
    win_rate: float,
    tie_share: float = 0.3,
    audit_share: float = 0.1,
) -> np.ndarray:
    """Case scores, shape (trials, cases).

    Each judgment is +1 with probability win_rate - tie_share / 2, 0 with
    tie_share, -1 otherwise, so the expected score is 2 * win_rate - 1. An
    ``audit_share`` of cases carries a second (swapped-order) judgment and
    scores the mean of the two.
    """
    p_plus = win_rate - tie_share / 2
    if not (0 <= p_plus and p_plus + tie_share <= 1):
        raise ValueError("inconsistent win_rate and tie_share")

    def judgments() -> np.ndarray:
        # +1 below p_plus, -1 from p_plus + tie_share, 0 between (one pass fewer than nested wheres).
        u = rng.random((trials, cases))
        out: np.ndarray = (u < p_plus).astype(np.float64) - (u >= p_plus + tie_share)
        return out

    first = judgments()
    second = judgments()
    audited = rng.random((trials, cases)) < audit_share
    return np.where(audited, (first + second) / 2, first)


def current_bounds(
    x: np.ndarray, *, alpha: float = 0.05, expected_cases: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """The confidence-sequence interval of each look alone, on the win-rate scale (``Evaluation.sequence_now``)."""
    lo, hi = confseq.running_eb_bounds(x, alpha=alpha, expected_cases=expected_cases)
    return (1 + np.maximum(-1.0, lo)) / 2, (1 + np.minimum(1.0, hi)) / 2


def verdict_path(
    x: np.ndarray, *, delta: float = 0.05, min_cases: int = 20, alpha: float = 0.05, expected_cases: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """(verdict indices after every case, restarts per trial), as ``evaluate`` threaded with its state."""
    wlo, whi = current_bounds(x, alpha=alpha, expected_cases=expected_cases)
    return sequence.path(wlo, whi, parity=0.5, tolerance=delta, min_cases=min_cases)


def sequence_verdicts(
    x: np.ndarray, *, delta: float = 0.05, min_cases: int = 20, alpha: float = 0.05, expected_cases: int = 1000
) -> tuple[np.ndarray, np.ndarray]:
    """(better, regression) boolean arrays after every case, as the trial shows them."""
    codes, _ = verdict_path(x, delta=delta, min_cases=min_cases, alpha=alpha, expected_cases=expected_cases)
    return codes == BETTER, codes == REGRESSION


def first_true(mask: np.ndarray) -> np.ndarray:
    """Per row, the 1-based case count of the first True, or 0 when none."""
    hit = mask.any(axis=-1)
    return np.where(hit, mask.argmax(axis=-1) + 1, 0)
