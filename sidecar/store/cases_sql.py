"""The cases', the spend ledger's, the funnel's and the owners' statements, once for both
dialects (:mod:`sidecar.store.dialect`), and the rows they read into records.

What must differ stays with its dialect: the reservation (the cap's one conditional
update), crash recovery's picking and locking, and the funnel's batched upsert.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sidecar.store.records import CaseFinish, CaseStart, JudgmentRow, LedgerEntry

SEEN = "SELECT 1 FROM cases WHERE trial_id = ? AND exchange_id = ?"
CLAIM = (
    "INSERT INTO cases (id, trial_id, exchange_id, owner, state, outcome, reserved_micros, charged_micros, "
    "incumbent_latency_ms, incumbent_output_tokens, incumbent_cost_micros, incumbent_cost_coverage, "
    "bodies_json, error, created_at, finished_at) "
    "VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)
#: micros, case id: the case's share of a reservation the trial just took.
RESERVE_CASE = (
    "UPDATE cases SET reserved_micros = reserved_micros + ?, "
    "state = CASE WHEN state = 'claimed' THEN 'reserved' ELSE state END WHERE id = ?"
)
FIGURES = "SELECT cap_micros, spent_micros, reserved_micros, status FROM trials WHERE id = ?"
#: micros, case id, owner: RESERVE_CASE then DISPATCHED on a case its owner claimed in this transaction.
RESERVE_DISPATCH_CLAIMED = (
    "UPDATE cases SET reserved_micros = reserved_micros + ?, state = 'dispatched' "
    "WHERE id = ? AND owner = ? AND state = 'claimed'"
)
DISPATCHED = "UPDATE cases SET state = 'dispatched' WHERE id = ? AND owner = ? AND state = 'reserved'"
#: The owner's unfinished case, locked (lock order: cases before trials).
UNFINISHED = "SELECT reserved_micros FROM cases WHERE id = ? AND owner = ? AND state <> 'finished' {FOR_UPDATE}"
#: A finished case's settlement of its trial, and the trial's scoring sequence advanced when the case
#: was scored: one write of the trial row (a row that carries the kept statistics, tens of KB), which
#: raises ``state_revision`` itself so SQLite's revision trigger does not write the row a second time.
SETTLE_TRIAL = (
    "UPDATE trials SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ?, "
    "known_micros = known_micros + ?, unknown_calls = unknown_calls + ?, priced_calls = priced_calls + ?, "
    "disputed_calls = disputed_calls + ?, scored_seq = scored_seq + ?, state_revision = state_revision + 1 "
    "WHERE id = ?"
)
FINISH = (
    "UPDATE cases SET state = 'finished', outcome = ?, charged_micros = ?, candidate_cost_micros = ?, "
    "candidate_cost_coverage = ?, judge_cost_micros = ?, judge_cost_coverage = ?, candidate_latency_ms = ?, "
    "candidate_output_tokens = ?, score = ?, error = ?, finished_at = ?, bodies_json = ? WHERE id = ?"
)
#: FINISH of a scored case with its number in the scoring sequence (SETTLE_TRIAL took it): what FINISH
#: then SET_SCORE_SEQ do, one write of the case row. The trial id goes before the case id.
FINISH_SCORED = FINISH.replace(" WHERE id = ?", ", score_seq = (SELECT scored_seq FROM trials WHERE id = ?) WHERE id = ?")
#: A scored case takes the next number of its trial's scoring sequence (issue 31): the counter's
#: row lock orders concurrent finishes, so numbers commit in order and without gaps.
NEXT_SCORE_SEQ = "UPDATE trials SET scored_seq = scored_seq + 1 WHERE id = ?"
SET_SCORE_SEQ = "UPDATE cases SET score_seq = (SELECT scored_seq FROM trials WHERE id = ?) WHERE id = ?"
#: Scored cases after a scoring sequence number, in that order (the betting fold's input).
SCORES_AFTER = (
    "SELECT score_seq, score FROM cases WHERE trial_id = ? AND score_seq > ? ORDER BY score_seq LIMIT ?"
)
INSERT_LEDGER = "INSERT INTO spend_ledger (trial_id, case_id, kind, micros, at) VALUES (?, ?, ?, ?, ?)"
INSERT_JUDGMENT = (
    "INSERT INTO judgments (id, case_id, trial_id, judge_version_id, presentation_order, is_audit, outcome, "
    "score, strong, winner_slot, error, longer_won, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
#: released, held, unknown calls, trial id: recovery's settlement of a trial's cases.
RECOVER_TRIAL = (
    "UPDATE trials SET reserved_micros = reserved_micros - ?, spent_micros = spent_micros + ?, "
    "unknown_calls = unknown_calls + ? WHERE id = ?"
)
#: held, coverage, coverage, why, now, case id.
RECOVER_CASE = (
    "UPDATE cases SET state = 'finished', outcome = 'indeterminate', charged_micros = ?, candidate_cost_coverage = ?, "
    "judge_cost_coverage = ?, error = ?, finished_at = ? WHERE id = ?"
)
HEARTBEAT = (
    "INSERT INTO owners (owner, lease_until, started_at) VALUES (?, ?, ?) "
    "ON CONFLICT (owner) DO UPDATE SET lease_until = excluded.lease_until"
)
FORGET_OWNER = "DELETE FROM owners WHERE owner = ?"

FUNNEL = "SELECT outcome, n FROM funnel WHERE trial_id = ?"
SCORES = (
    "SELECT score, COUNT(*) AS n FROM cases WHERE trial_id = ? AND outcome = 'judged' AND score IS NOT NULL "
    "GROUP BY score"
)
#: Decisive primary judgments of a trial and those slot A (the answer shown first) won, as
#: :func:`sidecar.trials.fold.slot_judgment` reads each row: a verdict naming slot A or B, no audit.
FIRST_SLOT = (
    "SELECT COUNT(*) AS n, COALESCE(SUM(CASE WHEN winner_slot = 'A' THEN 1 ELSE 0 END), 0) AS first "
    "FROM judgments WHERE trial_id = ? AND outcome = 'verdict' AND winner_slot IN ('A', 'B') AND is_audit = ?"
)
STATES = "SELECT state, COUNT(*) AS n FROM cases WHERE trial_id = ? GROUP BY state"
JUDGMENTS = "SELECT * FROM judgments WHERE trial_id = ? ORDER BY created_at, id"
PAIRED = (
    "SELECT candidate_cost_micros AS cc, candidate_cost_coverage AS ccv, incumbent_cost_micros AS ic, "
    "incumbent_cost_coverage AS icv, candidate_latency_ms AS cl, incumbent_latency_ms AS il "
    "FROM cases WHERE trial_id = ? AND outcome = 'judged'"
)
CASES = (
    "SELECT id, exchange_id, owner, state, outcome, reserved_micros, charged_micros, score, error FROM cases "
    "WHERE trial_id = ? ORDER BY created_at, id"
)
LEDGER = "SELECT seq, trial_id, case_id, kind, micros, at FROM spend_ledger WHERE trial_id = ? ORDER BY seq"
_SPEND = (
    "SELECT COALESCE(SUM(spent_micros), 0) AS spent, COALESCE(SUM(known_micros), 0) AS known, "
    "COALESCE(SUM(reserved_micros), 0) AS reserved, COALESCE(SUM(unknown_calls), 0) AS unknown_calls FROM trials"
)
SPEND_KEYS = ("spent", "known", "reserved", "unknown_calls")


def spend(teams: Sequence[str] | None) -> tuple[str, tuple[Any, ...]]:
    """The spend totals of some teams (None: every team), and the arguments."""
    return (_SPEND, ()) if teams is None else (_SPEND + " WHERE team IN ?[]", (list(teams),))


def claim_args(case: CaseStart, ended: str | None, status: str) -> tuple[Any, ...]:
    """:data:`CLAIM`'s arguments: a case of a trial that has ended (``ended``: its outcome) is
    written finished, without its bodies."""
    return (
        case.case_id, case.trial_id, case.exchange_id, case.owner,
        "claimed" if ended is None else "finished", ended, None if ended is None else 0,
        case.incumbent_latency_ms, case.incumbent_output_tokens, case.incumbent_cost_micros,
        case.incumbent_cost_coverage, None if ended else case.bodies_json,
        None if ended is None else f"trial is {status}", case.created_at,
        None if ended is None else case.created_at,
    )


def finish_args(f: CaseFinish) -> tuple[Any, ...]:
    return (f.outcome, f.charged_micros, f.candidate_cost_micros, f.candidate_cost_coverage, f.judge_cost_micros,
            f.judge_cost_coverage, f.candidate_latency_ms, f.candidate_output_tokens, f.score, f.error, f.finished_at,
            f.bodies_json, f.case_id)


def finish_scored_args(f: CaseFinish) -> tuple[Any, ...]:
    return (*finish_args(f)[:-1], f.trial_id, f.case_id)


def scored(f: CaseFinish) -> bool:
    """Whether the finished case takes the next number of its trial's scoring sequence."""
    return f.outcome == "judged" and f.score is not None


