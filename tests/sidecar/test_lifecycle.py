"""The process lifecycle with real processes: SIGKILL mid-trial, SIGTERM drain,
and a drain deadline that passes.

Each test runs ``python -m sidecar.cli.main serve`` as a child process against a
fake provider served from the test process, and reads the SQLite file
directly once the child is gone. The child is forked from a warm parent that imported the
sidecar once (:mod:`tests.sidecar.forkserve`; issue 29): a real process, signalled and
reaped as any. Product rules under test (DESIGN.md): rule 9
(a case in flight when the process died is ``indeterminate`` and never re-run),
rule 3 (no crash takes spend past the cap) and rule 2 (the incumbent is never
called).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import httpx
import pytest

from sidecar.demo.fake_provider import FakeModel, FakeProvider
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, exchange, wait_for, write_config
from tests.sidecar.forkserve import ForkedProcess, create_subprocess

REPO = Path(__file__).resolve().parents[2]
#: A bound on a sidecar's start, not a wait (it returns as soon as the sidecar listens): a
#: loaded CI machine starts processes slowly, and 15 s was seen to pass there.
START_TIMEOUT_S = 60.0
IN_FLIGHT = ("claimed", "reserved", "dispatched")
#: A short lease, so a restart recovers the dead process's cases quickly.
LEASE_S = 1.0
#: Bound on a stopping process's exit after its drain deadline: far below the stalled calls'
#: own timeout (30 s), which an exit that ignored the deadline would wait for, and far above
#: the shutdown's own work on a loaded machine plus a stall of a second or two (3 s left little room).
EXIT_AFTER_DRAIN_S = 10.0
#: Bound on reaping a SIGKILLed child (through the fork server): a hang's bound, not a wait.
REAP_S = 30.0
#: Outcomes a worker writes when it finishes a case (as opposed to recovery).
FINISHED_BY_WORKER = ("judged", "judge_failed", "candidate_failed", "cap_reached")


# -- a sidecar in a child process ------------------------------------------------


class ServerProcess:
    """``shadowtrial serve`` as a child process (of the fork server); stderr (the log) goes to a file."""

    def __init__(self, config: Path, log: Path, *, own_group: bool = False) -> None:
        self.config = config
        self.log = log
        self.own_group = own_group  # a process group of its own, as a terminal's foreground job
        self.proc: ForkedProcess | None = None
        self.tap_url = ""
        self.admin_url = ""

    async def start(self) -> None:
        with self.log.open("ab") as err:
            self.proc = await create_subprocess(["serve", "--config", str(self.config)], stderr=err.fileno(),
                                                new_session=self.own_group)
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"sidecar did not report its addresses in time\n{self.log_text()}")
            try:
                line = await asyncio.wait_for(self.proc.stdout.readline(), timeout=remaining)
            except asyncio.TimeoutError:
                continue
            if not line:
                raise AssertionError(f"sidecar exited before listening (rc={await self.proc.wait()})\n{self.log_text()}")
            words = line.decode().split()
            if words[:2] == ["shadowtrial:", "tap"] and "admin" in words:
                self.tap_url = words[2]
                self.admin_url = words[words.index("admin") + 1]
                return

    def signal(self, sig: int) -> None:
        assert self.proc is not None and self.proc.returncode is None
        self.proc.send_signal(sig)

    async def wait(self, timeout: float) -> int:
        assert self.proc is not None
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout=timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"sidecar still running {timeout:.1f}s later\n{self.log_text()}") from None

    async def ensure_dead(self) -> None:
        """For ``finally``: kill this child (by its own pid) if it still runs, and reap it."""
        if self.proc is None:
            return
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


class Client:
    """The admin API and the tap of one running sidecar."""

    def __init__(self, server: ServerProcess) -> None:
        # A bound, not a wait (as the in-process harness's): a loaded machine answered a trial's
        # view of a fleet sidecar in more than 10 s.
        self.admin = httpx.AsyncClient(base_url=server.admin_url, timeout=30.0)
        self.tap = httpx.AsyncClient(base_url=server.tap_url, timeout=30.0)

    async def aclose(self) -> None:
        await self.admin.aclose()
        await self.tap.aclose()

    async def create_trial(self) -> str:
        body = {  # continue: every sent case runs, whatever the verdict (issue 26's default stops)
            "team": "team-a", "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
            "spend_cap_usd": 10.0, "sample_rate": 1.0, "on_decision": "continue",
        }
        r = await self.admin.post("/v1/trials", json=body)
        assert r.status_code == 201, r.text
        trial_id: str = r.json()["id"]
        return trial_id

    async def send(self, exchanges: list[dict[str, Any]]) -> dict[str, Any]:
        r = await self.tap.post("/v1/exchanges", json=exchanges)
        assert r.status_code == 202, r.text
        reply: dict[str, Any] = r.json()
        return reply

    async def trial(self, trial_id: str) -> dict[str, Any]:
        r = await self.admin.get(f"/v1/trials/{trial_id}")
        assert r.status_code == 200, r.text
        view: dict[str, Any] = r.json()
        return view

    async def live(self) -> dict[str, Any]:
        r = await self.admin.get("/v1/live")
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()
        return data


# -- reading the store directly (only while no process writes it) -----------------


def read_cases(db: Path, trial_id: str) -> dict[str, dict[str, Any]]:
    """Every case of the trial by exchange id."""
    with _connect(db) as conn:
        rows = conn.execute(
            "SELECT exchange_id, state, outcome, reserved_micros, charged_micros, score, "
            "candidate_cost_coverage FROM cases WHERE trial_id=?",
            (trial_id,),
        ).fetchall()
    return {r["exchange_id"]: dict(r) for r in rows}


def read_trial(db: Path, trial_id: str) -> dict[str, Any]:
    with _connect(db) as conn:
        row = conn.execute(
            "SELECT cap_micros, spent_micros, known_micros, reserved_micros, unknown_calls, status FROM trials WHERE id=?",
            (trial_id,),
        ).fetchone()
    assert row is not None
    return dict(row)


def read_funnel(db: Path, trial_id: str) -> dict[str, int]:
    with _connect(db) as conn:
        rows = conn.execute("SELECT outcome, n FROM funnel WHERE trial_id=?", (trial_id,)).fetchall()
    return {r["outcome"]: r["n"] for r in rows if r["n"]}


@contextmanager
def _connect(db: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        yield conn
    finally:
        conn.close()


# -- helpers -------------------------------------------------------------------------


def candidate_calls(fake: FakeProvider) -> Counter[str]:
    """Candidate requests per exchange id (the candidate gets the served messages: "question {i}")."""
    out: Counter[str] = Counter()
    for req in fake.requests:
        if req.model == CANDIDATE:
            content = req.body["messages"][0]["content"]
            out["ex-" + content.removeprefix("question ")] += 1
    return out


async def wait_in_flight(client: Client, trial_id: str, *, judged_too: bool) -> None:
    async def ready() -> bool:
        funnel = (await client.trial(trial_id))["funnel"]
        return funnel["in_flight"] > 0 and (not judged_too or funnel["outcomes"]["judged"] > 0)

    what = "cases judged and cases in flight" if judged_too else "cases in flight"
    await wait_for(ready, timeout=10.0, what=what)


async def wait_idle(client: Client, trial_id: str, judged: int) -> dict[str, Any]:
    """Until the trial has ``judged`` judged cases and the engine holds nothing; then its view.

    The view is re-read once idle: a trial view is assembled from several reads
    (the trial row before the funnel), so the one that showed the last case
    finish may carry a trial row from before it settled.
    """

    async def idle() -> bool:
        view = await client.trial(trial_id)
        intake = (await client.live())["intake"]
        return (
            view["funnel"]["outcomes"]["judged"] >= judged
            and view["funnel"]["in_flight"] == 0
            and intake["depth"] == 0
            and intake["in_flight"] == 0
        )

    await wait_for(idle, timeout=10.0, what=f"{judged} judged cases and an idle engine")
    return await client.trial(trial_id)


def fast_candidate() -> FakeModel:
    return FakeModel(quality=0.6)


def models(candidate: FakeModel) -> dict[str, FakeModel]:
    return {INCUMBENT: FakeModel(quality=0.5), CANDIDATE: candidate, JUDGE: FakeModel(judge=True)}


@pytest.fixture
async def fake_and_servers() -> AsyncIterator[tuple[FakeProvider, list[ServerProcess]]]:
    """A started fake provider, and a list the test appends its children to; all are ended after the test."""
    fake = FakeProvider(models(fast_candidate()), seed=3)
    await fake.start()
    servers: list[ServerProcess] = []
    try:
        yield fake, servers
    finally:
        for server in servers:
            await server.ensure_dead()
        await fake.stop()  # releases any stalled candidate call
    # Product rule 2: the incumbent's answer is reused; the sidecar never calls it.
    assert fake.calls[INCUMBENT] == 0, f"the sidecar called the incumbent {fake.calls[INCUMBENT]} time(s)"


async def start_server(servers: list[ServerProcess], config: Path, tmp: Path) -> tuple[ServerProcess, Client]:
    server = ServerProcess(config, tmp / f"sidecar-{len(servers)}.log")
    servers.append(server)
    await server.start()
    return server, Client(server)


def child_pids(pid: int) -> list[int]:
    """Live processes that ``pid`` spawned with multiprocessing (not its resource tracker), from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in cmdline:
            out.append(int(stat.parent.name))
    return out


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# -- 1. SIGKILL mid-trial, then restart ---------------------------------------------------


