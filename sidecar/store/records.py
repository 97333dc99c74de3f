"""Plain records the store reads and writes. Content-free unless a field says so."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from sidecar.store.outbox import OutboxRecord as OutboxRecord  # re-exported: callers name it from here
from sidecar.store.watch_records import WatchStep

from sidecar.trial_words import TrialStatus as TrialStatus  # re-exported: callers name it from here
#: What a trial does once its verdict is decided (``on_decision``): ``stop`` ends it ``decided``
#: (nothing more is dispatched; its later cases count ``after_decision``), ``continue`` keeps
#: narrowing the bounds up to ``expected_cases``.
OnDecision = Literal["stop", "continue"]
ClaimOutcome = Literal["claimed", "duplicate", "not_running"]
CaseState = Literal["claimed", "reserved", "dispatched", "finished"]
LedgerKind = Literal["reserve", "top_up", "release", "charge", "hold_unknown"]

#: The funnel of DESIGN.md section 5, plus three ways a sampled case is shed
#: unrun, each counted, never silently lost:
#: ``shed_stopped`` — its trial or the process stopped before it ran (queued
#: items left when a drain deadline passed); ``shed_cap_busy`` — its
#: reservation did not fit while other cases held reservations, and no room
#: opened within the engine's wait bound (the trial keeps running);
#: ``not_at_site`` — the trial is pinned to another execution site and this
#: process has no sink for it (DESIGN.md rule 7: never run anywhere else);
#: ``shed_outbox_full`` — the uplink's outbox holds ``uplink.max_outbox_records``
#: undelivered records, so no new case is sampled (a recorded result is never dropped);
#: ``after_decision`` — its trial was decided and stops on a decision (``on_decision="stop"``):
#: nothing was dispatched for it (issue 26).
OUTCOMES: tuple[str, ...] = (
    "not_sampled",
    "skipped_redacted",
    "shed_queue_full",
    "shed_stopped",
    "shed_cap_busy",
    "shed_outbox_full",
    "not_at_site",
    "after_decision",
    "cap_reached",
    "candidate_failed",
    "judge_failed",
    "judged",
    "indeterminate",
)


def ended_outcome(status: str) -> str | None:
    """The funnel outcome of a case claimed for a trial in ``status`` (None: running, it runs)."""
    if status == "running":
        return None
    if status == "decided":
        return "after_decision"
    return "cap_reached" if status == "cap_reached" else "shed_stopped"


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
    #: Provider usage reports no call can have (above the call's worst case, or negative):
    #: charged at the worst case, never more, and counted here.
    disputed_calls: int = 0
    #: The statistics kept with the trial between reads, as JSON text (None until the first
    #: read): :class:`policies.sequence.SequenceState`, the verdict's running intersection, and
    #: :class:`policies.judge_health.JudgeHealthState`. :mod:`sidecar.trials.fold` folds them and
    #: ``save_states`` keeps them; the store never reads inside them.
    sequence_state: str | None = None
    judge_health_state: str | None = None
    #: Who started the trial: the subject (a token's ``sub``) of the principal that created it.
    #: None for trials created before it was recorded.
    started_by: str | None = None
    #: Raised by the store on every change of the trial's row (status, spend, kept statistics):
    #: with the funnel's total, it orders the uplink's ``trial_state`` records. Not part of a
    #: record's equality: two reads of the same facts compare equal whatever the count.
    state_revision: int = field(default=0, compare=False)
    #: Where its exchanges come from: ``live`` (the tap) or ``replay`` (the retention window,
    #: served between ``source_from`` and ``source_to``, epoch seconds, at most ``source_size``
    #: of them). A replay trial is never routed from the tap (:mod:`sidecar.ingest.routing`).
    source: str = "live"
    source_from: float | None = None
    source_to: float | None = None
    source_size: int | None = None
    #: A replay's progress (:mod:`sidecar.services.replay`): the retained ``seq`` it has fed
    #: through, and how many exchanges it handed to the engine.
    replay_cursor: int = 0
    replay_fed: int = 0
    #: What the row runs for: ``trial``, or ``watch`` — one UTC day of a watch's sentinel
    #: (:mod:`sidecar.store.watch_records`), whose ``cap_micros`` is that day's cap.
    kind: str = "trial"
    #: The watch a ``watch`` row belongs to; None for a trial.
    watch_id: str | None = None
    #: ``stop`` or ``continue`` once decided (:data:`OnDecision`); a watch's day row never stops.
    on_decision: str = "stop"
    #: The segments the trial is also read by (issue 27, :mod:`policies.segments`), as JSON
    #: text of a list (``[]``: none); how many segment values it tracks (the rest pooled as
    #: ``other``); and the judged cases per tracked value that sampling favours (None: none).
    segments: str = "[]"
    segment_cap: int = 16
    segment_min_cases: int | None = None


@dataclass(frozen=True, slots=True)
class KeptState:
    """A state to keep with a trial (``TrialStore.save_states``): compare-and-set, never backwards.

    ``text`` is the new state's JSON, folded over ``n`` (cases for the sequence,
    decisive judgments for judge health) from ``folded_from``: the stored text
    the caller read and folded into (None: nothing was stored). The store keeps
    ``text`` only if the stored text is still ``folded_from`` and the stored
    count is not above ``n``.
    """

    text: str
    n: int
    folded_from: str | None


@dataclass(frozen=True, slots=True)
class CaseStart:
    """A case being claimed by ``owner`` (a process of the fleet). Content-free;
    bodies are stored only when ``bodies_json`` is set."""

    case_id: str
    trial_id: str
    exchange_id: str
    owner: str
    incumbent_latency_ms: float | None
    incumbent_output_tokens: int | None
    incumbent_cost_micros: int
    incumbent_cost_coverage: str
    created_at: float
    bodies_json: str | None = None
    #: The case's (segment, value) pairs (:func:`policies.segments.segment_values`), content-free,
    #: and its trial's cap: the store maps them to tracked keys or ``other`` as it claims the case.
    segment_values: tuple[tuple[str, str], ...] = ()
    segment_cap: int = 16


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
    #: Moves a *running* trial to this status in the same transaction (e.g. "cap_reached").
    trial_status: str | None = None
    trial_status_reason: str | None = None
    #: What follows from the outcome, written in the same transaction (the post-finish hook).
    effects: tuple[Effect, ...] = ()
    #: Disputed usage reports among its calls (see ``TrialRecord.disputed_calls``).
    disputed_calls: int = 0
    #: What the case was started with, for its post-finish hooks (the store keeps them from
    #: the start): the exchange id and the incumbent's latency and cost.
    exchange_id: str = ""
    incumbent_latency_ms: float | None = None
    incumbent_cost_micros: int | None = None
    incumbent_cost_coverage: str = "unknown"


#: Everything a post-finish hook may ask the store to write with the outcome.
Effect = OutboxRecord | WatchStep


@dataclass(frozen=True, slots=True)
class ReserveResult:
    """What a conditional reservation did, and the figures it was decided on.

    The store applies ``spent + reserved + amount <= cap`` atomically; when it
    did not apply, the figures let :mod:`policies.spend` decide what follows.
    """

    applied: bool
    cap_micros: int
    spent_micros: int
    reserved_micros: int
    status: str


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One row of the spend ledger, in commit order (``seq``)."""

    seq: int
    trial_id: str
    case_id: str | None
    kind: str
    micros: int
    at: float


