"""The watch detector on the e2e test's scenario, simulated many times (seeded).

tests/sidecar/services/test_watches.py runs one watch end to end with the fake provider: the replaced
model (quality 0.5 ± 0.05) against the new incumbent's served answers of quality 0.6, then 0.4
(the fake judge ties a gap under 0.05). Per judged case that gives, from the normal law:

    steady:  old wins 0.13%, tie 15.7%, new wins 84.1%
    drop:    old wins 84.1%, tie 15.7%, new wins 0.13%

This script runs the same detector (:func:`policies.cusum.design` for the baseline the test's
promotion gives, 0.01, min 30 judged) over ``RUNS`` simulated watches: false alarms over 2,000
steady judged cases, then judged cases from the drop to the alarm. Run:

    .venv/bin/python bench/watch_detection.py [--quick]

``--quick`` simulates 50 watches over 500 steady judged cases each (``make test`` runs it so): its
figures are not for reading.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from policies import cusum  # noqa: E402

RUNS = 2_000
STEADY = 2_000
P_STEADY = (0.00135, 0.1573)  # (old wins, tie)
P_DROP = (0.8413, 0.1573)


def draw(rng: np.random.Generator, n: int, p: tuple[float, float]) -> list[cusum.Observation]:
    u = rng.random(n)
    return ["old_wins" if x < p[0] else "tie" if x < p[0] + p[1] else "new_wins" for x in u]


def main() -> None:
    quick = "--quick" in sys.argv[1:]
    runs, steady = (50, 500) if quick else (RUNS, STEADY)
    rng = np.random.default_rng(20261130)
    for baseline in (0.01, 0.05):
        d = cusum.design(baseline)
        false_alarms = 0
        delays: list[int] = []
        for _ in range(runs):
            state = cusum.run(d, cusum.CusumState(), draw(rng, steady, P_STEADY))
            if state.fired:
                false_alarms += 1
                continue
            n = 0
            while not state.fired:
                state = cusum.step(d, state, draw(rng, 1, P_DROP)[0])
                n += 1
            delays.append(n)
        q = np.percentile(delays, [50, 95, 100])
        print(f"baseline p0={baseline}: p1={d.alternative:.2f}, threshold {d.threshold_llr:.3f} "
              f"({d.threshold} units), min_judged {d.min_judged}, ARL0 {d.arl0:.0f} decisive; "
              f"{runs} watches: false alarms over {steady} steady judged cases {false_alarms} "
              f"({false_alarms / runs:.2%}); judged cases from the drop to the alarm: median {q[0]:.0f}, "
              f"95th pct {q[1]:.0f}, max {q[2]:.0f}")


if __name__ == "__main__":
    main()