async def test_sigkill_mid_trial_marks_in_flight_cases_indeterminate_runs_the_queued_and_reruns_none(
    tmp_path: Path, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    fake, servers = fake_and_servers
    fake.models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=(300.0, 600.0))
    config = write_config(tmp_path, fake.base_url, workers=8, lease_seconds=LEASE_S, isolation="process")
    db = tmp_path / "trials.db"

    server, client = await start_server(servers, config, tmp_path)
    try:
        trial_id = await client.create_trial()
        reply = await client.send([exchange(i) for i in range(60)])
        assert reply == {"accepted": 60, "sampled": 60, "shed": 0}
        await wait_in_flight(client, trial_id, judged_too=True)
    finally:
        await client.aclose()
    assert server.proc is not None
    engines = child_pids(server.proc.pid)
    assert len(engines) == 1, f"expected the engine's own process, found {engines}"
    server.signal(signal.SIGKILL)
    assert await server.wait(REAP_S) == -signal.SIGKILL

    # The engine's process sees its pipe close and exits at once, without a drain.
    async def engine_gone() -> bool:
        return not Path(f"/proc/{engines[0]}").exists() or _zombie(engines[0])

    await wait_for(engine_gone, timeout=10, what="the engine process to exit with its sidecar")

    # What the store held at the moment of death.
    before = read_cases(db, trial_id)
    trial_before = read_trial(db, trial_id)
    finished = {ex: c for ex, c in before.items() if c["state"] == "finished"}
    in_flight = {ex: c for ex, c in before.items() if c["state"] in IN_FLIGHT}
    assert finished and in_flight, before
    assert set(finished) | set(in_flight) == set(before)
    assert {c["outcome"] for c in finished.values()} <= set(FINISHED_BY_WORKER)
    assert any(c["outcome"] == "judged" for c in finished.values())
    assert trial_before["reserved_micros"] == sum(c["reserved_micros"] for c in in_flight.values())

    # Restart on the same config and DB. The dead process's cases are recovered once its
    # lease has expired (at start-up or by the next sweep), never before.
    fake.models[CANDIDATE] = fast_candidate()
    server, client = await start_server(servers, config, tmp_path)
    try:
        async def recovered() -> bool:
            cases = read_cases(db, trial_id)
            return len(cases) == 60 and all(c["state"] == "finished" for c in cases.values())

        await wait_for(recovered, timeout=10 * LEASE_S + 10, what="recovery of the killed process's cases")
        view = await client.trial(trial_id)
        assert view["status"] == "running"

        after = read_cases(db, trial_id)  # WAL: readable while the new process runs
        # Cases still queued at the crash had no row; the intake journal kept them and the
        # restarted sidecar ran them (issue 8, item 2): every sampled exchange has its case.
        queued = set(after) - set(before)
        assert queued and set(after) == {f"ex-{i}" for i in range(60)}
        assert {after[ex]["outcome"] for ex in queued} <= set(FINISHED_BY_WORKER)
        for ex, c in finished.items():
            assert (after[ex]["state"], after[ex]["outcome"], after[ex]["score"]) == ("finished", c["outcome"], c["score"]), ex
        for ex, c in in_flight.items():
            assert (after[ex]["state"], after[ex]["outcome"]) == ("finished", "indeterminate"), ex
            # A dispatched call may have been billed: its reservation is held as unknown spend.
            held = c["reserved_micros"] if c["state"] == "dispatched" else 0
            assert after[ex]["charged_micros"] == held, ex

        funnel = view["funnel"]
        assert funnel["in_flight"] == 0
        assert funnel["outcomes"]["indeterminate"] == len(in_flight)
        for outcome in FINISHED_BY_WORKER:
            assert funnel["outcomes"][outcome] == sum(1 for c in finished.values() if c["outcome"] == outcome) + sum(
                1 for ex in queued if after[ex]["outcome"] == outcome)
        # sample_rate 1.0: no tap-path outcome, so every counted pair is a case; none was lost.
        assert funnel["total"] == reply["sampled"] == 60 == sum(funnel["outcomes"].values())

        dispatched_held = sum(c["reserved_micros"] for c in in_flight.values() if c["state"] == "dispatched")
        spend = view["spend"]
        assert spend["reserved_micros"] == 0
        assert spend["charged_micros"] == trial_before["spent_micros"] + dispatched_held + sum(
            after[ex]["charged_micros"] for ex in queued)
        assert spend["charged_micros"] + spend["reserved_micros"] <= spend["cap_micros"]
        n_dispatched = sum(1 for c in in_flight.values() if c["state"] == "dispatched")
        assert spend["unknown_calls"] == trial_before["unknown_calls"] + n_dispatched

        # The gateway re-delivers everything it sent before the crash that had a case,
        # plus fresh traffic: the old cases are duplicates, the fresh ones run.
        fresh = [exchange(1000 + i) for i in range(10)]
        old = [exchange(int(ex.removeprefix("ex-"))) for ex in sorted(after)]
        await client.send(old + fresh)
        view = await wait_idle(client, trial_id, judged=funnel["outcomes"]["judged"] + len(fresh))
        assert view["funnel"]["outcomes"]["indeterminate"] == len(in_flight)
        assert view["funnel"]["total"] == len(after) + len(fresh)
        assert view["spend"]["reserved_micros"] == 0
        assert view["spend"]["charged_micros"] <= view["spend"]["cap_micros"]
    finally:
        await client.aclose()

    calls = candidate_calls(fake)
    for ex in finished:
        assert calls[ex] == 1, ex
    for ex, c in in_flight.items():
        # Never re-run: a reserved case never reached the candidate; a dispatched one at most once.
        assert calls[ex] <= (0 if c["state"] == "reserved" else 1), (ex, c["state"], calls[ex])
    for ex in queued:
        assert calls[ex] == 1, ex
    for ex in fresh:
        assert calls[ex["exchange_id"]] == 1
    final = read_cases(db, trial_id)
    for ex in after:
        assert final[ex]["outcome"] == after[ex]["outcome"], ex


