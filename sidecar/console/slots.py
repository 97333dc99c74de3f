"""Actions a page offers, as slots: whether the button is shown, and when not, why.

A slot's decision is the API's own: the Promote slot asks :func:`policies.promotion.refusal`
(the pure rule :class:`~sidecar.services.promotion.PromotionService` applies) and the
role check (:func:`policies.roles.decide`), so the console offers Promote exactly where
``POST /v1/trials/{id}/promote`` would accept it, and shows the API's refusal otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.promotion import refusal
from policies.roles import Principal, decide
from sidecar.services.promotion import REFUSAL_WORDS


@dataclass(frozen=True, slots=True)
class Slot:
    """``offered``: the button is shown and posts to ``action``; otherwise ``reason`` is shown."""

    label: str
    offered: bool
    reason: str | None = None
    action: str | None = None
    code: str | None = None


def promote_slot(principal: Principal, trial: dict[str, Any], prefix: str = "/console") -> Slot:
    """The Promote button of a trial's page (``trial``: the API's trial view)."""
    if decide(principal, trial["team"], "write") != "allow":
        return Slot("Promote", offered=False, reason="your roles may read this trial but not promote it",
                    code="forbidden")
    verdict = trial["verdict"]
    why = refusal(evidence=str(verdict.get("evidence", "traffic")), status=trial["status"], verdict=verdict["code"])
    if why is not None:
        return Slot("Promote", offered=False, reason=f"Promotion refused: {REFUSAL_WORDS[why]}.", code=why)
    return Slot("Promote", offered=True, action=f"{prefix}/trials/{trial['id']}/promote")
