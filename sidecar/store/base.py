"""The store contract: four narrow protocols, one conformance suite.

The store *applies* numbers and decides nothing: every rule (what fits under a
cap, what a case is charged, when a trial is exhausted) lives in
:mod:`policies`. Each method is one transaction. No method takes a callback or
runs caller code on the store's own thread. Implementations: SQLite (the
embedded default, :mod:`sidecar.store.sqlite`) and PostgreSQL for fleets
(:mod:`sidecar.store.postgres`); ``tests/store/`` runs the same conformance
suite against both.

Ownership and leases. Each process of a fleet is an *owner* with a lease it
renews (:meth:`CaseLedger.heartbeat`). Every case in flight (claimed,
reserved, dispatched) belongs to one owner. Recovery
(:meth:`CaseLedger.recover_expired`) touches only cases whose owner's lease
has expired — never a live peer's — and marks them ``indeterminate``: a case
that never dispatched gets its reservation released; one that did keeps it
charged as unknown spend (its call may have been billed). Nothing is re-run.
A finish or dispatch mark from an owner whose case was already recovered
changes nothing and returns False.

The cap. :meth:`CaseLedger.reserve` is one conditional update: it adds
``amount`` to the trial's reservation only if the trial is running and
``spent + reserved + amount <= cap``. :meth:`CaseLedger.finish_case` releases
the case's whole reservation and charges ``charged_micros``, which the caller
guarantees is at most what the case reserved; implementations also refuse, as
a constraint, any row where ``spent + reserved > cap``. So the cap is never
passed at any moment, whatever the interleaving of processes.
"""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

from sidecar.store.records import (
    CaseFinish,
    CaseStart,
    ClaimOutcome,
    FoldInputs,
    KeptState,
    LedgerEntry,
    GatewayReport,
    LedgerKind,
    OutboxRecord,
    PostureWrite,
    RetainedExchange,
    RetainedSelection,
    RetainResult,
    ReserveResult,
    TeamPosture,
    TrialRecord,
    TrialProgress,
    TrialSnapshot,
)
from sidecar.store.segments_sql import SegmentCase
from sidecar.store.watch_records import AlertRow, AlertTransition, PromoteResult, PromotionRecord, WatchRecord


class TrialStore(Protocol):
    async def create_trial(
        self, trial: TrialRecord, *, idempotency_key: str | None = None, body_hash: str | None = None,
        effects: Sequence[OutboxRecord] = (),
    ) -> TrialRecord:
        """Insert ``trial``; with a key, return the trial first created under it
        (raise ``IdempotencyConflict`` if the key came with another body).
        ``effects`` are written to the outbox in the same transaction, only when
        the trial is inserted now (not for a repeated key)."""
        ...

    async def get_trial(self, trial_id: str) -> TrialRecord | None: ...

    async def list_trials(
        self, *, teams: Sequence[str] | None = None, status: str | None = None, kind: str | None = None
    ) -> list[TrialRecord]:
        """Newest first; ``kind`` (``trial``, ``watch``) keeps rows of that kind only."""
        ...

    async def set_trial_status(
        self, trial_id: str, status: str, reason: str | None, *, ended: bool, now: float,
        effects: Sequence[OutboxRecord] = (),
    ) -> tuple[TrialRecord | None, bool]:
        """Conditional: changes nothing when the trial already has ``status``, or is ``adopted``
        (a promotion's mark is final).
        Returns (record after, changed); (None, False) for an unknown trial.
        ``effects`` are written to the outbox in the same transaction, only when it changed."""
        ...

    async def decide_trial(
        self, trial_id: str, reason: str, *, now: float, effects: Sequence[OutboxRecord] = ()
    ) -> TrialRecord | None:
        """Conditional: a ``running`` trial ends ``decided`` (it stops on its decision). Returns the
        record after, or None when it was not running (nothing changed). ``effects`` are written to
        the outbox in the same transaction, only when it changed."""
        ...

    async def resume_trial(
        self, trial_id: str, *, paused: Sequence[str], started_by: str | None,
        execution_site: str | None = None, prompt_retention: bool | None = None,
        effects: Sequence[OutboxRecord] = (), now: float = 0.0,
    ) -> tuple[TrialRecord | None, bool]:
        """Conditional: a trial in one of the ``paused`` statuses runs again, its status reason
        cleared and ``started_by`` set (the resumer takes the trial on); ``execution_site`` and
        ``prompt_retention``, when given, are pinned anew in the same update. Returns (record
        after, changed); (None, False) for an unknown trial. ``effects`` are written to the
        outbox (at ``now``) in the same transaction, only when it changed."""
        ...

    async def save_states(
        self, trial_id: str, *, sequence: KeptState | None = None, judge_health: KeptState | None = None
    ) -> TrialRecord | None:
        """Keep the statistics folded on a read (see :class:`~sidecar.store.records.KeptState`), in one transaction.

        Each state is a conditional update of its own: it replaces the stored
        one only if that is still the text the caller folded from *and* was
        folded over no more cases. So a state folded over more cases is never
        replaced by one folded over fewer, and a writer that read before
        another writer's save cannot drop the looks that writer folded in (two
        admin reads at once, the engine and a read, or two sidecars of a fleet).
        ``None`` leaves that state as it is. Returns the record after the
        update, whose states are what is kept now (a caller whose state was
        refused folds again from those); None for an unknown trial."""
        ...

    async def scores_after(self, trial_id: str, after: int, limit: int = 100_000) -> list[tuple[int, float]]:
        """Up to ``limit`` scored cases of the trial numbered after ``after`` in its scoring
        sequence, as (number, score) in that order (issue 31: the betting fold's input). The
        numbers are given in the transaction that scores a case, commit in order, and have no gaps."""
        ...


