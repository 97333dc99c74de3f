"""Actions whose API has not landed in this sidecar yet, as slots a page renders.

A slot says whether its button is offered, and when not, why — the refusal the API
would give. Wiring a new API in is one function: make it return an offered
:class:`Slot` with the action's URL where the API would allow it, and the refusal's
message otherwise; the templates already render both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from policies.roles import Principal


@dataclass(frozen=True, slots=True)
class Slot:
    """``offered``: the button is shown and posts to ``action``; otherwise ``reason`` is shown."""

    label: str
    offered: bool
    reason: str | None = None
    action: str | None = None


def promote_slot(principal: Principal, trial: dict[str, Any]) -> Slot:
    """The Promote button of a trial's page. Promotion (``POST /v1/trials/{id}/promote``) is
    not part of this sidecar yet, so the slot shows why it is not offered."""
    del principal, trial  # read once promotion's service lands: its refusal reasons decide
    return Slot("Promote", offered=False,
                reason="Promotion is not available yet: this sidecar has no promotion API (POST /v1/trials/{id}/promote).")
