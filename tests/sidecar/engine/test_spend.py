"""The spend cap is a ceiling: concurrency, retries and failures never take spend past it."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import sqlite3
import time
from pathlib import Path

import pytest

from sidecar.demo.fake_provider import FakeModel
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness, exchange, wait_for


def ledger_peak(db: Path, trial_id: str) -> tuple[int, int]:
    """Replay the spend ledger in commit order; return (peak of settled + open reservations, final)."""
    conn = sqlite3.connect(db)
    try:
        rows = conn.execute("SELECT kind, micros FROM spend_ledger WHERE trial_id=? ORDER BY seq", (trial_id,)).fetchall()
    finally:
        conn.close()
    sign = {"reserve": 1, "top_up": 1, "release": -1, "charge": 1, "hold_unknown": 1}
    running = peak = 0
    for kind, micros in rows:
        running += sign[kind] * micros
        peak = max(peak, running)
    return peak, running


async def test_cap_holds_under_200_concurrent_cases(tmp_path: Path) -> None:
    rng = random.Random(20261130)
    models = {
        INCUMBENT: FakeModel(),
        CANDIDATE: FakeModel(quality=0.6, latency_ms=(20, 400), filler_words=(50, 300)),
        JUDGE: FakeModel(judge=True, latency_ms=(5, 150), rate_no_label=0.1),
    }
    n = 2000
    async with Harness(tmp_path, models=models, workers=250, queue_size=n) as h:
        # Reservations are worst cases (about 7x the typical spend here), so a cap that
        # lets 200+ cases reserve at once runs out after roughly 1,500 cases.
        trial = await h.create_trial(spend_cap_usd=2.2, sample_rate=1.0)
        cap = trial["spend"]["cap_micros"]
        batch = []
        for i in range(n):
            ex = exchange(i, content="incumbent " + "word " * rng.randint(1, 100) + "⟨q=0.500⟩")
            ex["request"]["params"]["max_tokens"] = rng.choice([16, 32, 64, 128])
            ex["request"]["messages"][0]["content"] = f"question {i} " + "context " * rng.randint(0, 100)
            batch.append(ex)

        peak_seen = 0
        max_in_flight = 0
        samples = 0
        stop = asyncio.Event()
        # The trial's row as committed, read on a connection of the test's own: a point read of
        # ~10 µs on this loop, where the store's get_trial costs ~270 µs and a hop through the
        # store's one thread, queued behind the engine's commits (1,100+ of them per run).
        reader = sqlite3.connect(f"file:{tmp_path / 'trials.db'}?mode=ro", uri=True, timeout=30.0)

        async def watch() -> None:
            # Sample the trial's spend each time a case finishes (the engine's progress event).
            nonlocal peak_seen, max_in_flight, samples
            progress = h.runtime.progress
            while not stop.is_set():
                progress.clear()
                spent, reserved = reader.execute(
                    "SELECT spent_micros, reserved_micros FROM trials WHERE id = ?", (trial["id"],)).fetchone()
                samples += 1
                peak_seen = max(peak_seen, spent + reserved)
                max_in_flight = max(max_in_flight, h.runtime.engine.in_flight)
                await progress.wait()

        watcher = asyncio.create_task(watch())
        try:
            await asyncio.gather(*(h.send(batch[k:k + 100]) for k in range(0, n, 100)))
            view = await h.settle(trial["id"], n, timeout=120)
            stop.set()
            h.runtime.progress.set()  # wake the watcher so it sees stop
            await watcher
        finally:
            watcher.cancel()
            reader.close()

        outcomes = view["funnel"]["outcomes"]
        print(f"\ncap {cap} µ$: judged {outcomes['judged']}, cap_reached {outcomes['cap_reached']}, "
              f"max in flight {max_in_flight}, charged {view['spend']['charged_micros']} µ$; "
              f"spend sampled {samples} times, peak seen {peak_seen} µ$")
        assert max_in_flight >= 200, "the test must really run 200 cases at once"
        assert outcomes["cap_reached"] > 0 and outcomes["judged"] > 0, "the cap must run out midway"
        assert view["status"] == "cap_reached"
        assert view["spend"]["reserved_micros"] == 0
        assert view["spend"]["charged_micros"] <= cap
        assert peak_seen <= cap
        peak, final = ledger_peak(tmp_path / "trials.db", trial["id"])
        print(f"ledger peak {peak} µ$ of cap {cap} µ$, final {final} µ$")
        assert peak <= cap
        assert final == view["spend"]["charged_micros"]
        # Nothing is dispatched without a reservation: every candidate call belongs to a case that
        # reserved, once (a case refused under the cap reserved nothing and called nobody; a call
        # refused by the client's own pool never reached the provider).
        reserved = {c["exchange_id"] for c in await h.runtime.store.cases(trial["id"]) if c["reserved_micros"]}
        called = [q.body["messages"][0]["content"].split()[1] for q in h.fake.requests if q.model == CANDIDATE]
        assert len(called) == len(set(called))
        assert {f"ex-{i}" for i in called} <= reserved
        assert len(reserved) - len(called) <= outcomes["candidate_failed"]


PROVIDER_TIMEOUT_S = 1.5
#: How long this test's loop (the fake provider's) stalls mid-run, as a loaded machine's does.
STALL_S = 0.6


async def test_failures_are_counted_apart_and_unknown_cost_is_not_zero(tmp_path: Path) -> None:
    models = {
        INCUMBENT: FakeModel(),
        # Timeouts may have been billed: their cost is unknown, held at the worst case.
        CANDIDATE: FakeModel(quality=0.6, script=["timeout", "500", "timeout"] + ["ok"] * 40),
        # The judge never gives a label, not even on the retry: every judgment is an error.
        JUDGE: FakeModel(judge=True, rate_no_label=1.0, rate_no_label_retry=1.0),
    }
    # The provider timeout: the scripted "timeout" calls wait it out; every other call (17
    # candidate, 34+ judge, the fake provider on this test's loop) must answer within it, so
    # it outlasts a loop stalled for a second on a loaded machine. At 0.3 s the stall below
    # timed an ordinary call out, and the counts below were off.
    async with Harness(tmp_path, models=models, workers=1, timeout_s=PROVIDER_TIMEOUT_S) as h:
        trial = await h.create_trial(sample_rate=1.0)
        await h.send([exchange(i) for i in range(20)])

        async def past_the_faults() -> bool:
            return h.fake.calls[CANDIDATE] >= 5

        await wait_for(past_the_faults, timeout=30, what="the ordinary candidate calls under way")
        time.sleep(STALL_S)  # the loop stalls with a call in flight; not a wait for anything
        view = await h.settle(trial["id"], 20)
    outcomes = view["funnel"]["outcomes"]
    assert outcomes["candidate_failed"] == 3
    assert outcomes["judge_failed"] == 17
    assert outcomes["judged"] == 0
    # A judge error is never a tie, a failed generation never a loss: nothing is scored.
    assert view["verdict"]["cases"] == 0 and view["verdict"]["win_rate"] is None
    assert view["verdict"]["code"] == "inconclusive"
    health = view["judge_health"]
    assert health["error_rate"] == 1.0 and health["tie_rate"] is None
    spend = view["spend"]
    assert spend["unknown_calls"] == 2
    assert spend["coverage"] == "partial"
    assert spend["held_for_unknown_micros"] > 0
    # Each judgment (17 cases, audited ones twice) was asked once more for its label.
    assert health["judgments"] >= 17
    assert h.fake.calls[JUDGE] == 2 * health["judgments"]


async def test_a_configured_zero_price_is_a_known_zero(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        trial = await h.create_trial(
            sample_rate=1.0,
            candidate_price={"input_per_mtok_usd": 0.0, "output_per_mtok_usd": 0.0},
            judge_price={"input_per_mtok_usd": 0.0, "output_per_mtok_usd": 0.0},
        )
        await h.send([exchange(i) for i in range(5)])
        view = await h.settle(trial["id"], 5)
    assert view["funnel"]["outcomes"]["judged"] == 5
    assert view["spend"]["known_micros"] == 0
    assert view["spend"]["coverage"] == "complete"


# -- a provider whose usage figures are wrong (issue 8, item 3) -----------------------------

WRONG_USAGE = {
    "over-reported": (10**12, 10**12),
    "negative": (-1000, -5),
    "absurd float": (1e300, 1e300),
    "not numbers": ("lots", "many"),
    "huge int": (10**30, 1),
}


@pytest.mark.parametrize("who", [CANDIDATE, JUDGE])
@pytest.mark.parametrize("case", sorted(WRONG_USAGE))
async def test_wrong_usage_figures_never_pass_the_cap_nor_leave_a_case_open(tmp_path: Path, who: str, case: str) -> None:
    models = {INCUMBENT: FakeModel(), CANDIDATE: FakeModel(quality=0.6), JUDGE: FakeModel(judge=True)}
    models[who] = dataclasses.replace(models[who], usage_override=WRONG_USAGE[case])
    async with Harness(tmp_path, models=models, workers=8) as h:
        trial = await h.create_trial(spend_cap_usd=0.05, sample_rate=1.0)
        cap = trial["spend"]["cap_micros"]
        await h.send([exchange(i) for i in range(30)])
        view = await h.settle(trial["id"], 30)
        outcomes, spend = view["funnel"]["outcomes"], view["spend"]
        peak, final = ledger_peak(tmp_path / "trials.db", trial["id"])
        print(f"\n{who} reports {case} usage: {dict((k, v) for k, v in outcomes.items() if v)}, charged "
              f"{spend['charged_micros']} µ$ of {cap}, coverage {spend['coverage']}, disputed {spend['disputed_reports']}")
        assert view["funnel"]["total"] == 30 == sum(outcomes.values()) and view["funnel"]["in_flight"] == 0
        assert spend["reserved_micros"] == 0 and spend["remaining_micros"] >= 0
        assert spend["charged_micros"] <= cap and peak <= cap and final == spend["charged_micros"]
        assert spend["coverage"] != "complete", "a refused usage figure is never complete knowledge"
        if case in ("over-reported", "negative", "huge int"):
            assert spend["disputed_reports"] > 0


# -- usage quirks never cost an answer (issue 21, item 4) ------------------------------------

#: What upstreams report as usage. Whole-number floats are ordinary counts (JSON has one
#: number type); everything else is unreadable: the answer is judged, the call charged its
#: worst case as a disputed report.
USAGE_QUIRKS = {
    "whole-number floats": (50.0, 20.0),
    "1e30": (1e30, 1e30),
    "NaN": (float("nan"), float("nan")),
    "negative": (-50, 20),
    "strings": ("50", "twenty"),
}


def case_costs(db: Path, trial_id: str) -> list[tuple[str, str, int, int]]:
    """(candidate coverage, judge coverage, reserved, charged) of every case of the trial."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(
            "SELECT candidate_cost_coverage, judge_cost_coverage, reserved_micros, charged_micros FROM cases "
            "WHERE trial_id=?", (trial_id,)).fetchall()
    finally:
        conn.close()