@dataclass(frozen=True, slots=True)
class TrialSnapshot:
    """A trial and every figure of its view, read in one transaction."""

    record: TrialRecord
    funnel: dict[str, int]
    score_counts: dict[float, int]
    case_states: dict[str, int]
    judgments: list[JudgmentRow]
    paired: dict[str, float | int | None]


@dataclass(frozen=True, slots=True)
class FoldInputs:
    """What the engine's fold of a trial reads (:meth:`ReadModel.fold_inputs`), in one transaction:
    the record, its score counts, and its first-slot counts — decisive primary judgments and
    those the answer shown first won — counted by the store rather than read one by one."""

    record: TrialRecord
    score_counts: dict[float, int]
    decisive: int
    first_slot_wins: int


@dataclass(frozen=True, slots=True)
class GatewayReport:
    """What one gateway's sidecar last reported for a team: its content-uplink setting."""

    gateway: str
    content_uplink: bool
    last_seen: float


@dataclass(frozen=True, slots=True)
class TeamPosture:
    """A team's stored posture (DESIGN.md section 9); ``revision`` counts its changes from 1."""

    team: str
    prompt_retention: bool
    cut_over: bool
    revision: int
    updated_at: float
    updated_by: str | None


@dataclass(frozen=True, slots=True)
class PostureWrite:
    """The answer of :meth:`~sidecar.store.base.PostureStore.put_posture`: whether it applied,
    the posture stored after (None: none is), and the trials it paused ``posture_changed``."""

    applied: bool
    posture: TeamPosture | None
    paused: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RetainedExchange:
    """A served exchange in the retention window (``RetentionStore``).

    ``sealed`` is the whole exchange, encrypted (:mod:`sidecar.seal`): the only
    field with content. The others are identities and times, to select a replay's window
    by: ``served_at`` (the gateway's time, else when the tap took it) and ``kept_at`` (when
    the tap took it: the window's age). ``seq`` is assigned by the store, in arrival order.
    """

    team: str
    exchange_id: str
    model: str
    gateway: str
    route: str | None
    served_at: float
    kept_at: float
    sealed: bytes
    seq: int = 0


@dataclass(frozen=True, slots=True)
class RetainResult:
    """What one ``retain`` did: exchanges kept, and evicted (oldest first) by reason."""

    kept: int
    evicted_age: int = 0
    evicted_count: int = 0
    evicted_bytes: int = 0


@dataclass(frozen=True, slots=True)
class RetainedSelection:
    """Which retained exchanges a replay reads: one team, served in ``[served_from, served_to)``,
    optionally one incumbent model, route and gateway; with ``kept_after``, only those kept at
    or after it (the window's age bound: an expired exchange is never read, evicted yet or not)."""

    team: str
    served_from: float
    served_to: float
    model: str | None = None
    route: str | None = None
    gateway: str | None = None
    kept_after: float | None = None


@dataclass(frozen=True, slots=True)
class TrialProgress:
    """A trial with its funnel and case states, read in one transaction: what a waiter for the
    trial's cases to finish needs, without the judgments a :class:`TrialSnapshot` reads (their
    cost grows with every judged case)."""

    record: TrialRecord
    funnel: dict[str, int]
    case_states: dict[str, int]