class CaseLedger(Protocol):
    async def claim_case(self, case: CaseStart) -> ClaimOutcome:
        """Insert the case as ``claimed`` by ``case.owner``, if its trial is running.

        If the trial has ended, the case is recorded at once as finished with
        :func:`~sidecar.store.records.ended_outcome` (``cap_reached`` or
        ``shed_stopped``), counted, and ``not_running`` returned: so a
        re-delivery of it is a duplicate too, and counts nothing.

        A second claim of the same (trial, exchange) — a re-delivery, on this
        process or another — is ``duplicate`` and changes nothing, even when the
        trial has ended since (the first claim already has its outcome)."""
        ...

    async def reserve(self, trial_id: str, case_id: str, micros: int, *, kind: LedgerKind, at: float) -> ReserveResult:
        """Add ``micros`` to the case's and the trial's reservation if the trial is
        running and it fits under the cap; ledger row ``kind`` (reserve | top_up).
        A ``claimed`` case becomes ``reserved``."""
        ...

    async def mark_dispatched(self, case_id: str, owner: str) -> bool: ...

    async def claim_and_reserve(self, case: CaseStart, micros: int, *, at: float) -> tuple[ClaimOutcome, bool]:
        """:meth:`claim_case`, then — if claimed — :meth:`reserve` ``micros`` (``reserve``) and, if
        that applied, :meth:`mark_dispatched`: what a case does before its candidate call, in one
        write where the store can (SQLite: one transaction, so the cap's check is still its one
        conditional update). Returns the claim's outcome and whether the case is reserved and
        dispatched; a claimed case whose reservation did not apply is left ``claimed``."""
        ...

    async def finish_case(self, finish: CaseFinish, owner: str) -> bool:
        """Record the outcome, release the reservation, charge, count the funnel
        outcome, write judgments and ``finish.effects``, and apply
        ``finish.trial_status`` to a running trial: one transaction. False (and
        nothing written) when the case is finished already or is not ``owner``'s."""
        ...

    async def heartbeat(self, owner: str, *, now: float, lease_s: float) -> None:
        """Create or renew ``owner``'s lease until ``now + lease_s``."""
        ...

    async def recover_expired(self, now: float, *, report: bool = False, alive: str = "") -> list[str]:
        """Mark ``indeterminate`` the unfinished cases of every owner whose lease
        ended before ``now``; forget those owners. Returns the case ids. ``report``:
        write each one's ``case_result`` outbox record (:mod:`sidecar.store.reports`)
        in the same transaction, as the post-finish hook does for a finished case.
        ``alive``: the sweeping process's own owner, never recovered whatever its lease
        says (a loop stalled past its lease is late, not dead; its next heartbeat renews it)."""
        ...

    async def retire(self, owner: str, now: float, *, report: bool = False) -> list[str]:
        """An orderly stop: mark ``owner``'s unfinished cases ``indeterminate`` at
        once (no lease wait) and end its lease. Returns the case ids. ``report``: as
        for :meth:`recover_expired`."""
        ...