@pytest.mark.parametrize("who", [CANDIDATE, JUDGE])
@pytest.mark.parametrize("quirk", sorted(USAGE_QUIRKS))
async def test_usage_quirks_are_judged_and_charged_the_worst_case(tmp_path: Path, who: str, quirk: str) -> None:
    models = {INCUMBENT: FakeModel(), CANDIDATE: FakeModel(quality=0.6), JUDGE: FakeModel(judge=True)}
    models[who] = dataclasses.replace(models[who], usage_override=USAGE_QUIRKS[quirk])
    n = 6
    async with Harness(tmp_path, models=models, workers=4) as h:
        trial = await h.create_trial(spend_cap_usd=1.0, sample_rate=1.0)
        cap = trial["spend"]["cap_micros"]
        await h.send([exchange(i) for i in range(n)])
        view = await h.settle(trial["id"], n)
    outcomes, spend = view["funnel"]["outcomes"], view["spend"]
    assert outcomes["judged"] == n, {k: v for k, v in outcomes.items() if v}
    peak, final = ledger_peak(tmp_path / "trials.db", trial["id"])
    assert spend["charged_micros"] <= cap and peak <= cap and final == spend["charged_micros"]
    assert spend["reserved_micros"] == 0
    costs = case_costs(tmp_path / "trials.db", trial["id"])
    assert len(costs) == n and all(charged <= reserved for _, _, reserved, charged in costs)
    column = 0 if who == CANDIDATE else 1
    if quirk == "whole-number floats":  # ordinary numbers: priced, complete
        assert spend["coverage"] == "complete" and spend["disputed_reports"] == 0
        assert {c[column] for c in costs} == {"complete"}
    else:
        assert spend["coverage"] != "complete" and spend["disputed_reports"] >= n
        assert {c[column] for c in costs} == {"partial"}  # the worst case charged, as a disputed report