async def test_sigkill_with_a_retention_off_team_counts_its_queued_cases_without_keeping_content(
    tmp_path: Path, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    """The intake journal keeps only exchange ids for a team with prompt retention off, so
    after a crash its queued cases cannot run: each is counted ``shed_stopped``, once."""
    fake, servers = fake_and_servers
    fake.models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=(300.0, 600.0))
    config = write_config(
        tmp_path, fake.base_url, workers=2, lease_seconds=LEASE_S, isolation="process",
        extra="[teams.team-a]\nprompt_retention = false\n",
    )
    db = tmp_path / "trials.db"
    server, client = await start_server(servers, config, tmp_path)
    try:
        trial_id = await client.create_trial()
        reply = await client.send([exchange(i, content=f"PRIVATE-{i} ⟨q=0.500⟩") for i in range(40)])
        assert reply["sampled"] == 40
        await wait_in_flight(client, trial_id, judged_too=False)
    finally:
        await client.aclose()
    assert server.proc is not None
    engines = child_pids(server.proc.pid)
    server.signal(signal.SIGKILL)
    await server.wait(REAP_S)

    async def engine_gone() -> bool:
        return all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in engines)

    await wait_for(engine_gone, timeout=10, what="the engine process to exit with its sidecar")
    before = read_cases(db, trial_id)
    queued = {f"ex-{i}" for i in range(40)} - set(before)
    assert queued, "expected cases still queued at the kill"
    journal = b"".join(p.read_bytes() for p in tmp_path.glob("trials.db.intake/segment-*.bin"))
    assert journal and b"PRIVATE-" not in journal and b"question " not in journal

    fake.models[CANDIDATE] = fast_candidate()
    server, client = await start_server(servers, config, tmp_path)
    try:
        async def accounted() -> bool:
            f = (await client.trial(trial_id))["funnel"]
            return f["total"] == 40 and f["in_flight"] == 0

        await wait_for(accounted, timeout=10 * LEASE_S + 10, what="every sampled case to have its outcome")
        outcomes = (await client.trial(trial_id))["funnel"]["outcomes"]
    finally:
        await client.aclose()
    after = read_cases(db, trial_id)
    assert all(after[ex]["outcome"] == "shed_stopped" for ex in queued)
    assert outcomes["shed_stopped"] == len(queued) and sum(outcomes.values()) == 40, outcomes
    calls = candidate_calls(fake)
    assert all(calls[ex] == 0 for ex in queued) and all(n <= 1 for n in calls.values())