class PostureStore(Protocol):
    """Teams' posture (DESIGN.md section 9): a stored row per team (retention, cut-over, a
    revision counting its changes) and each gateway's content-uplink report per team, with
    the time it was last heard. The store keeps the facts; the site is decided by
    :func:`policies.posture.posture_site` and handed in, and a trial is paused exactly when
    :func:`policies.posture.needs_pause` says so (the same comparison, in SQL)."""

    async def get_posture(self, team: str) -> TeamPosture | None:
        """The team's stored posture; None when none was ever stored or seeded."""
        ...

    async def seed_posture(self, team: str, *, prompt_retention: bool, cut_over: bool, now: float) -> bool:
        """Store the posture at revision 1 only if the team has none; True if it was stored."""
        ...

    async def put_posture(
        self, team: str, *, prompt_retention: bool, cut_over: bool, expected_revision: int | None,
        site: str, now: float, by: str | None, reason: str, effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> PostureWrite:
        """Set the team's posture and, in the same transaction, pause ``posture_changed`` (with
        ``reason``) each running trial of the team whose pinned site is not ``site`` or whose
        pinned retention is not ``prompt_retention``; ``effects[trial_id]`` are written to the
        outbox, in the same transaction, for each trial paused now.

        ``expected_revision``: None writes unconditionally; 0 writes only if the team has no
        stored posture; n writes only if the stored revision is n. A mismatch writes nothing
        and answers ``applied=False`` with the posture stored now. The same values as stored
        keep the revision (an idempotent write); a change adds one."""
        ...

    async def report_uplink(self, team: str, gateway: str, *, content_uplink: bool, now: float) -> None:
        """Record ``gateway``'s content-uplink setting for ``team``, heard at ``now``."""
        ...

    async def gateway_reports(self, team: str) -> list[GatewayReport]:
        """Every gateway report of the team, by gateway name (stale ones too: the caller decides)."""
        ...

    async def pause_mismatched(
        self, team: str, *, site: str, prompt_retention: bool, reason: str, now: float,
        effects: Mapping[str, Sequence[OutboxRecord]] | None = None,
    ) -> list[str]:
        """Pause ``posture_changed`` each running trial of ``team`` whose pinned site is not
        ``site`` or whose pinned retention is not ``prompt_retention``; their ids.
        ``effects[trial_id]`` are written to the outbox for each trial paused now."""
        ...


class FunnelStore(Protocol):
    async def count_outcomes(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Add funnel counts for outcomes that never claimed a case, keyed by (trial id, outcome)."""
        ...


class ReadModel(Protocol):
    async def snapshot(self, trial_id: str) -> TrialSnapshot | None:
        """The trial and all its figures from one consistent read."""
        ...

    async def fold_inputs(self, trial_id: str) -> FoldInputs | None:
        """The trial, its score counts and its first-slot counts from one consistent read:
        what folding it needs, at a cost that does not grow with its judgments in Python."""
        ...

    async def score_counts(self, trial_id: str) -> dict[float, int]: ...

    async def segment_cases(self, trial_id: str) -> list[SegmentCase]:
        """The trial's scored cases in scoring order, with their segment keys and paired figures."""
        ...

    async def tracked_segments(self, trial_id: str) -> list[tuple[str, str, str]]:
        """The segment values the trial tracks, as (key, segment, value), first tracked first."""
        ...

    async def judged_keys(self, trial_id: str) -> dict[str, int]:
        """Judged cases per segment key (``other`` included)."""
        ...

    async def progress(self, trial_id: str) -> TrialProgress | None:
        """The trial, its funnel and its case states from one consistent read (no judgments)."""
        ...

    async def total_spend(self, *, teams: Sequence[str] | None = None) -> dict[str, int]:
        """Sums over trials: ``spent``, ``known``, ``reserved``, ``unknown_calls``."""
        ...

    async def ledger(self, trial_id: str) -> list[LedgerEntry]:
        """The trial's spend ledger in commit order, for audits and replays."""
        ...

    async def cases(self, trial_id: str) -> list[dict[str, object]]:
        """Every case of a trial, content-free columns only."""
        ...

    async def outbox(self, *, limit: int = 1000) -> list[OutboxRecord]:
        """Records written by post-finish hooks, oldest first."""
        ...


class OutboxDelivery(Protocol):
    """The outbox as the uplink's delivery loop uses it (:class:`uplink.outbox.Outbox`).

    A claim leases records to one owner: in a fleet (PostgreSQL) the rows are
    picked with ``FOR UPDATE SKIP LOCKED`` and leased in the same statement, so
    two sidecars never send the same record at once; a lapsed lease (its owner
    died mid-send) makes the record claimable again. At-least-once: the
    collector deduplicates by id."""

    async def claim_outbox(self, owner: str, *, limit: int, lease_s: float, now: float) -> list[tuple[str, bytes]]:
        """Up to ``limit`` records, oldest first, not under another owner's live lease,
        leased to ``owner`` until ``now + lease_s``: ``(record_id, body)``."""
        ...

    async def delete_outbox(self, record_ids: Sequence[str]) -> int:
        """Forget these records (the collector acknowledged or refused them); how many went."""
        ...

    async def enqueue_outbox(self, records: Sequence[OutboxRecord], *, now: float) -> int:
        """Add ``records`` to the outbox in one transaction, each unless its id is there already
        (the first copy wins); how many were added. For records that report no store fact of
        their own (a control-plane trial's forwarded exchanges, trial states)."""
        ...

    async def outbox_depth(self) -> int:
        """How many records the outbox holds."""
        ...


class RetentionStore(Protocol):
    """The retention window (:mod:`sidecar.retention`): sealed served exchanges, bounded by
    age, count and bytes, evicted oldest first; and a replay trial's progress through it.
    The store holds ciphertext only: it never sees a key."""

    async def retain(
        self, rows: Sequence[RetainedExchange], *, keep_after: float, max_count: int, max_bytes: int
    ) -> RetainResult:
        """One transaction: forget exchanges kept before ``keep_after``; add ``rows`` (an
        exchange already kept for its team is not added twice); then forget the oldest until
        at most ``max_count`` exchanges of at most ``max_bytes`` sealed bytes remain."""
        ...

    async def retained(self, selection: RetainedSelection, *, after_seq: int, limit: int) -> list[RetainedExchange]:
        """Up to ``limit`` selected exchanges with ``seq > after_seq``, in ``seq`` order."""
        ...

    async def count_retained(self, selection: RetainedSelection) -> int:
        """How many exchanges the selection holds now."""
        ...

    async def forget_retained(self, team: str) -> int:
        """Forget every retained exchange of ``team`` (its prompt retention went off); how many."""
        ...

    async def retention_totals(self) -> dict[str, int]:
        """``count`` and ``bytes`` (sealed) of the whole window."""
        ...

    async def save_replay_progress(self, trial_id: str, *, cursor: int, fed: int) -> None:
        """Record how far a replay trial has fed (``TrialRecord.replay_cursor``/``replay_fed``);
        never backwards."""
        ...


class WatchStore(Protocol):
    """Promotion, watches and alerts (DESIGN.md section 10; records in
    :mod:`sidecar.store.watch_records`). A watch is born only in :meth:`promote`. The
    detector is stepped in :meth:`CaseLedger.finish_case` by a ``WatchStep`` effect."""

    async def promote(
        self, promotion: PromotionRecord, watch: WatchRecord, first_day: TrialRecord, *, promotable: Sequence[str],
        idempotency_key: str | None = None, body_hash: str | None = None,
    ) -> PromoteResult:
        """One transaction: with a key already used, the watch first created under it (raise
        ``IdempotencyConflict`` if it came with another body); else, only if the trial's status
        is in ``promotable``, mark it ``adopted`` (ended now if it was running) and insert the
        promotion, the watch and its first day row. Otherwise nothing is written and the
        result carries the trial's status (None: no such trial)."""
        ...

    async def get_watch(self, watch_id: str) -> WatchRecord | None: ...

    async def get_promotion(self, watch_id: str) -> PromotionRecord | None:
        """The promotion that created the watch."""
        ...

    async def list_watches(
        self, *, teams: Sequence[str] | None = None, status: str | None = None
    ) -> list[WatchRecord]:
        """Newest first."""
        ...

    async def roll_watch_day(self, watch_id: str, day: str, row: TrialRecord) -> bool:
        """Conditional: if the watch is active and its current day is before ``day``, stop its
        current day row (if running), insert ``row`` as the new day's and make it current.
        True if it rolled (of several sidecars rolling at once, exactly one does)."""
        ...

    async def stop_watch(self, watch_id: str, *, now: float) -> tuple[WatchRecord | None, bool]:
        """Conditional: an active watch becomes ``stopped`` with its current day row.
        Returns (record after, changed); (None, False) for an unknown watch."""
        ...

    async def list_alerts(
        self, *, teams: Sequence[str] | None = None, status: str | None = None
    ) -> list[AlertRow]:
        """Firing first, then acknowledged, then resolved; newest first within each."""
        ...

    async def get_alert(self, alert_id: str) -> AlertRow | None: ...

    async def transition_alert(
        self, alert_id: str, to: str, *, allowed_from: Sequence[str], actor: str | None, now: float,
        outbox: OutboxRecord | None = None, next_design_json: str | None = None,
    ) -> tuple[AlertRow | None, bool]:
        """Conditional: an alert in one of ``allowed_from`` moves to ``to``; its transition row
        (for the webhook) and ``outbox`` are written in the same transaction. Resolving re-arms
        the alert's watch in that transaction too, if the watch is active and the alert is of
        its current period: the next period starts at ``now`` from a zero detector state, with
        ``next_design_json`` as its design (None: the watch's own) and its baseline."""
        ...

    async def spend_window(self, *, since: float, until: float, teams: Sequence[str] | None = None) -> dict[str, int]:
        """Over cases finished in ``[since, until)`` (trials and watches): ``charged`` (evaluation
        spend, list price, held unknowns included), ``cases``, and the served exchanges' own
        cost beside it — ``incumbent_known`` micros and ``incumbent_unknown`` exchanges whose
        cost was unknown (never counted as zero)."""
        ...

    async def record_compare_spend(self, *, team: str, at: float, charged_micros: int, known_micros: int,
                                   calls: int, unknown_calls: int) -> None:
        """Keep one compare's spend (issue 28): its team, when, the list-priced micros charged
        against its cap (an unknown cost's worst case included) and the calls of unknown cost.
        Content-free: no prompt, answer, model or score."""
        ...

    async def compare_spend_window(self, *, since: float, until: float,
                                   teams: Sequence[str] | None = None) -> dict[str, int]:
        """Over compares kept in ``[since, until)``: ``charged`` micros, ``compares``, ``unknown_calls``."""
        ...

    async def pending_transitions(self, *, limit: int) -> list[AlertTransition]:
        """Alert transitions the webhook has not delivered, oldest first."""
        ...

    async def mark_transition(self, transition_id: str, *, done: bool, now: float) -> None:
        """Count a delivery attempt; ``done`` ends the transition's delivery (it was delivered,
        or the webhook gave up on it: attempts spent, or a refusal no retry can change)."""
        ...


class Store(
    TrialStore, CaseLedger, PostureStore, FunnelStore, ReadModel, OutboxDelivery, RetentionStore, WatchStore, Protocol,
):
    """Everything one sidecar process needs; opened and closed by the app's lifecycle. The
    control-plane wing's tables (collected records, corpus evidence, running groups) are not
    here: :class:`sidecar.collector.store.base.ControlPlaneStore` adds them.

    An instance is bound to the event loop that opened it: the engine opens
    its own on its loop, the admin API another on the main loop.
    """

    async def open(self) -> None: ...

    async def close(self) -> None: ...