def settle_args(f: CaseFinish, reserved: int) -> tuple[Any, ...]:
    return (reserved, f.charged_micros, f.known_micros, f.unknown_calls, f.priced_calls, f.disputed_calls,
            int(scored(f)), f.trial_id)


def finish_ledger(f: CaseFinish, reserved: int) -> list[tuple[Any, ...]]:
    """A finished case's ledger rows: its reservation released, then its charge."""
    ledger: list[tuple[Any, ...]] = [(f.trial_id, f.case_id, "charge", f.charged_micros, f.finished_at)]
    if reserved:
        ledger.insert(0, (f.trial_id, f.case_id, "release", reserved, f.finished_at))
    return ledger


def judgment_args(f: CaseFinish) -> list[tuple[Any, ...]]:
    return [
        (j.judgment_id, j.case_id, j.trial_id, j.judge_version_id, j.order, j.is_audit, j.outcome, j.score, j.strong,
         j.winner_slot, j.error, j.longer_won, j.created_at)
        for j in f.judgments
    ]


def judgment(r: Mapping[str, Any]) -> JudgmentRow:
    return JudgmentRow(
        judgment_id=r["id"], case_id=r["case_id"], trial_id=r["trial_id"], judge_version_id=r["judge_version_id"],
        order=r["presentation_order"], is_audit=bool(r["is_audit"]), outcome=r["outcome"], score=r["score"],
        strong=bool(r["strong"]), winner_slot=r["winner_slot"], error=r["error"],
        longer_won=None if r["longer_won"] is None else bool(r["longer_won"]), created_at=r["created_at"],
    )


def ledger_entry(r: Mapping[str, Any]) -> LedgerEntry:
    return LedgerEntry(r["seq"], r["trial_id"], r["case_id"], r["kind"], r["micros"], r["at"])


def paired_row(r: Mapping[str, Any]) -> tuple[Any, ...]:
    return (r["cc"], r["ccv"], r["ic"], r["icv"], r["cl"], r["il"])
