"""The watch detector: a one-sided Bernoulli CUSUM on "old model wins".

After a promotion, the replaced model keeps answering a small sample of traffic
as a sentinel, judged against the new incumbent's served answers. Each judged
case is an observation: ``old_wins``, ``new_wins`` or ``tie``. Ties count as
judged cases but carry no information about who is better and leave the
statistic unchanged; the detector's clock is the *decisive* (non-tie) judgments.

In control the old model wins a decisive judgment with probability p0; the
detector looks for p1 = p0 + shift (default 0.10). p0 is not known: it is
estimated from the promotion trial, which stopped *because* the candidate
looked good, after only a couple of hundred decisive judgments, so the plain
share of old-model wins is noisy (and a little low). A detector designed for a
too-low p0 alarms far too often: designed for 0.30 and run at a true 0.357, its
mean run length is 509, not 10,000; with the plain share, 31% of watches raised
a false alarm within 1,000 decisive judgments against 9% with the true p0.
:func:`baseline_from_promotion` therefore designs for a *conservative* p0: the
share plus ``z`` (default 1.0) standard errors, rounded up to 0.01. It is a
calibrated, not a guaranteed, bound (an anytime-valid bound at this sample
size is so wide, about +0.12, that the detector could no longer see a 0.10
rise); its false-alarm rate is measured by simulating the whole chain,
promotion trial stopped at its decision -> watch (docs/statistics.md).
Page's CUSUM accumulates the log-likelihood
ratio of each decisive judgment,

    old wins: log(p1 / p0)         new wins: log((1 - p1) / (1 - p0)),

as S_t = max(0, S_{t-1} + llr_t), and alarms when S_t >= h, but never before
``min_judged`` (default 30) judged cases.

The increments are rounded to a lattice (``unit``; ``up`` and ``down`` steps)
so the statistic is an integer: stored state is exact, and the in-control
average run length (ARL0) of the detector *as run* is computed exactly by
solving the Markov chain on the lattice. :func:`design` picks the smallest
threshold whose ARL0 (in decisive judgments, ignoring the minimum, which only
delays alarms) is at least ``target_arl0`` (default 10,000). Counting ties too,
the false-alarm interval in judgments is longer still.

A fired detector stays fired: further observations are counted but change
neither the statistic nor ``fired_at``. Re-arming is a new state.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np

Observation = Literal["old_wins", "new_wins", "tie"]


@dataclass(frozen=True, slots=True)
class CusumDesign:
    """The detector's fixed parameters (stored with the watch)."""

    baseline: float
    alternative: float
    unit: float
    up: int
    down: int
    threshold: int
    min_judged: int
    arl0: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CusumDesign:
        return cls(
            baseline=float(data["baseline"]),
            alternative=float(data["alternative"]),
            unit=float(data["unit"]),
            up=int(data["up"]),
            down=int(data["down"]),
            threshold=int(data["threshold"]),
            min_judged=int(data["min_judged"]),
            arl0=float(data["arl0"]),
        )

    @property
    def threshold_llr(self) -> float:
        """The threshold h in log-likelihood-ratio units."""
        return self.threshold * self.unit


@dataclass(frozen=True, slots=True)
class CusumState:
    """The detector's running state: small, integer, storable and resumable.

    ``statistic`` is S_t in lattice units; ``judged`` counts every observation
    (ties included); ``decisive`` the non-tie ones; ``fired_at`` is the
    ``judged`` count at the alarm, or None.
    """

    statistic: int = 0
    judged: int = 0
    decisive: int = 0
    fired_at: int | None = None

    @property
    def fired(self) -> bool:
        return self.fired_at is not None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CusumState:
        fired = data.get("fired_at")
        return cls(
            statistic=int(data["statistic"]),
            judged=int(data["judged"]),
            decisive=int(data["decisive"]),
            fired_at=None if fired is None else int(fired),
        )


#: The largest baseline a detector is designed for: its alternative p0 + 0.10 must stay below 1.
MAX_BASELINE = 0.89
#: The one-sided confidence of the baseline's upper bound.
BASELINE_CONFIDENCE = 0.95
#: The horizon of the false-alarm figure a watch displays, in decisive judgments.
FALSE_ALARM_HORIZON = 1_000


def baseline_from_promotion(incumbent_wins: int, candidate_wins: int, *,
                            confidence: float = BASELINE_CONFIDENCE) -> float:
    """p0 for the watch: an upper confidence bound of the replaced incumbent's share of decisive wins.

    Pass the promotion trial's decisive *primary* judgments (audits repeat a case). The result
    is the one-sided ``confidence`` Wilson score upper bound of the share, rounded up to a
    multiple of 0.01 and capped only at :data:`MAX_BASELINE` (issue 23: no floor that puts a
    trial with no incumbent win at 0.01, no cap at parity that hides an old model slightly
    better than the new one); with no decisive judgment, 0.5.
    """
    total = incumbent_wins + candidate_wins
    if incumbent_wins < 0 or candidate_wins < 0:
        raise ValueError("win counts cannot be negative")
    if not 0.5 <= confidence < 1:
        raise ValueError("confidence must be in [0.5, 1)")
    if total == 0:
        return 0.5
    z = statistics.NormalDist().inv_cdf(confidence)
    share = incumbent_wins / total
    z2n = z * z / total
    upper = (share + z2n / 2 + z * math.sqrt(share * (1 - share) / total + z2n / (4 * total))) / (1 + z2n)
    return min(MAX_BASELINE, math.ceil(upper * 100.0 - 1e-9) / 100.0)


