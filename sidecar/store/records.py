"""Plain records the store reads and writes. Content-free unless a field says so."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TrialStatus = Literal["running", "cap_reached", "stopped", "posture_changed"]
ReserveOutcome = Literal["reserved", "duplicate", "cap_reached", "not_running"]

#: The funnel of DESIGN.md section 5, plus ``shed_stopped`` (the engine's name)
#: for jobs dropped unrun because their trial or the process stopped — queued
#: items left when a drain deadline passed (never dispatched, never silently lost).
OUTCOMES: tuple[str, ...] = (
    "not_sampled",
    "skipped_redacted",
    "shed_queue_full",
    "shed_stopped",
    "cap_reached",
    "candidate_failed",
    "judge_failed",
    "judged",
    "indeterminate",
)


@dataclass(frozen=True, slots=True)
class TrialRecord:
    id: str
    team: str
    incumbent_model: str
    candidate_model: str
    route: str | None
    gateway: str | None
    sample_rate: float
    cap_micros: int
    expected_cases: int
    delta: float
    min_cases: int
    audit_share: float
    candidate_max_tokens: int
    #: Prices pinned at creation, micro-dollars per million tokens.
    candidate_price_in: int
    candidate_price_out: int
    judge_price_in: int
    judge_price_out: int
    incumbent_price_in: int | None
    incumbent_price_out: int | None
    judge_model: str
    judge_version_id: str
    judge_version_name: str
    judge_spec_json: str
    execution_site: str
    prompt_retention: bool
    created_at: float
    status: TrialStatus = "running"
    status_reason: str | None = None
    ended_at: float | None = None
    spent_micros: int = 0
    known_micros: int = 0
    reserved_micros: int = 0
    unknown_calls: int = 0
    priced_calls: int = 0


@dataclass(frozen=True, slots=True)
class CaseStart:
    """A case about to be reserved. Bodies are stored only when ``bodies`` is set."""

    case_id: str
    trial_id: str
    exchange_id: str
    reserve_micros: int
    incumbent_latency_ms: float | None
    incumbent_output_tokens: int | None
    incumbent_cost_micros: int
    incumbent_cost_coverage: str
    created_at: float
    bodies_json: str | None = None


@dataclass(frozen=True, slots=True)
class JudgmentRow:
    judgment_id: str
    case_id: str
    trial_id: str
    judge_version_id: str
    order: str  # "incumbent_first" | "candidate_first"
    is_audit: bool
    outcome: str  # "verdict" | "error"
    score: int | None
    strong: bool
    winner_slot: str | None  # "A" | "B" | None (tie or error)
    error: str | None
    longer_won: bool | None
    created_at: float


@dataclass(frozen=True, slots=True)
class CaseFinish:
    """How a reserved case ended. ``charged_micros`` is what counts against the cap:
    the known cost plus, for calls whose cost is unknown, their held worst case."""

    case_id: str
    trial_id: str
    outcome: str
    charged_micros: int
    known_micros: int
    unknown_calls: int
    priced_calls: int
    candidate_cost_micros: int | None
    candidate_cost_coverage: str
    judge_cost_micros: int | None
    judge_cost_coverage: str
    candidate_latency_ms: float | None
    candidate_output_tokens: int | None
    score: float | None
    error: str | None
    finished_at: float
    judgments: list[JudgmentRow] = field(default_factory=list)
    #: Keep the answers with the case (prompt retention on); None drops bodies.
    bodies_json: str | None = None
    #: Sets the trial's status in the same transaction (e.g. "cap_reached").
    trial_status: str | None = None


@dataclass(frozen=True, slots=True)
class TrialSnapshot:
    """A trial and every figure of its view, read in one transaction."""

    record: TrialRecord
    funnel: dict[str, int]
    score_counts: dict[float, int]
    case_states: dict[str, int]
    judgments: list[JudgmentRow]
    paired: dict[str, float | int | None]
