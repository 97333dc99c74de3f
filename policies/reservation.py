"""Reservation arithmetic for one case: the most it can cost, before it runs.

Pure: prices and token bounds in, micro-dollars out. The store applies the
result atomically against the trial's cap (``spent + reserved + amount <= cap``).

A case costs one candidate call and up to ``judge_calls`` judge calls (a
judgment may need one retry for its label; an audited case is judged twice).
The judge's input contains the candidate's answer, which is unknown before the
candidate runs, so the first reservation bounds it by ``candidate_max_tokens``
tokens of at most ``bytes_per_token`` bytes each; once the answer is known the
engine recomputes the judge bound exactly and *tops up* if it grew — a top-up
that does not fit ends the case as ``cap_reached`` before any judge call. So
the first estimate of the answer's size only needs to be typical, not a bound:
the cap is guaranteed by the top-up, and a small estimate lets more cases run
at once under a tight cap.
"""

from __future__ import annotations

from dataclasses import dataclass

from policies.money import Price, worst_case_micros

#: Typical UTF-8 bytes per output token, for the first reservation only.
BYTES_PER_TOKEN_ESTIMATE = 4


@dataclass(frozen=True, slots=True)
class CasePlan:
    """Worst-case micro-dollars of a case, split by arm."""

    candidate_micros: int
    judge_micros: int

    @property
    def total(self) -> int:
        return self.candidate_micros + self.judge_micros


def plan_case(
    *,
    candidate_price: Price,
    candidate_input_bound: int,
    candidate_max_tokens: int,
    judge_price: Price,
    judge_input_bound_without_candidate: int,
    judge_max_tokens: int,
    judge_calls: int,
) -> CasePlan:
    """Worst case of a case before the candidate answers.

    ``judge_input_bound_without_candidate`` is the judge's largest single-call
    input bound with an empty candidate answer; the candidate's answer adds at
    most ``candidate_max_tokens * BYTES_PER_TOKEN_ESTIMATE`` tokens to it.
    """
    cand = worst_case_micros(candidate_price, candidate_input_bound, candidate_max_tokens)
    judge_in = judge_input_bound_without_candidate + candidate_max_tokens * BYTES_PER_TOKEN_ESTIMATE
    judge = judge_calls * worst_case_micros(judge_price, judge_in, judge_max_tokens)
    return CasePlan(cand, judge)


def judge_worst_case(*, judge_price: Price, judge_input_bound: int, judge_max_tokens: int, judge_calls: int) -> int:
    """Exact judge worst case once every input is known."""
    return judge_calls * worst_case_micros(judge_price, judge_input_bound, judge_max_tokens)


def fits(cap: int, spent: int, reserved: int, amount: int) -> bool:
    """Whether ``amount`` more can be reserved without the cap being passed."""
    return amount >= 0 and spent + reserved + amount <= cap
