"""The control-plane wing's part of the store contract: what a collector keeps of the uplink
(:class:`CollectedStore`), corpus evidence (:class:`CorpusStore`) and running comparison groups
(:class:`CorpusRunStore`). :class:`ControlPlaneStore` is the sidecar's
:class:`~sidecar.store.base.Store` with these; only the collector opens one
(:func:`sidecar.collector.store.make_collector_store`), so a sidecar's database never holds
these tables. ``tests/store/`` runs their conformance suites against both backends.
"""

from __future__ import annotations

from typing import Callable, Protocol, Sequence

from sidecar.collector.store.corpus_records import (
    ComparisonRecord,
    DatasetRecord,
    DatasetVersion,
    ItemRow,
    SliceRecord,
    SuiteRecord,
)
from sidecar.collector.store.corpus_run_records import AttemptRecord, RunRecord, ScoreRecord
from sidecar.collector.store.template_records import TemplateRecord, TemplateVersion
from sidecar.collector.store.reports import ReportsStore
from sidecar.store.base import Store
from uplink.collector_store import Held


class CollectedStore(Protocol):
    """What a collector holds of the uplink (``shadowtrial collector``, :mod:`sidecar.collector.collected`):
    each record once by id, as it came, and the exchanges its engine has still to run."""

    async def put_collected(self, records: Sequence[Held]) -> list[str]:
        """Keep each record unless its id is held already (the first copy wins), in one
        transaction; the ids stored now. Of ``posture`` records only the latest per (sidecar,
        team) stays (:mod:`sidecar.collector.store.posture_prune`)."""
        ...

    async def collected_trials(self) -> list[dict[str, object]]:
        """Per trial id: ``state`` (the body of its highest-revision ``trial_state``, or None)
        and ``case_results`` (the count of ``case_result`` records per team)."""
        ...

    async def latest_spec(self, trial_id: str) -> bytes | None:
        """The body of the trial's highest-revision ``trial_spec`` record, or None."""
        ...

    async def latest_posture(self, team: str) -> bytes | None:
        """The body of the team's highest-revision ``posture`` record (any sidecar's), or None."""
        ...

    async def pending_exchanges(self, *, limit: int) -> list[bytes]:
        """Up to ``limit`` bodies of ``exchange`` records, oldest first, with no case claimed for
        their exchange yet, of trials this store holds pinned to the control plane and not
        paused: running ones (their cases run), and ended ones (a claim records the case at
        once with its ended outcome, so every stored exchange is counted once)."""
        ...

    async def lease_exchanges(self, *, owner: str, now: float, lease_until: float, limit: int) -> list[bytes]:
        """As :meth:`pending_exchanges` of running (or ended) control-plane trials, but leased to
        ``owner`` until ``lease_until``: up to ``limit`` bodies not leased to another collector
        (or whose lease ended before ``now``; ``owner``'s own are renewed), in turn by team —
        each team's oldest, then each team's next — so one team's backlog does not hold back
        another's exchanges. PostgreSQL skips rows another transaction holds (``FOR UPDATE SKIP
        LOCKED``): collectors sharing the database split the exchanges. A lease only spreads the
        work; the case ledger's claim still judges each (trial, exchange) once."""
        ...

    async def unrunnable_exchanges(self, *, limit: int) -> list[bytes]:
        """Up to ``limit`` bodies of ``exchange`` records, oldest first, with no case claimed for
        their exchange yet, of trials this store holds that will not run them: paused, or pinned
        to another site since (re-pinned by a resume). The collector records each ``shed_stopped``
        (:meth:`sidecar.collector.control_plane.ControlPlane.settle_unrunnable`), so every stored exchange
        gets its one outcome even when its trial paused before it ran."""
        ...

    async def collected_exchanges(self, team: str, *, after_seq: int, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` of the team's held ``exchange`` records with ``seq > after_seq``, in
        arrival order: ``(seq, body)`` — the control plane's retained traffic, for seeding
        datasets. Only those of trials still pinned here and not paused: a trial paused by a
        posture change may have lost its team's retention, so its exchanges are left out."""
        ...


class CorpusStore(Protocol):
    """Corpus evidence (issue 13): datasets with immutable versions, slices, suites and
    comparison groups (:mod:`sidecar.collector.store.corpus_records`). Each method is one
    transaction. Versions, revisions, slices and suites are only ever inserted."""

    async def create_dataset(self, dataset: DatasetRecord, version: DatasetVersion, items: Sequence[ItemRow]) -> bool:
        """Insert the dataset with its first version and items; False (nothing written) when
        the team already has a dataset of that name."""
        ...

    async def add_dataset_version(self, version: DatasetVersion, items: Sequence[ItemRow]) -> bool:
        """Insert ``version`` (whose ``parent`` must be the dataset's latest version) with its
        items and make it the latest; False (nothing written) when the latest version is not
        ``parent`` any more (another edit landed first) or the dataset is unknown."""
        ...

    async def get_dataset(self, dataset_id: str) -> DatasetRecord | None: ...

    async def list_datasets(self, *, teams: Sequence[str] | None = None) -> list[DatasetRecord]:
        """Newest first; ``teams`` None: every team."""
        ...

    async def dataset_versions(self, dataset_id: str) -> list[DatasetVersion]:
        """Oldest first."""
        ...

    async def version_items(self, dataset_id: str, version: int) -> list[ItemRow]:
        """The version's items in their order; empty for an unknown version."""
        ...

    async def save_slice(self, slice_: SliceRecord) -> SliceRecord:
        """Insert the slice as the next version of its name (``slice_.version`` is ignored);
        returns it as stored."""
        ...

    async def list_slices(self, dataset_id: str) -> list[SliceRecord]:
        """By name, then version."""
        ...

    async def save_suite(self, suite: SuiteRecord) -> SuiteRecord:
        """Insert the suite as the next version of its (team, name) (``suite.version`` is
        ignored); returns it as stored."""
        ...

    async def get_suite(self, suite_id: str) -> SuiteRecord | None: ...

    async def list_suites(self, *, teams: Sequence[str] | None = None) -> list[SuiteRecord]:
        """Newest first."""
        ...

    async def create_comparison(
        self, comparison: ComparisonRecord, *, request_key: str, body_hash: str
    ) -> tuple[ComparisonRecord, bool]:
        """Insert the group under ``request_key``; the same key again returns the group first
        created under it and False; raise ``IdempotencyConflict`` if it came with another body."""
        ...

    async def find_request_key(self, request_key: str) -> tuple[str, ComparisonRecord] | None:
        """The body hash a start's request key came with and the group it created; None if unused."""
        ...

    async def get_comparison(self, comparison_id: str) -> ComparisonRecord | None: ...

    async def list_comparisons(
        self, *, teams: Sequence[str] | None = None, suite_id: str | None = None, limit: int = 200
    ) -> list[ComparisonRecord]:
        """Newest first, at most ``limit``; ``suite_id`` narrows to one suite's groups."""
        ...


class CorpusRunStore(Protocol):
    """Running comparison groups (issue 13, items 3-4; rows in
    :mod:`sidecar.collector.store.corpus_run_records`). Each method is one transaction. The group's
    spend is a trial's: a claim reserves its worst case with one conditional update
    (``spent + reserved + amount <= cap``) in the transaction that writes the claim, and
    settling never charges more than was reserved, so the cap is never passed."""

    async def begin_run(self, comparison_id: str, *, cap_micros: int, now: float) -> RunRecord | None:
        """Create the group's ledger (once; a second call keeps the first) and move an
        ``admitted`` group to ``running``; None for an unknown group."""
        ...

    async def get_run(self, comparison_id: str) -> RunRecord | None: ...

    async def runnable_comparisons(self) -> list[ComparisonRecord]:
        """Groups ``admitted`` or ``running``, oldest first."""
        ...

    async def set_comparison_status(self, comparison_id: str, status: str, *, allowed_from: Sequence[str],
                                    now: float, final: bool) -> bool:
        """Conditional: a group in one of ``allowed_from`` moves to ``status`` (its run ended
        now when ``final``)."""
        ...

    async def cancel_arm(self, comparison_id: str, arm: str) -> bool:
        """Add ``arm`` to the run's cancelled arms; False when the group has no run."""
        ...

    async def claim_attempt(self, attempt: AttemptRecord) -> str:
        """Claim ``attempt`` (status ``claimed``, its ``reserved_micros`` reserved): a new identity
        is inserted, a ``queued`` retry of it is taken. ``claimed``; ``exists`` (nothing written:
        the identity was claimed before, in this life or another); ``cap`` (nothing written:
        the reservation does not fit)."""
        ...

    async def top_up(self, comparison_id: str, attempt_id: str, amount: int) -> bool:
        """Reserve ``amount`` more for a claimed attempt; False (nothing written) when it does
        not fit or the attempt is not claimed any more."""
        ...

    async def finish_attempt(self, attempt: AttemptRecord, *, charge_micros: int,
                             scores: Sequence[ScoreRecord]) -> bool:
        """Only if the attempt is still ``claimed``: write its outcome (status, latency, cost,
        answer, error), release its reservation and charge at most what it reserved, and
        insert ``scores``. False (nothing written) otherwise."""
        ...

    async def claim_judgment(self, score: ScoreRecord) -> str:
        """Insert a ``pending`` paired judgment with its reservation: ``claimed``, ``exists``, ``cap``."""
        ...

    async def finish_judgment(self, score: ScoreRecord, *, charge_micros: int) -> bool:
        """Only if the judgment is still ``pending``: write its outcome and settle it."""
        ...

    async def refresh_claims(self, owner: str, *, lease_until: float) -> None:
        """Extend the lease of ``owner``'s claimed attempts, pending judgments and leased items."""
        ...

    async def expire_claims(self, *, now: float) -> int:
        """Claims whose lease ended before ``now`` become ``invocation_indeterminate``: cost
        unknown, their reservation held as spent (their fate is unknown), ``owner`` kept (whose
        process held it). How many."""
        ...

    async def queue_retry(self, attempt_id: str, *, new: Callable[[AttemptRecord], AttemptRecord]
                          ) -> tuple[str, AttemptRecord | None]:
        """An explicit linked retry of a ``failed`` or ``invocation_indeterminate`` attempt:
        ``queued`` (``new(original)`` inserted; a completed group runs again), ``existing``
        (it was retried already: that retry), ``missing``, ``not_retryable``, ``superseded``."""
        ...

    async def lease_items(self, comparison_id: str, indexes: Sequence[int], *, owner: str, now: float,
                          lease_until: float) -> list[int]:
        """Take the group's items ``indexes`` (positions in its dataset order) by lease for
        ``owner`` until ``lease_until``: those free, already ``owner``'s, or whose lease ended
        before ``now``. PostgreSQL skips rows another transaction holds (``FOR UPDATE SKIP
        LOCKED``), so collectors sharing the database split the items and never wait on each
        other. The indexes granted, ascending. :meth:`refresh_claims` extends them."""
        ...

    async def release_items(self, comparison_id: str, indexes: Sequence[int], *, owner: str) -> None:
        """Give back ``owner``'s leases of those items (their work is done or given up)."""
        ...

    async def fail_run(self, comparison_id: str, *, error: str, now: float) -> bool:
        """An ``admitted`` or ``running`` group ends ``failed`` with ``error`` on its run (the
        run must exist: :meth:`begin_run` first). False when it was not runnable any more."""
        ...

    async def run_attempts(self, comparison_id: str) -> list[AttemptRecord]: ...

    async def run_scores(self, comparison_id: str) -> list[ScoreRecord]: ...


class TemplateStore(Protocol):
    """Comparison templates and archived groups (issue 24; rows in
    :mod:`sidecar.collector.store.template_records`). Each method is one transaction."""

    async def save_template(self, header: TemplateRecord, config: str, *, expected_revision: int | None,
                            request_key: str, body_hash: str) -> tuple[TemplateRecord, TemplateVersion, bool]:
        """Save a template's next version under ``request_key``. ``expected_revision`` None
        creates ``header`` at version 1 (``TemplateExists`` if its name is taken in its team);
        otherwise the header (``header.id``) must be at ``expected_revision`` (else
        ``RevisionConflict``, nothing written) and moves to the next. The same key again
        returns what it committed and False; with another body, ``IdempotencyConflict``."""
        ...

    async def get_template(self, template_id: str) -> TemplateRecord | None: ...

    async def template_versions(self, template_id: str) -> list[TemplateVersion]:
        """Newest first."""
        ...

    async def list_templates(self, *, teams: Sequence[str] | None = None) -> list[TemplateRecord]:
        """Most recently saved first."""
        ...

    async def archive_comparison(self, comparison_id: str, *, now: float, by: str | None) -> float | None:
        """Archive a group (once: archiving again keeps the first time); None if there is no such group."""
        ...

    async def comparison_archived(self, comparison_id: str) -> float | None:
        """When the group was archived; None if it is not."""
        ...


class ControlPlaneStore(Store, CollectedStore, CorpusStore, CorpusRunStore, TemplateStore, ReportsStore, Protocol):
    """Everything the collector needs: the sidecar's store (its control-plane engine runs
    trials) and the wing's own tables."""
