"""Judge health of a trial as the admin API shows it (DESIGN.md section 7).

The figures are folded into the state kept with the trial by
:func:`sidecar.trials.fold.fold_trial`, so a flag, once raised, stands across reads
and restarts; this module only lays them out.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from policies.judge_health import JudgeHealth  # numpy: imported where a trial is folded


def judge_health_view(health: JudgeHealth) -> dict[str, Any]:
    """Every figure of :class:`~policies.judge_health.JudgeHealth`, ``state`` (what is kept) included."""
    return dataclasses.asdict(health)
