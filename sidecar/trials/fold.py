"""Fold a trial's evidence into the statistics kept with it, and keep the result.

A verdict that stands (issue 7, docs/statistics.md section 4) needs every look
at a trial to fold into *one* running intersection that outlives the process:
:func:`policies.verdict.evaluate` folds a look into a ``prior``
:class:`~policies.sequence.SequenceState`, and the first-slot test of judge
health does the same with a :class:`~policies.judge_health.JudgeHealthState`.
This module is the one place that reads those states from the trial record,
folds, and saves what came out; every read of a trial calls it, and the
engine may call it after recording a case. ``policies`` stays pure; the store
only applies a conditional update.

Racing writers. Two admin reads at once, a read and the engine, or two
sidecars of a fleet can fold from the same stored state. Keeping "the larger
n" alone would not do: a writer that read before another's save could replace
a decision reached in the other's look with its own undecided one (the flicker
the intersection is there to stop). So a save is a compare-and-set on the
stored text (``TrialStore.save_states``); a writer whose state was refused
folds its look again into the state now stored, which then holds both
writers' looks. Each refusal means another writer's save succeeded, so the
loop makes progress; after :data:`MAX_ATTEMPTS` refusals in a row the read
shows what it folded without keeping it (a later read folds it again: skipping
a look loses tightness, never validity).

A stored state that cannot be folded (unparseable, or built with other
settings than the trial's) is a bug or a newer release's format: it is
logged and replaced by a fresh state rather than failing every read of the
trial for good.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sidecar.store.base import TrialStore
from sidecar.store.records import JudgmentRow, KeptState, TrialRecord

# The statistics (policies on numpy) are imported where a trial is folded, not with this module:
# a sidecar, its engine's process and the CLI start without numpy (tests/test_startup_imports.py).
if TYPE_CHECKING:
    from policies.judge_health import JudgeHealth, JudgeHealthState, SlotJudgment
    from policies.sequence import SequenceState
    from policies.stream import StreamState
    from policies.verdict import Evaluation

log = logging.getLogger("shadowtrial.fold")

#: The error rate a trial's verdict is decided at (``evaluate``'s default).
ALPHA = 0.05

#: Refused saves in a row before a read gives up keeping its look (each refusal is another writer's progress).
MAX_ATTEMPTS = 8


@dataclass(frozen=True, slots=True)
class Folded:
    """One look at a trial, folded into its kept states.

    ``health`` is None when no judgments were given. ``kept`` is False only
    when the save was refused :data:`MAX_ATTEMPTS` times in a row.
    """

    evaluation: Evaluation
    health: JudgeHealth | None
    kept: bool


async def fold_trial(
    store: TrialStore,
    record: TrialRecord,
    counts: Mapping[float, int],
    judgments: Sequence[JudgmentRow] | None = None,
    *,
    first_slot: tuple[int, int] | None = None,
) -> Folded:
    """Evaluate ``counts`` (and judge health from ``judgments``) folded into the
    states stored on ``record``, and keep the new states with the trial.

    ``first_slot`` — (decisive primary judgments, those the answer shown first won), as
    the store counts them (:meth:`~sidecar.store.base.ReadModel.fold_inputs`) — keeps the
    judge-health state as ``judgments`` would, without them (``health`` is then None):
    the engine's fold, whose cost must not grow with the trial.

    ``record`` may be stale (read before ``counts``, or long ago): a refused
    save re-reads the states. A state is saved only when folding changed it,
    so repeated reads of an idle trial write nothing.
    """
    slots = None if judgments is None else [slot_judgment(r) for r in judgments]
    seq_text, health_text = record.sequence_state, record.judge_health_state
    ev, new_seq, new_n = await _fold_sequence(store, record, counts, seq_text)

    def fold_health(text: str | None) -> tuple[JudgeHealth | None, JudgeHealthState | None]:
        if slots is not None:
            h = _health(record, slots, text)
            return h, h.state
        if first_slot is not None:
            return None, _health_state(record, first_slot, text)
        return None, None

    health, health_state_ = fold_health(health_text)
    for _ in range(MAX_ATTEMPTS):
        seq_write = None if new_seq == seq_text else KeptState(new_seq, new_n, seq_text)
        health_write = None
        if health_state_ is not None:
            new_health = _text(health_state_.to_dict())
            if new_health != health_text:
                health_write = KeptState(new_health, health_state_.decisive, health_text)
        if seq_write is None and health_write is None:
            return Folded(ev, health, kept=True)
        after = await store.save_states(record.id, sequence=seq_write, judge_health=health_write)
        if after is None:  # trials are never deleted; nothing to keep the states with
            return Folded(ev, health, kept=False)
        # A refused state is folded again from the one stored now; a kept one is left as it is
        # (re-folding it would be idempotent, but would lose this look's ``contradicted``).
        # Refused with the stored text unchanged means the stored count is larger than the
        # fold's (only after an unusable state was dropped): folding again cannot help.
        stuck = False
        if seq_write is not None:
            seq_text = after.sequence_state
            if seq_text != seq_write.text:
                stuck |= seq_text == seq_write.folded_from
                ev, new_seq, new_n = await _fold_sequence(store, record, counts, seq_text)
        if health_write is not None:
            health_text = after.judge_health_state
            if health_text != health_write.text:
                stuck |= health_text == health_write.folded_from
                health, health_state_ = fold_health(health_text)
        if stuck:
            log.warning("trial %s: a kept state has a larger count than this fold; this look was not kept", record.id)
            return Folded(ev, health, kept=False)
    log.warning("trial %s: the kept states changed under %d folds in a row; this look was not kept", record.id,
                MAX_ATTEMPTS)
    return Folded(ev, health, kept=False)


def decides_by_betting(record: TrialRecord) -> bool:
    """Whether the trial decides on the betting sequence: every trial but one whose kept state is
    an empirical-Bernstein intersection from before issue 31 (see :func:`_fold_sequence`)."""
    if record.sequence_state is None:
        return True
    try:
        data = json.loads(record.sequence_state)
    except ValueError:
        return True
    from policies.stream import is_stream_state

    return not isinstance(data, dict) or is_stream_state(data)


def slot_judgment(row: JudgmentRow) -> SlotJudgment:
    """A stored judgment in presentation terms (which slot held the candidate, which slot won)."""
    from policies.judge_health import SlotJudgment

    candidate_slot = "A" if row.order == "candidate_first" else "B"
    if row.outcome != "verdict":
        winner = "error"
    elif row.winner_slot in ("A", "B"):
        winner = row.winner_slot
    else:
        winner = "tie"
    return SlotJudgment(
        case_id=row.case_id,
        candidate_slot=candidate_slot,  # type: ignore[arg-type]
        winner=winner,  # type: ignore[arg-type]
        audit=row.is_audit,
        longer_won=row.longer_won,
        strong=row.strong,
    )


async def _fold_sequence(
    store: TrialStore, record: TrialRecord, counts: Mapping[float, int], stored: str | None
) -> tuple[Evaluation, str, int]:
    """The evaluation, the state text to keep and its count. A trial with no kept state, or one
    kept by the betting fold, decides on the betting sequence: its scored cases after the kept
    cursor are folded one by one in the store's scoring order (issue 31). A trial whose kept
    state is an empirical-Bernstein intersection (kept before) goes on deciding on that."""
    from policies.bootstrap import bootstrap_identity
    from policies.stream import StreamState, fold_cases, is_stream_state
    from policies.verdict import evaluate

    data = None
    prior: StreamState | None = None if stored is None else _kept.get(stored)
    if stored is not None and prior is None:
        try:
            data = json.loads(stored)
        except ValueError as exc:
            _unusable(record, "sequence", exc)
    if isinstance(data, dict) and not is_stream_state(data):
        ev = _evaluate(record, counts, stored)
        return ev, _text(ev.sequence_state.to_dict()), ev.sequence_state.n
    if data is not None:
        try:
            prior = StreamState.from_dict(data)
        except (ValueError, KeyError, TypeError) as exc:
            _unusable(record, "sequence", exc)
    cases = await store.scores_after(record.id, 0 if prior is None else prior.cursor)

    def run(start: StreamState | None) -> tuple[Evaluation, StreamState]:
        folded = fold_cases(start, cases, alpha=ALPHA, tolerance=record.delta, min_cases=record.min_cases,
                            expected_cases=record.expected_cases)
        ev = evaluate(counts, identity=bootstrap_identity(record.id, record.judge_version_id),
                      expected_cases=record.expected_cases, delta=record.delta, min_cases=record.min_cases,
                      alpha=ALPHA, stream=folded)
        return ev, folded.state

    try:
        ev, state = run(prior)
    except ValueError as exc:  # kept with other settings
        _unusable(record, "sequence", exc)
        cases = await store.scores_after(record.id, 0)
        ev, state = run(None)
    text = _text(state.to_dict())
    _keep(text, state)
    return ev, text, state.cursor


#: The betting states this process last wrote or read, by their stored text: the next fold of a
#: trial starts from the text its last fold kept, so it is not parsed again (a thousand floats).
#: A state is immutable and its text is canonical (:func:`_text`), so the text names it exactly.
_kept: dict[str, StreamState] = {}
#: How many texts :data:`_kept` holds (the oldest goes first): a few per trial folding at once.
KEPT_STATES = 32


_kept_lock = threading.Lock()  # folds run on the engine's loop and on the admin's (another thread)


def _keep(text: str, state: StreamState) -> None:
    with _kept_lock:
        _kept.pop(text, None)
        _kept[text] = state
        while len(_kept) > KEPT_STATES:
            del _kept[next(iter(_kept))]


def _evaluate(record: TrialRecord, counts: Mapping[float, int], stored: str | None) -> Evaluation:
    from policies.bootstrap import bootstrap_identity
    from policies.sequence import SequenceState
    from policies.verdict import evaluate

    def run(prior: SequenceState | None) -> Evaluation:
        return evaluate(
            counts,
            identity=bootstrap_identity(record.id, record.judge_version_id),
            expected_cases=record.expected_cases,
            delta=record.delta,
            min_cases=record.min_cases,
            prior=prior,
        )

    if stored is None:
        return run(None)
    try:
        return run(SequenceState.from_dict(json.loads(stored)))
    except (ValueError, KeyError, TypeError) as exc:
        _unusable(record, "sequence", exc)
        return run(None)


def _health(record: TrialRecord, slots: Sequence[SlotJudgment], stored: str | None) -> JudgeHealth:
    from policies.judge_health import JudgeHealthState, judge_health

    if stored is None:
        return judge_health(slots)
    try:
        return judge_health(slots, prior=JudgeHealthState.from_dict(json.loads(stored)))
    except (ValueError, KeyError, TypeError) as exc:
        _unusable(record, "judge-health", exc)
        return judge_health(slots)


def _health_state(record: TrialRecord, first_slot: tuple[int, int], stored: str | None) -> JudgeHealthState:
    from policies.judge_health import JudgeHealthState, health_state

    decisive, first = first_slot
    if stored is None:
        return health_state(first, decisive)
    try:
        return health_state(first, decisive, prior=JudgeHealthState.from_dict(json.loads(stored)))
    except (ValueError, KeyError, TypeError) as exc:
        _unusable(record, "judge-health", exc)
        return health_state(first, decisive)


def _unusable(record: TrialRecord, what: str, exc: Exception) -> None:
    log.warning("trial %s: the kept %s state cannot be folded (%s); starting a new one", record.id, what, exc)


def _text(state: Mapping[str, Any]) -> str:
    """Canonical JSON: the same state always gives the same text, which the compare-and-set relies on."""
    return json.dumps(state, sort_keys=True, separators=(",", ":"))
