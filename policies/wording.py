"""What a verdict code reads as, in two tables that no function mixes.

Traffic evidence (trials, replay trials) may promote, so its words speak of
adoption. Corpus evidence (experiments) never may (product rule 6): its table
has no adoption words at all, so no argument to :func:`corpus_wording` can
produce "Adoptable". The tables are read-only mappings.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # a type only: policies.verdict brings numpy, which the wording does not need
    from policies.verdict import VerdictCode

ADOPTABLE = "Adoptable"
ADOPTED = "Adopted"

TRAFFIC_WORDING: Mapping[str, str] = MappingProxyType(
    {
        "candidate_better": ADOPTABLE,
        "equivalent": ADOPTABLE,
        "not_worse": ADOPTABLE,
        "regression": "Rejected",
        "inconclusive": "Collecting",
    }
)
TRAFFIC_ENDED_INCONCLUSIVE = "Inconclusive"
#: A paused trial (``starter_unauthorized``, ``posture_changed``) reads this, never "Inconclusive":
#: it is neither running nor ended (issue 26, item 4).
PAUSED = "Paused"
PAUSED_STATUSES: tuple[str, ...] = ("starter_unauthorized", "posture_changed")

CORPUS_WORDING: Mapping[str, str] = MappingProxyType(
    {
        "candidate_better": "Candidate ahead",
        "equivalent": "Parity",
        # Corpus results never carry this code (policies.corpus_verdict); worded for completeness.
        "not_worse": "Not behind",
        "regression": "Candidate behind",
        "inconclusive": "Inconclusive",
    }
)


def _check(code: str) -> None:
    if code not in TRAFFIC_WORDING:
        raise ValueError(f"unknown verdict code {code!r}")


def is_adoptable(code: VerdictCode) -> bool:
    """Whether a *traffic* verdict allows promotion (better, equivalent or not worse)."""
    _check(code)
    return TRAFFIC_WORDING[code] == ADOPTABLE


def traffic_wording(code: VerdictCode, *, ended: bool, promoted: bool) -> str:
    """The label of a traffic verdict.

    ``promoted`` wins: a promoted trial reads "Adopted" (promotion is a fact of
    the trial, and only an Adoptable verdict could have been promoted). An
    inconclusive trial reads "Collecting" while running and "Inconclusive"
    once ``ended``.
    """
    _check(code)
    if promoted:
        return ADOPTED
    if code == "inconclusive" and ended:
        return TRAFFIC_ENDED_INCONCLUSIVE
    return TRAFFIC_WORDING[code]


def trial_status_wording(code: VerdictCode, *, status: str) -> str:
    """The label of a trial's traffic verdict given its ``status``: "Paused" while paused,
    "Adopted" once adopted, else :func:`traffic_wording` (ended unless ``running``; a
    ``decided`` trial reads its decided verdict)."""
    _check(code)
    if status in PAUSED_STATUSES:
        return PAUSED
    return traffic_wording(code, ended=status != "running", promoted=status == "adopted")


def corpus_wording(code: VerdictCode) -> str:
    """The label of a corpus (experiment) verdict; never an adoption word."""
    _check(code)
    return CORPUS_WORDING[code]