# -- 2. SIGTERM drains ---------------------------------------------------------------------


async def test_a_terminals_ctrl_c_stops_serve_and_its_engine_process_without_a_traceback(
    tmp_path: Path, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    """Issue 28: Ctrl-C on a terminal sends SIGINT to the whole foreground group, the engine's
    process too. The sidecar stops it in order; the engine prints no KeyboardInterrupt."""
    fake, servers = fake_and_servers
    fake.models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=(300.0, 400.0))  # in flight at the Ctrl-C
    config = write_config(tmp_path, fake.base_url, isolation="process")
    server = ServerProcess(config, tmp_path / "sidecar-group.log", own_group=True)
    servers.append(server)
    await server.start()
    client = Client(server)
    try:
        trial_id = await client.create_trial()
        assert (await client.send([exchange(i) for i in range(5)]))["sampled"] == 5
        await wait_in_flight(client, trial_id, judged_too=False)
    finally:
        await client.aclose()
    assert server.proc is not None
    engines = child_pids(server.proc.pid)
    assert engines, "the engine runs in a process of its own"
    os.killpg(server.proc.pid, signal.SIGINT)
    assert await server.wait(15.0) == 0, server.log_text()
    log = server.log_text()
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log




async def test_sigterm_drains_in_flight_cases_and_exits_zero(
    tmp_path: Path, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    fake, servers = fake_and_servers
    fake.models[CANDIDATE] = FakeModel(quality=0.6, latency_ms=(150.0, 250.0))
    # The deadline must not pass here: the drain ends when the cases in hand are done (about a
    # second), and a loaded machine took longer than 5 s, which cut a case (indeterminate).
    drain = 30.0
    config = write_config(tmp_path, fake.base_url, workers=8, drain=drain, isolation="process")
    db = tmp_path / "trials.db"
    sent = 60

    server, client = await start_server(servers, config, tmp_path)
    try:
        trial_id = await client.create_trial()
        assert (await client.send([exchange(i) for i in range(sent)]))["sampled"] == sent
        await wait_in_flight(client, trial_id, judged_too=False)
    finally:
        await client.aclose()
    server.signal(signal.SIGTERM)
    # A bound on a hang, not a wait: a loaded machine took longer than the drain plus 5 s to exit.
    assert await server.wait(drain + EXIT_AFTER_DRAIN_S + 5.0) == 0, server.log_text()

    cases = read_cases(db, trial_id)
    assert not [ex for ex, c in cases.items() if c["state"] != "finished"], "cases left in flight after a drain"
    assert {c["outcome"] for c in cases.values()} <= set(FINISHED_BY_WORKER)
    funnel = read_funnel(db, trial_id)
    # Every exchange sent is accounted for: a finished case, or shed when the deadline passed.
    assert sum(funnel.values()) == sent, funnel
    assert len(cases) + funnel.get("shed_stopped", 0) == sent, funnel
    assert funnel.get("judged", 0) == sum(1 for c in cases.values() if c["outcome"] == "judged") > 0
    trial = read_trial(db, trial_id)
    assert trial["reserved_micros"] == 0
    assert trial["spent_micros"] <= trial["cap_micros"]
    calls = candidate_calls(fake)
    assert all(calls[ex] == 1 for ex in cases)
    assert sum(calls.values()) == len(cases)


# -- 3. The drain deadline passes ------------------------------------------------------


async def test_drain_deadline_cuts_stalled_cases_which_exit_marks_indeterminate(
    tmp_path: Path, fake_and_servers: tuple[FakeProvider, list[ServerProcess]]
) -> None:
    fake, servers = fake_and_servers
    # The candidate stalls until the fake provider stops: far beyond any drain deadline.
    fake.models[CANDIDATE] = FakeModel(quality=0.6, rate_timeout=1.0)
    drain = 0.5
    config = write_config(tmp_path, fake.base_url, workers=8, drain=drain, timeout_s=30.0, isolation="process")
    db = tmp_path / "trials.db"
    sent = 60

    server, client = await start_server(servers, config, tmp_path)
    try:
        trial_id = await client.create_trial()
        assert (await client.send([exchange(i) for i in range(sent)]))["sampled"] == sent
        await wait_for(lambda: _stalled(fake, 8), timeout=10.0, what="8 stalled candidate calls")
        await wait_in_flight(client, trial_id, judged_too=False)
    finally:
        await client.aclose()
    t0 = time.monotonic()
    server.signal(signal.SIGTERM)
    assert await server.wait(drain + EXIT_AFTER_DRAIN_S + 5.0) == 0, server.log_text()
    took = time.monotonic() - t0
    assert took < drain + EXIT_AFTER_DRAIN_S, f"exit took {took:.2f}s after SIGTERM with a {drain}s drain deadline"
    assert "drain deadline passed" in server.log_text()

    # An orderly exit retires this process's cases at once: what the deadline cut is
    # indeterminate before the process is gone (no lease to wait for), and never re-run.
    before = read_cases(db, trial_id)
    cut = {ex: c for ex, c in before.items() if c["outcome"] == "indeterminate"}
    assert cut and len(cut) == len(before), before  # nothing could finish: the candidate never answers
    assert all(c["state"] == "finished" for c in cut.values()), before
    shed = read_funnel(db, trial_id).get("shed_stopped", 0)
    assert len(cut) + shed == sent
    calls_at_exit = candidate_calls(fake)

    fake.models[CANDIDATE] = fast_candidate()
    server, client = await start_server(servers, config, tmp_path)
    try:
        view = await client.trial(trial_id)
        after = read_cases(db, trial_id)
        assert set(after) == set(cut)
        assert all((c["state"], c["outcome"]) == ("finished", "indeterminate") for c in after.values()), after
        outcomes = view["funnel"]["outcomes"]
        assert outcomes["indeterminate"] == len(cut)
        assert outcomes["shed_stopped"] == shed
        assert view["funnel"]["total"] == sent
        assert view["funnel"]["in_flight"] == 0
        assert view["spend"]["reserved_micros"] == 0
        # A dispatched call may have been billed: its whole reservation is held as unknown spend;
        # one that never dispatched is charged nothing.
        assert all(c["charged_micros"] in (0, c["reserved_micros"]) for c in cut.values())
        held = sum(c["charged_micros"] for c in cut.values())
        assert view["spend"]["charged_micros"] == held
        assert view["spend"]["charged_micros"] <= view["spend"]["cap_micros"]

        # A re-delivery of the cut-off exchanges is not a new case; fresh traffic runs.
        fresh = [exchange(1000 + i) for i in range(5)]
        await client.send([exchange(int(ex.removeprefix("ex-"))) for ex in sorted(cut)] + fresh)
        view = await wait_idle(client, trial_id, judged=len(fresh))
        assert view["funnel"]["outcomes"]["indeterminate"] == len(cut)
        assert view["funnel"]["total"] == sent + len(fresh)
    finally:
        await client.aclose()

    calls = candidate_calls(fake)
    for ex, c in cut.items():
        assert calls[ex] == calls_at_exit[ex] <= 1, ex
        if c["charged_micros"] == 0:  # never dispatched
            assert calls[ex] == 0, ex
    assert all(calls[ex["exchange_id"]] == 1 for ex in fresh)


async def _stalled(fake: FakeProvider, n: int) -> bool:
    return fake.calls[CANDIDATE] >= n