@functools.lru_cache(maxsize=256)
def false_alarm_within(design_: CusumDesign, p: float, horizon: int = FALSE_ALARM_HORIZON) -> float:
    """The exact chance that the detector as run alarms within ``horizon`` decisive judgments when
    the old model wins each with probability ``p`` (the minimum-cases rule ignored: it can only
    delay an alarm, so this is an upper bound)."""
    h = design_.threshold
    if h <= 0:
        return 1.0
    dist = np.zeros(h)
    dist[0] = 1.0
    fired = 0.0
    for _ in range(horizon):
        nxt = np.zeros(h)
        # up: state i -> i + up (fires at >= h); down: i -> max(0, i - down)
        if design_.up < h:
            nxt[design_.up:] += p * dist[: h - design_.up]
        fired += p * float(dist[h - design_.up:].sum()) if design_.up < h else p * float(dist.sum())
        nxt[0] += (1 - p) * float(dist[: design_.down + 1].sum())
        nxt[1: h - design_.down] += (1 - p) * dist[design_.down + 1:]
        dist = nxt
    return min(1.0, fired)


def displayed_false_alarm(design_: CusumDesign, *, confidence: float = BASELINE_CONFIDENCE,
                          horizon: int = FALSE_ALARM_HORIZON) -> float:
    """The false-alarm chance within ``horizon`` decisive judgments a watch displays: the detector's
    own chance at its baseline, plus the chance (1 - ``confidence``) that the baseline's upper
    bound fell below the truth. When the true share is at most the baseline the detector alarms
    no more often than at the baseline (its statistic drifts down faster), so this bounds the
    watch's real chance (the promotion trial's stopping aside; docs/statistics.md measures it)."""
    return min(1.0, false_alarm_within(design_, design_.baseline, horizon) + (1 - confidence))


def _steps(p0: float, p1: float, resolution: int) -> tuple[float, int, int]:
    a = math.log(p1 / p0)
    b = -math.log((1 - p1) / (1 - p0))
    unit = (a + b) / resolution
    return unit, max(1, round(a / unit)), max(1, round(b / unit))


def average_run_length(up: int, down: int, threshold: int, p: float) -> float:
    """Exact mean number of decisive judgments to an alarm, from a zero statistic.

    ``p`` is the probability that the old model wins a decisive judgment. The
    minimum-cases rule is not included (it can only lengthen a run).
    """
    if threshold <= 0:
        return 1.0
    h = threshold
    idx = np.arange(h)
    q = np.zeros((h, h))
    upto = idx + up
    stay = upto < h
    q[idx[stay], upto[stay]] += p
    q[idx, np.maximum(0, idx - down)] += 1 - p
    arl = np.linalg.solve(np.eye(h) - q, np.ones(h))
    return float(arl[0])


def design(
    baseline: float,
    *,
    shift: float = 0.10,
    target_arl0: float = 10_000,
    min_judged: int = 30,
    resolution: int = 40,
) -> CusumDesign:
    """Design a detector for p0 = ``baseline`` against p0 + ``shift``."""
    p0 = baseline
    p1 = p0 + shift
    if not 0 < p0 < p1 < 1:
        raise ValueError("need 0 < baseline < baseline + shift < 1")
    if target_arl0 <= 1:
        raise ValueError("target_arl0 must exceed 1")
    unit, up, down = _steps(p0, p1, resolution)

    known: dict[int, float] = {}

    def arl(h: int) -> float:
        if h not in known:
            known[h] = average_run_length(up, down, h, p0)
        return known[h]

    hi = up
    while arl(hi) < target_arl0:
        hi *= 2
    lo = 0  # arl(lo) < target (or lo is the trivial threshold)
    # The run length grows about exponentially in h, so interpolating log ARL finds the
    # smallest threshold in a few solves; bisection steps keep the bracket shrinking.
    interpolate = True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if interpolate and lo > 0:
            a, b = math.log(arl(lo)), math.log(arl(hi))
            guess = lo + (math.log(target_arl0) - a) * (hi - lo) / (b - a) if b > a else mid
            mid = min(hi - 1, max(lo + 1, round(guess)))
        interpolate = not interpolate
        if arl(mid) >= target_arl0:
            hi = mid
        else:
            lo = mid
    return CusumDesign(p0, p1, unit, up, down, hi, min_judged, arl(hi))


def step(design_: CusumDesign, state: CusumState, observation: Observation) -> CusumState:
    """The state after one more judged case."""
    if observation not in ("old_wins", "new_wins", "tie"):
        raise ValueError(f"unknown observation {observation!r}")
    judged = state.judged + 1
    decisive = state.decisive + (observation != "tie")
    if state.fired:
        return CusumState(state.statistic, judged, decisive, state.fired_at)
    if observation == "old_wins":
        stat = state.statistic + design_.up
    elif observation == "new_wins":
        stat = max(0, state.statistic - design_.down)
    else:
        stat = state.statistic
    fired = judged if (stat >= design_.threshold and judged >= design_.min_judged) else None
    return CusumState(stat, judged, decisive, fired)


def run(design_: CusumDesign, state: CusumState, observations: Iterable[Observation]) -> CusumState:
    """Apply :func:`step` to each observation in order."""
    for obs in observations:
        state = step(design_, state, obs)
    return state


def statistic_path(
    design_: CusumDesign, observations: Iterable[Observation], *, points: int = 120,
) -> list[tuple[int, float]]:
    """The detector's statistic (log-likelihood-ratio units) after each judged case, as
    ``(judged, statistic)`` at up to ``points`` evenly spaced counts, the last included:
    :func:`run` one step at a time, for charting its history."""
    state, path = CusumState(), []
    for obs in observations:
        state = step(design_, state, obs)
        path.append((state.judged, state.statistic * design_.unit))
    if len(path) <= points:
        return path
    last = len(path) - 1
    picks = sorted({round(i * last / (points - 1)) for i in range(points)})
    return [path[i] for i in picks]