# -- a gateway's cost never overrides a configured price (issue 21, item 9) --------------------


async def test_a_gateway_cost_never_overrides_the_trials_configured_price(tmp_path: Path) -> None:
    """A gateway reported $27.00 for a call (LiteLLM re-priced by another caller's request
    body): a trial with an incumbent price records tokens × its price; only a trial with no
    price at all takes the gateway's figure."""
    async with Harness(tmp_path) as h:
        victim = await h.create_trial(team="victim", sample_rate=1.0,
                                      incumbent_price={"input_per_mtok_usd": 3.0, "output_per_mtok_usd": 12.0})
        listed = await h.create_trial(team="listed", sample_rate=1.0)  # the config's list price: 2 / 8
        unpriced = await h.create_trial(team="unpriced", incumbent_model="gateway-only-model", sample_rate=1.0)
        batch = []
        for i, (team, model) in enumerate([("victim", INCUMBENT), ("listed", INCUMBENT), ("unpriced", "gateway-only-model")]):
            ex = exchange(i, team=team, model=model)
            ex["response"]["usage"]["cost_usd"] = 27.0
            batch.append(ex)
        await h.send(batch)
        for trial in (victim, listed, unpriced):
            await h.settle(trial["id"], 1)
    conn = sqlite3.connect(tmp_path / "trials.db")
    try:
        recorded = dict(conn.execute("SELECT trial_id, incumbent_cost_micros FROM cases").fetchall())
        coverage = dict(conn.execute("SELECT trial_id, incumbent_cost_coverage FROM cases").fetchall())
    finally:
        conn.close()
    assert recorded[victim["id"]] == 12 * 3 + 20 * 12  # 12 input, 20 output tokens at $3 / $12 per million
    assert recorded[listed["id"]] == 12 * 2 + 20 * 8
    assert recorded[unpriced["id"]] == 27_000_000
    assert set(coverage.values()) == {"complete"}
