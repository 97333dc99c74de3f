"""Benchmark: the tap's ingest rate against a bare aiohttp handler, and whether a flood of
exchanges starves the engine (issue #6), in the same run.

    .venv/bin/python bench/tap.py [--phases ingest,starvation,cpu] [--duration 5] [--concurrency 32]
                                  [--sample-rate 0.05] [--no-unsampled] [--cases 3000] [--flood-duration 10]

**ingest** — two servers take the same request bodies:

- **reference** — an aiohttp handler that reads the body and answers ``202``;
  the ceiling any aiohttp-based tap can reach on this machine.
- **tap** — the real :class:`sidecar.app.Sidecar` (config written to a temp dir
  through the real loader, SQLite store on a temp file) with one running trial
  that matches every exchange at ``--sample-rate``. Its candidate and judge
  point at a :class:`sidecar.demo.fake_provider.FakeProvider` with zero latency, so
  the sampled share really is dispatched and judged while the tap ingests.
- **floor** — the same handler, which also decodes each body into the tap's typed schema
  (msgspec, :class:`sidecar.ingest.wire.Exchange`): the least any tap must do. The report
  prints the tap's own process CPU per exchange against it (issue 29: at most 1.5x).
- **tap r=0** (skip with ``--no-unsampled``) — the same sidecar with the
  trial's sample rate at 0: the ingest path alone (decode, match, sample),
  which separates the tap's own cost from the engine's work beside it.

Two modes: (a) one exchange per request, (b) 100 exchanges per request (a JSON
array). Each exchange is about 1 KB of JSON (a system and a user message, an
answer of a few hundred bytes), with a unique ``exchange_id``.

**starvation** — three phases, each on a fresh sidecar, all in 100-exchange batches:

- **engine alone** — ``--cases`` exchanges offered at once to a trial at rate 1.0
  (the queue holds them all), no flood; judged cases/s between the moments 10%
  and 90% of them were done, while the queue is never empty;
- **engine under flood** — a trial at ``--flood-rate`` and a full-speed flood for
  ``--flood-duration`` seconds after the warm-up; judged cases/s over the flood;
- **ingest alone** — the same flood at rate 0.

Reported: judged/s under flood ÷ alone (goal ≥ 0.80) and exchanges/s with the
engine busy ÷ alone (goal ≥ 0.90), with the absolute figures, queue depths and
the sidecar's warnings. Judged counts are the trial's funnel (``GET
/v1/trials/{id}``), read only at the ends of a window; between them ``/metrics``
is polled every ``--poll`` seconds (queue depth), the same in every phase.

**cpu** — the sidecar's CPU per judged case over the whole engine-alone phase,
raw and net of the idle baseline and of the tap's cost to ingest as many
exchanges at rate 0 (from *ingest alone*), and by thread: the main loop (tap and
admin), the engine's loop, each store connection's thread.

Processes (the machine this was written on has 2 cores): this process is the
load generator (aiohttp ``ClientSession``, keep-alive, fixed concurrency, only
to 127.0.0.1, bounded by request count and time); each measured server runs in
a child process of its own, started fresh for each phase, so no backlog of one
phase runs into the next (``--quick``: one of each for the whole run, its trials stopped and
its queue empty between phases; see ``PhaseSidecar``); the fake provider runs in a third process that is
idle except while the sidecar dispatches sampled cases. Each flood starts with
a short warm-up that is not counted. CPU comes from ``/proc``: per process, per
thread of the sidecar, and the machine's total, so what other processes took
is reported too.

Reported per ingest phase: exchanges/s, requests/s, and the server process's CPU time
per exchange (more robust than throughput when the load
generator, not the server, is the bottleneck). Ratios are tap / reference;
speed is never asserted, only reported (DESIGN.md section 14).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import resource
import statistics
import multiprocessing as mp
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable

import aiohttp
from aiohttp import web

HOST = "127.0.0.1"
MAX_BODY = 4 * 1024 * 1024  # the tap's default tap.max_body_bytes
INCUMBENT = "bench-incumbent"
CANDIDATE = "bench-candidate"
JUDGE = "bench-judge"
TEAM = "team-bench"


SYSTEM = (
    "You are a careful assistant for an internal engineering help desk. Answer concisely, "
    "cite the relevant runbook section when there is one, and say so when you are unsure."
)
QUESTION = (
    "Our nightly batch job started failing after the database migration last Tuesday. The logs "
    "show 'connection reset by peer' about forty minutes in, always on the largest tenant. What "
    "should I check first, and how do I confirm the cause without taking the job offline?"
)
ANSWER = (
    "Start with the connection's idle and statement timeouts: a reset forty minutes in on the "
    "largest tenant usually means a server-side timeout or a proxy closing a long-idle "
    "connection. Compare the new database's tcp_keepalive and idle_in_transaction settings with "
    "the old ones, then run the job against a copy of that tenant with keep-alives enabled. "
    "⟨q=0.500⟩"
)
ID_MARK = "@@EXCHANGE_ID@@"


# --- payloads -----------------------------------------------------------------


def exchange_template() -> tuple[bytes, bytes]:
    """One exchange as JSON bytes, split around its id: ``head + id + tail``."""
    ex = {
        "exchange_id": ID_MARK,
        "team": TEAM,
        "gateway": "gw-bench",
        "route": "/v1/chat/completions",
        "model": INCUMBENT,
        "request": {
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
            "params": {"temperature": 0.2, "max_tokens": 256},
        },
        "response": {
            "content": ANSWER,
            "finish_reason": "stop",
            "usage": {"input_tokens": 96, "output_tokens": 84},
        },
        "served_at": "2026-11-30T00:00:00Z",
        "latency_ms": 812.5,
    }
    text = json.dumps(ex, ensure_ascii=False, separators=(",", ":"))
    head, tail = text.split(ID_MARK)
    return head.encode(), tail.encode()


def body_maker(per_request: int, prefix: str) -> Callable[[int], bytes]:
    """``make(i)``: request ``i``'s body, every exchange id unique within the run."""
    head, tail = exchange_template()
    if per_request == 1:
        return lambda i: b"".join((head, f"{prefix}-{i}".encode(), tail))

    def make(i: int) -> bytes:
        parts = [b"".join((head, f"{prefix}-{i}-{k}".encode(), tail)) for k in range(per_request)]
        return b"[" + b",".join(parts) + b"]"

    return make


# --- server processes ---------------------------------------------------------


async def _wait_for_stop(conn: Connection) -> None:
    await asyncio.get_running_loop().run_in_executor(None, conn.recv)


def run_fake_provider(conn: Connection) -> None:
    from sidecar.demo.fake_provider import FakeModel, FakeProvider

    # A tap phase ends by stopping its sidecar, whose drain cancels the calls in
    # flight; the resets this causes here are expected, not worth a traceback.
    logging.getLogger("aiohttp").setLevel(logging.CRITICAL)

    async def main() -> None:
        models = {
            INCUMBENT: FakeModel(quality=0.5),
            CANDIDATE: FakeModel(quality=0.55),
            JUDGE: FakeModel(judge=True),
        }
        async with FakeProvider(models, seed=1, host=HOST) as fp:
            conn.send(fp.base_url)
            await _wait_for_stop(conn)
            conn.send({str(k): v for k, v in fp.calls.items()})

    asyncio.run(main())


async def _reference_handler(request: web.Request) -> web.Response:
    await request.read()
    return web.Response(status=202, body=b'{"accepted":0,"sampled":0,"shed":0}', content_type="application/json")


def _floor_handler() -> Callable[[web.Request], Any]:
    """The floor of the tap's work: read the body, decode it into the tap's typed schema
    (``sidecar.ingest.wire.Exchange``, msgspec, decoders built once), answer ``202``."""
    import msgspec

    from sidecar.ingest.wire import Exchange

    one, many = msgspec.json.Decoder(Exchange), msgspec.json.Decoder(list[Exchange])

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        n = len(many.decode(body)) if body[:1] == b"[" else (one.decode(body) and 1)
        return web.Response(status=202, body=b'{"accepted":%d,"sampled":0,"shed":0}' % n,
                            content_type="application/json")

    return handler


def run_reference(conn: Connection, max_body: int, decode: bool = False) -> None:
    """A bare aiohttp server: reads each body and answers 202 (``decode``: the floor, which also
    decodes it as the tap's typed schema)."""
    async def main() -> None:
        app = web.Application(client_max_size=max_body)
        app.router.add_post("/v1/exchanges", _floor_handler() if decode else _reference_handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, HOST, 0).start()
        port = runner.addresses[0][1]
        conn.send({"tap_url": f"http://{HOST}:{port}", "admin_url": None})
        await _wait_for_stop(conn)
        await runner.cleanup()
        conn.send("stopped")

    asyncio.run(main())


def run_sidecar(
    conn: Connection, base_url: str, tmp: str, queue_size: int = 10_000, workers: int = 16, extra: str = "",
    warm_engine: bool = False,
) -> None:
    """The real sidecar; its hello names its threads (for per-thread CPU), its goodbye
    carries what it logged at WARNING and above, split into before and after the stop.
    ``extra``: more config tables (``bench/engine_case.py --otlp`` adds ``[telemetry]``). ``warm_engine``
    (``--quick``, in a forked child): its engine's process forked from a warm server, not spawned
    (``bench/_warm_engine.py``)."""
    from sidecar.app import Sidecar
    from sidecar.config import load_config
    from sidecar.demo.localconfig import loopback_config

    logged: dict[str, list[str]] = {"running": [], "stopping": []}
    when = ["running"]

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged[when[0]].append(f"{record.levelname} {record.name}: {record.getMessage()}")

    logging.getLogger().addHandler(Keep(logging.WARNING))

    async def main() -> None:
        path = Path(tmp) / "shadowtrial.toml"
        path.write_text(
            loopback_config(
                base_url=base_url, db=str(Path(tmp) / "bench.db"), judge=JUDGE, drain_seconds=1.0, max_retries=1,
                prices={INCUMBENT: (2.0, 8.0), CANDIDATE: (0.5, 2.0), JUDGE: (1.0, 4.0)},
                queue_size=queue_size, workers=workers, extra=extra,
            )
        )
        config = load_config(str(path), {})
        async with Sidecar(config) as sc:
            # The admin's store opens before the engine starts (Runtime.start), and threads
            # enumerate in start order: the first store thread is the admin's.
            threads: dict[int, str] = {}
            for t in threading.enumerate():
                if t.native_id is not None:
                    store = t.name.startswith("shadowtrial-store")
                    admin_store = store and not any(n.startswith("store:") for n in threads.values())
                    threads[t.native_id] = ("store:admin" if admin_store else "store:engine") if store else t.name
            engine_pid = getattr(sc.runtime.engine, "pid", None)  # the engine's own process, by default
            conn.send({"tap_url": sc.tap_url, "admin_url": sc.admin_url, "threads": threads, "engine_pid": engine_pid})
            # "log": what it logged so far, then wait on (``--quick`` shares one sidecar between phases);
            # anything else stops it.
            while await asyncio.get_running_loop().run_in_executor(None, conn.recv) == "log":
                conn.send({k: v[:] for k, v in logged.items()})
                for lines in logged.values():
                    lines.clear()
            when[0] = "stopping"
        conn.send(logged)

    if not warm_engine:
        asyncio.run(main())
        return
    from _warm_engine import WarmEngineServer

    server = WarmEngineServer()
    try:
        asyncio.run(main())
    finally:
        server.stop()


#: A bound on a child server's start-up (spawn, imports, store, engine process): a hang fails,
#: a machine busy with other work (a test suite beside it) is waited for.
START_TIMEOUT_S = 120.0


#: What a ``--quick`` run's server children find imported when they are forked (see ``Child``).
FORKED_IMPORTS = ("msgspec", "sidecar.app", "sidecar.config", "sidecar.demo.fake_provider",
                  "sidecar.demo.localconfig", "sidecar.ingest.wire")


class Child:
    """A server in a child process; ``stop()`` asks it to shut down, then joins it.

    ``start="spawn"`` (every full run): a fresh interpreter, which imports what it runs (about 1 s
    of CPU for a sidecar, 0.6 s for the fake provider). ``start="fork"`` (``--quick``, whose servers
    then cost a fraction of that): forked from this process, with ``FORKED_IMPORTS`` imported here
    first; only before this process runs an event loop or a second thread, so a child copies no
    loop, lock or socket of ours (``_check_fork_safe``). Either way the server runs the same code."""

    def __init__(self, target: Callable[..., None], *args: Any, start: str = "spawn") -> None:
        if start == "fork":
            _check_fork_safe()
        ctx = mp.get_context(start)
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=target, args=(child_conn, *args))  # not daemonic: the sidecar starts its engine process
        self.proc.start()
        child_conn.close()  # the child's end is the child's alone: a child that dies is an end of file here
        if not self.conn.poll(START_TIMEOUT_S):
            self.proc.kill()
            raise RuntimeError(f"{target.__name__} did not start within {START_TIMEOUT_S:.0f} s")
        try:
            self.hello: Any = self.conn.recv()
        except EOFError:
            self.proc.join(5)
            raise RuntimeError(f"{target.__name__} exited (code {self.proc.exitcode}) before it started") from None

    @property
    def engine_pid(self) -> int | None:
        return self.hello.get("engine_pid") if isinstance(self.hello, dict) else None

    def cpu_seconds(self) -> float | None:
        """user + system CPU time of the child (and of its engine process) so far, from /proc (None elsewhere)."""
        own = _proc_cpu(self.proc.pid)
        engine = _proc_cpu(self.engine_pid) if self.engine_pid else 0.0
        return None if own is None else own + (engine or 0.0)

    def thread_cpu(self) -> dict[str, float]:
        """CPU seconds by thread group (``THREAD_GROUPS``), from /proc/<pid>/task; {} elsewhere."""
        names = self.hello.get("threads", {}) if isinstance(self.hello, dict) else {}
        out: dict[str, float] = {}
        try:
            tasks = list(Path(f"/proc/{self.proc.pid}/task").iterdir())
        except OSError:
            return out
        for task in tasks:
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            group = _thread_group(names.get(int(task.name), ""))
            out[group] = out.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        if self.engine_pid:
            out["engine process"] = _proc_cpu(self.engine_pid) or 0.0
        return out

    def stop(self) -> Any:
        reply = None
        try:
            self.conn.send("stop")
            if self.conn.poll(15):
                reply = self.conn.recv()
        except (BrokenPipeError, EOFError):
            pass
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)
        return reply


def _check_fork_safe() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        raise RuntimeError("a server is forked only before this process starts its event loop")
    if threading.active_count() != 1:
        raise RuntimeError(f"a server is forked only while this process runs one thread: {threading.enumerate()}")
    for name in FORKED_IMPORTS:
        importlib.import_module(name)


#: How the sidecar's threads are reported: the main loop serves the tap and the admin API;
#: the engine's loop runs the cases; each store connection (admin's, engine's) has a thread.
#: With the engine in its own process (the default), all of that process is "engine process".
THREAD_GROUPS = ("tap+admin loop", "engine loop", "engine store", "admin store", "engine process", "other")


def _proc_cpu(pid: int) -> float | None:
    """user + system CPU seconds of a live process, from /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _engine_side(threads: dict[str, float]) -> float:
    return threads.get("engine loop", 0.0) + threads.get("engine store", 0.0) + threads.get("engine process", 0.0)


def _thread_group(name: str) -> str:
    named = {"MainThread": 0, "shadowtrial-engine": 1, "store:engine": 2, "store:admin": 3}
    return THREAD_GROUPS[named.get(name, 5)]


# --- load generator -----------------------------------------------------------


@dataclass
class Load:
    requests: int
    errors: int
    seconds: float
    client_cpu_s: float


async def generate(
    session: aiohttp.ClientSession, url: str, make: Callable[[int], bytes], *,
    concurrency: int, max_requests: int, duration: float,
) -> Load:
    """Post ``make(i)`` bodies with ``concurrency`` workers until the count or the time runs out."""
    next_i = 0
    ok = errors = 0
    deadline = time.perf_counter() + duration
    headers = {"Content-Type": "application/json"}

    async def worker() -> None:
        nonlocal next_i, ok, errors
        while next_i < max_requests and time.perf_counter() < deadline:
            i = next_i
            next_i += 1
            try:
                async with session.post(url, data=make(i), headers=headers) as resp:
                    await resp.read()
                    if resp.status == 202:
                        ok += 1
                    else:
                        errors += 1
            except aiohttp.ClientError:
                errors += 1

    start, cpu0 = time.perf_counter(), _own_cpu()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Load(requests=ok, errors=errors, seconds=time.perf_counter() - start, client_cpu_s=_own_cpu() - cpu0)


def _own_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@dataclass
class Phase:
    name: str
    mode: str
    per_request: int
    load: Load
    cpu_s: float | None
    extra: dict[str, Any]
    #: The server's own process only (the tap's, without the engine's process beside it).
    own_cpu_s: float | None = None
    #: Which of ``--rounds`` measured it (the floor of the same round is a tap's reference).
    round: int = 0

    @property
    def exchanges_per_s(self) -> float:
        return self.load.requests * self.per_request / self.load.seconds

    @property
    def requests_per_s(self) -> float:
        return self.load.requests / self.load.seconds

    @property
    def server_cpu_pct(self) -> float | None:
        return None if self.cpu_s is None else 100 * self.cpu_s / self.load.seconds

    @property
    def client_cpu_pct(self) -> float:
        return 100 * self.load.client_cpu_s / self.load.seconds

    @property
    def cpu_us_per_exchange(self) -> float | None:
        n = self.load.requests * self.per_request
        return None if self.cpu_s is None or n == 0 else self.cpu_s / n * 1e6

    @property
    def own_us_per_exchange(self) -> float | None:
        n = self.load.requests * self.per_request
        return None if self.own_cpu_s is None or n == 0 else self.own_cpu_s / n * 1e6


async def run_phase(
    name: str, mode: str, child: Child, per_request: int, args: argparse.Namespace, tag: str, rate: float = 0.0,
) -> Phase:
    url = child.hello["tap_url"] + "/v1/exchanges"
    admin = child.hello["admin_url"]
    connector = aiohttp.TCPConnector(limit=args.concurrency, force_close=False)
    timeout = aiohttp.ClientTimeout(total=30)
    max_requests = args.max_requests
    extra: dict[str, Any] = {}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        trial_id = None
        if admin:
            trial_id = await create_trial(session, admin, rate)
        await generate(
            session, url, body_maker(per_request, f"warm-{tag}"),
            concurrency=args.concurrency, max_requests=max_requests, duration=args.warmup,
        )
        before = await live_counters(session, admin) if admin else {}
        cpu0, own0 = child.cpu_seconds(), _proc_cpu(child.proc.pid)
        load = await generate(
            session, url, body_maker(per_request, f"run-{tag}"),
            concurrency=args.concurrency, max_requests=max_requests, duration=args.duration,
        )
        cpu1, own1 = child.cpu_seconds(), _proc_cpu(child.proc.pid)
        if admin:
            after = await live_counters(session, admin)
            extra = {k: after.get(k, 0) - before.get(k, 0) for k in ("exchanges_received", "cases_sampled", "cases_shed")}
            extra["funnel"] = await trial_funnel(session, admin, trial_id)
    cpu = None if cpu0 is None or cpu1 is None else cpu1 - cpu0
    own = None if own0 is None or own1 is None else own1 - own0
    return Phase(name, mode, per_request, load, cpu, extra, own)


async def create_trial(session: aiohttp.ClientSession, admin: str, rate: float) -> str:
    body = {
        "team": TEAM, "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
        "spend_cap_usd": 100.0, "sample_rate": rate,
        # Keep dispatching past the decision (stop is the default): a bench measures cases run,
        # not cases counted after_decision.
        "on_decision": "continue",
    }
    async with session.post(admin + "/v1/trials", json=body) as resp:
        data = await resp.json()
        if resp.status != 201:
            raise RuntimeError(f"trial creation failed: {resp.status} {data}")
        return str(data["id"])


async def live_counters(session: aiohttp.ClientSession, admin: str) -> dict[str, int]:
    async with session.get(admin + "/v1/live") as resp:
        return dict((await resp.json()).get("counters", {}))


async def trial_funnel(session: aiohttp.ClientSession, admin: str, trial_id: str | None) -> dict[str, Any]:
    async with session.get(f"{admin}/v1/trials/{trial_id}") as resp:
        data = await resp.json()
    funnel = data.get("funnel", {})
    out = {k: v for k, v in funnel.get("outcomes", {}).items() if v}
    out["in_flight"] = funnel.get("in_flight")
    return out


# --- starvation and CPU per judged case (issue #6) -------------------------------


@dataclass
class Meter:
    """CPU seconds so far: the sidecar (by thread group), the fake provider, this process, the machine."""

    sidecar: float | None
    threads: dict[str, float]
    fake: float | None
    client: float
    machine: float | None

    @staticmethod
    def read(sidecar: Child, fake: Child) -> Meter:
        return Meter(sidecar.cpu_seconds(), sidecar.thread_cpu(), fake.cpu_seconds(), _own_cpu(), _machine_busy())


def _machine_busy() -> float | None:
    """Busy CPU seconds of the whole machine (all cores, every process), from /proc/stat."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


@dataclass
class Sample:
    """One poll of ``/metrics`` (and, for a full sample, ``GET /v1/trials/{id}``) with the CPU meters."""

    t: float
    depth: int
    in_flight: int  # cases the engine's workers hold
    sampled: int  # cases the tap put on the queue, all trials
    meter: Meter
    outcomes: dict[str, int] | None = None  # the trial's funnel (full samples only)

    @property
    def judged(self) -> int:
        assert self.outcomes is not None, "a light sample has no funnel"
        return self.outcomes.get("judged", 0)

    @property
    def done(self) -> int:
        """Cases taken off the queue and finished (from the gauges; exact only with one trial)."""
        return self.sampled - self.depth - self.in_flight


def all_ended(s: Sample, before: int, offered: int) -> bool:
    """Whether one full sample shows every offered case ended, by both counts.

    The gauges count a case done once it left the tap's queue and no worker holds it, but
    the engine's process may still hold it between the two: only the trial's funnel counts
    it once it ended. And the gauges' in-flight figure is the engine process's report, sent
    at most every 0.1 s: the funnel may show every case ended while the gauges still show
    some in flight. The phase ends when both agree (a CI run once ended on the funnel alone
    and printed "in flight 4", read as a time-out)."""
    return sum((s.outcomes or {}).values()) >= offered and s.done - before >= offered


class Probe:
    """Polls ``/metrics`` (one cheap store read) every ``interval`` seconds on a session of its own,
    not behind the flood's connection limit; reads the trial's funnel (a snapshot of the trial
    and its cases, whose cost grows with them) only at the ends of a window, so the probe
    takes from the engine as little as it can, and alike in every phase."""

    def __init__(self, admin: str, trial_id: str, sidecar: Child, fake: Child, interval: float) -> None:
        self.admin, self.trial_id, self.sidecar, self.fake, self.interval = admin, trial_id, sidecar, fake, interval
        self.samples: list[Sample] = []
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        self._task: asyncio.Task[None] | None = None

    async def sample(self, full: bool = False) -> Sample:
        t0 = time.perf_counter()
        async with self._session.get(f"{self.admin}/metrics") as resp:
            gauges = _prometheus(await resp.text())
        outcomes = None
        if full:
            async with self._session.get(f"{self.admin}/v1/trials/{self.trial_id}") as resp:
                view = await resp.json()
            outcomes = {k: v for k, v in view["funnel"]["outcomes"].items() if v}
        s = Sample(
            (t0 + time.perf_counter()) / 2, int(gauges["shadowtrial_intake_queue_depth"]),
            int(gauges["shadowtrial_cases_in_flight"]), int(gauges["shadowtrial_cases_sampled_total"]),
            Meter.read(self.sidecar, self.fake), outcomes,
        )
        self.samples.append(s)
        return s

    async def _run(self) -> None:
        while True:
            started = time.perf_counter()
            await self.sample()
            await asyncio.sleep(max(self.interval - (time.perf_counter() - started), 0))

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> Sample:
        """Stop polling; one last, full sample."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return await self.sample(full=True)

    def min_depth(self, a: Sample, b: Sample) -> int:
        """The shallowest the queue was seen between two samples (0: the engine may have idled)."""
        return min(x.depth for x in self.samples if a.t <= x.t <= b.t)

    async def close(self) -> None:
        await self._session.close()


def _prometheus(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name.split("{", 1)[0]] = float(value)
    return out


@dataclass
class Window:
    """Between two samples: judged cases, wall time, CPU by process and thread group."""

    a: Sample
    b: Sample

    @property
    def seconds(self) -> float:
        return self.b.t - self.a.t

    @property
    def judged(self) -> int:
        return self.b.judged - self.a.judged

    @property
    def judged_per_s(self) -> float:
        return self.judged / self.seconds if self.seconds > 0 else 0.0

    def cpu(self, who: str) -> float | None:
        return _minus(getattr(self.b.meter, who), getattr(self.a.meter, who))

    def threads(self) -> dict[str, float]:
        return {g: self.b.meter.threads.get(g, 0.0) - self.a.meter.threads.get(g, 0.0) for g in THREAD_GROUPS}

    def pct(self, who: str) -> float | None:
        cpu = self.cpu(who)
        return None if cpu is None or self.seconds <= 0 else 100 * cpu / self.seconds

    @property
    def others_pct(self) -> float | None:
        """The machine's busy CPU not spent by the sidecar, the fake provider or this process."""
        machine, ours = self.cpu("machine"), [self.cpu(w) for w in ("sidecar", "fake", "client")]
        if machine is None or self.seconds <= 0:
            return None
        return 100 * max(machine - sum(c or 0.0 for c in ours), 0.0) / self.seconds


@dataclass
class EnginePhase:
    """A phase of the starvation comparison: its steady window, and what it says about the run."""

    name: str
    rate: float
    window: Window
    load: Load | None = None  # the measured flood, if any
    per_request: int = 100
    min_depth: int = 0  # the shallowest the queue was seen in the window
    idle: Window | None = None  # the idle baseline (polling only), if measured
    whole: Window | None = None  # from the first offer until every case finished
    offered: int = 0
    timed_out: bool = False
    final: Sample | None = None
    log: dict[str, list[str]] | None = None

    @property
    def exchanges_per_s(self) -> float | None:
        return None if self.load is None else self.load.requests * self.per_request / self.load.seconds


def _fresh_sidecar(fake: Child, tmp: str, args: argparse.Namespace, queue_size: int, start: str = "spawn") -> Child:
    sc = Child(run_sidecar, fake.hello, tmp, queue_size, args.workers, "", start == "fork", start=start)
    if args.pin:
        pin(sc.proc.pid, TAP_CPU)
        if sc.engine_pid:
            pin(sc.engine_pid, ENGINE_CPU)
    return sc


class PhaseSidecar:
    """``async with PhaseSidecar(...) as sc``: the sidecar one phase measures. By default a fresh one
    (and store) per phase, stopped at the end, so no backlog of one phase runs into the next; under
    ``--quick`` the one ``shared`` sidecar of the whole run, settled at the end instead: its running
    trials stopped (their queued cases end ``shed_stopped``, nothing dispatched) and its queue and
    workers empty before the next phase starts. ``log``: what it logged meanwhile, as ``Child.stop``
    returns it."""

    def __init__(self, fake: Child, args: argparse.Namespace, queue_size: int, shared: Child | None = None) -> None:
        self.fake, self.args, self.queue_size, self.shared = fake, args, queue_size, shared
        self.log: Any = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._child: Child | None = None

    async def __aenter__(self) -> Child:
        if self.shared is not None:
            return self.shared
        self._tmp = tempfile.TemporaryDirectory(prefix="shadowtrial-bench-")
        try:
            self._child = _fresh_sidecar(self.fake, self._tmp.name, self.args, self.queue_size)
        except BaseException:
            self._tmp.cleanup()
            raise
        return self._child

    async def __aexit__(self, *exc: object) -> None:
        if self.shared is not None:
            self.log = await settle(self.shared)
            return
        assert self._child is not None and self._tmp is not None
        try:
            self.log = self._child.stop()
        finally:
            self._tmp.cleanup()


#: Bound on settling the shared sidecar between two ``--quick`` phases.
SETTLE_TIMEOUT_S = 60.0


async def settle(sc: Child) -> dict[str, list[str]] | None:
    """Stop ``sc``'s running trials and wait (polling ``/metrics``, with a deadline) until its queue
    is empty and no case is in flight; then what it logged since the last settle."""
    admin = sc.hello["admin_url"]
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        async with session.get(f"{admin}/v1/trials", params={"status": "running"}) as resp:
            listed = await resp.json()
        for trial in listed["trials"]:
            async with session.post(f"{admin}/v1/trials/{trial['id']}/stop") as resp:
                if resp.status != 200:
                    raise RuntimeError(f"stopping trial {trial['id']} failed: {resp.status} {await resp.text()}")
        deadline = time.perf_counter() + SETTLE_TIMEOUT_S
        while True:
            async with session.get(f"{admin}/metrics") as resp:
                gauges = _prometheus(await resp.text())
            if (gauges["shadowtrial_intake_queue_depth"] == 0 and gauges["shadowtrial_cases_in_flight"] == 0
                    and gauges["shadowtrial_running_trials"] == 0):
                break
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the shared sidecar did not settle within {SETTLE_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.02)  # polling with a deadline
    sc.conn.send("log")
    return sc.conn.recv() if sc.conn.poll(15) else None


#: ``--pin``: the load generator and the tap share one core, the engine and the fake provider the other.
TAP_CPU, ENGINE_CPU = 0, 1


def pin(pid: int, cpu: int) -> None:
    """Pin every thread of ``pid`` (threads started later inherit it from their creator)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), {cpu})
        except OSError:  # the thread ended meanwhile
            pass


async def engine_alone(fake: Child, args: argparse.Namespace, shared: Child | None = None) -> EnginePhase:
    """``--cases`` exchanges offered at once in 100-exchange batches (fewer cases, ``--quick``: one
    batch of them all) to a trial at rate 1.0, no flood; judged/s between the 10% and 90% marks,
    CPU from the first offer to the last case."""
    per_request = min(100, args.cases)
    requests = -(-args.cases // per_request)
    lease = PhaseSidecar(fake, args, max(args.queue_size, requests * per_request), shared)
    async with lease as sc:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            trial_id = await create_trial(session, sc.hello["admin_url"], 1.0)
            probe = Probe(sc.hello["admin_url"], trial_id, sc, fake, args.poll)
            try:
                idle0 = await probe.sample(full=True)  # the idle baseline: polling and housekeeping only
                await asyncio.sleep(args.idle)
                idle1 = await probe.sample(full=True)
                before = idle1.done  # 0 on a fresh sidecar; a shared one (--quick) finished cases before
                probe.start()
                load = await generate(
                    session, sc.hello["tap_url"] + "/v1/exchanges", body_maker(per_request, "alone"),
                    concurrency=args.concurrency, max_requests=requests, duration=30,
                )
                offered = load.requests * per_request
                marks: list[Sample] = []
                deadline = time.perf_counter() + args.engine_timeout
                while time.perf_counter() < deadline:
                    done = probe.samples[-1].done - before
                    if len(marks) < 2 and done >= (0.1, 0.9)[len(marks)] * offered:
                        marks.append(await probe.sample(full=True))
                    elif done >= offered:
                        full = await probe.sample(full=True)
                        if all_ended(full, before, offered):
                            break
                        await asyncio.sleep(args.poll / 2)
                    else:
                        await asyncio.sleep(args.poll / 2)
                final = await probe.stop()
            finally:
                await probe.close()
    marks += [final] * (2 - len(marks))
    w = Window(marks[0], marks[1])
    return EnginePhase(
        "engine alone", 1.0, w, min_depth=probe.min_depth(w.a, w.b), idle=Window(idle0, idle1),
        whole=Window(idle1, final), offered=offered, timed_out=final.done - before < offered, final=final,
        log=lease.log,
    )


async def flood_phase(
    fake: Child, args: argparse.Namespace, name: str, rate: float, shared: Child | None = None,
) -> EnginePhase:
    """A full-speed flood of 100-exchange batches for ``--flood-duration`` seconds after the warm-up;
    judged/s and exchanges/s over the measured flood."""
    # Exchange ids are unique within a sidecar: a shared one (--quick) gets them per phase.
    tag = "" if shared is None else f"-{rate:g}"
    lease = PhaseSidecar(fake, args, args.queue_size, shared)
    async with lease as sc:
        connector = aiohttp.TCPConnector(limit=args.concurrency)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=30)) as session:
            trial_id = await create_trial(session, sc.hello["admin_url"], rate)
            url = sc.hello["tap_url"] + "/v1/exchanges"
            probe = Probe(sc.hello["admin_url"], trial_id, sc, fake, args.poll)
            try:
                probe.start()
                await generate(
                    session, url, body_maker(100, "warm" + tag),
                    concurrency=args.concurrency, max_requests=args.max_requests, duration=args.warmup,
                )
                a = await probe.sample(full=True)
                load = await generate(
                    session, url, body_maker(100, "flood" + tag),
                    concurrency=args.concurrency, max_requests=args.max_requests, duration=args.flood_duration,
                )
                b = await probe.stop()
            finally:
                await probe.close()
    return EnginePhase(name, rate, Window(a, b), load=load, min_depth=probe.min_depth(a, b), final=b, log=lease.log)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 1000:.2f} ms"


def report_starvation(
    phases: dict[str, EnginePhase], args: argparse.Namespace, loads: tuple[str, str],
) -> None:
    print(
        f"\nstarvation and CPU per judged case (issue #6): {os.cpu_count()} CPU(s); load average before {loads[0]}, "
        f"after {loads[1]}"
    )
    print(
        f"each phase: a fresh sidecar (engine workers {args.workers}, queue {args.queue_size}; the engine-alone "
        f"queue holds all its cases), one trial, candidate and judge on the FakeProvider at zero latency (own "
        f"process); the admin API polled every {args.poll:g} s in every phase; floods are 100-exchange batches "
        f"at concurrency {args.concurrency} for {args.flood_duration:g} s after {args.warmup:g} s warm-up"
    )
    head = (
        f"{'phase':<22}{'rate':>6}{'window s':>10}{'judged':>8}{'judged/s':>10}{'exch/s':>10}{'queue':>13}{'min q':>8}"
        f"{'sidecar%':>10}{'fake%':>7}{'client%':>9}{'others%':>9}"
    )
    print()
    print(head)
    print("-" * len(head))
    for p in phases.values():
        w = p.window
        print(
            f"{p.name:<22}{p.rate:>6.2f}{w.seconds:>10.1f}{w.judged:>8}{w.judged_per_s:>10.1f}"
            f"{_fmt(p.exchanges_per_s if p.name != 'engine alone' else None, '.0f'):>10}{f'{w.a.depth}->{w.b.depth}':>13}{p.min_depth:>8}"
            f"{_fmt(w.pct('sidecar'), '.0f'):>10}{_fmt(w.pct('fake'), '.0f'):>7}{_fmt(w.pct('client'), '.0f'):>9}"
            f"{_fmt(w.others_pct, '.0f'):>9}"
        )
    print()
    for p in phases.values():
        w = p.window
        threads = ", ".join(f"{g} {100 * c / w.seconds:.0f}%" for g, c in w.threads().items() if w.seconds > 0)
        print(f"{p.name}: sidecar threads over the window: {threads}")
        t = w.threads()
        work = []
        if w.judged:
            work.append(f"engine (loop + store, or its process) {_ms(_engine_side(t) / w.judged)} per judged case")
        if p.load is not None and p.exchanges_per_s:
            ingested = p.exchanges_per_s * w.seconds
            work.append(f"tap+admin loop {1e6 * t['tap+admin loop'] / ingested:.1f} µs per exchange")
            print(f"  load: {p.load.requests} requests, {p.load.errors} errors, {p.load.seconds:.1f} s")
        if work:
            print(f"  CPU per unit of work: {'; '.join(work)}")
        final = p.final
        if final is not None:
            print(f"  at the end: funnel {final.outcomes}, in flight {final.in_flight}, queue depth {final.depth}")
        if p.name == "engine alone":
            print(
                f"  {p.offered} offered; window from {w.a.judged} to {w.b.judged} judged (10%-90% marks)"
                + ("; TIMED OUT before every case finished" if p.timed_out else "; every case finished")
                + f" ({p.whole.seconds if p.whole else 0:.1f} s from the first offer)"
            )
        for when, lines in (p.log or {}).items():
            if lines:
                print(f"  sidecar log while {when}: {len(lines)} warning(s)/error(s); first: {lines[:3]}")
    alone, flood, idle_in = phases.get("engine alone"), phases.get("engine under flood"), phases.get("ingest alone")
    print()
    if alone and flood:
        a, f = alone.window.judged_per_s, flood.window.judged_per_s
        ratio = f / a if a else float("nan")
        print(f"NO STARVATION  judged/s under flood / judged/s alone = {f:.1f} / {a:.1f} = {ratio:.2f}  (goal >= 0.80)")
        w = flood.window
        offered = (w.b.outcomes or {}).get("shed_queue_full", 0) - (w.a.outcomes or {}).get("shed_queue_full", 0)
        offered += w.b.sampled - w.a.sampled
        print(
            f"               under flood: {offered / w.seconds:.0f} cases/s sampled vs {f:.1f}/s judged; queue depth "
            f"{w.a.depth} -> {w.b.depth} of {args.queue_size} (never below {flood.min_depth}); "
            f"{(w.b.outcomes or {}).get('shed_queue_full', 0)} shed (queue full) by the end"
        )
    if flood and idle_in and flood.exchanges_per_s and idle_in.exchanges_per_s:
        busy, free = flood.exchanges_per_s, idle_in.exchanges_per_s
        print(f"INGEST         exch/s engine busy (rate {flood.rate:g}) / exch/s alone (rate 0) = {busy:.0f} / {free:.0f} "
              f"= {busy / free:.2f}  (goal >= 0.90)")
    if alone and alone.whole is not None:
        cpu_per_case(alone, idle_in)
    print(
        "notes: the load generator (this process), the sidecar (its tap process and, by default, its engine's process; "
        f"sidecar% counts both) and the fake provider share this machine's {os.cpu_count()} cores, and other processes "
        "run beside them ('others%'); CPU per case is the steadier figure when the machine is shared."
    )


def cpu_per_case(alone: EnginePhase, ingest: EnginePhase | None) -> None:
    """CPU of the sidecar per judged case over the engine-alone phase, raw and net."""
    whole, idle = alone.whole, alone.idle
    assert whole is not None and idle is not None
    judged = whole.judged
    raw = whole.cpu("sidecar")
    if raw is None or judged == 0:
        print("CPU PER CASE   n/a (no /proc, or nothing judged)")
        return
    idle_cpu = (idle.cpu("sidecar") or 0.0) / idle.seconds * whole.seconds
    tap_cpu = None
    if ingest is not None and ingest.load is not None:
        n_ingest = ingest.load.requests * ingest.per_request
        ingest_cpu = ingest.window.cpu("sidecar")
        if ingest_cpu is not None and n_ingest:
            # the window is the flood plus one poll; scale its CPU rate to the flood's length
            per_exchange = ingest_cpu / ingest.window.seconds * ingest.load.seconds / n_ingest
            tap_cpu = per_exchange * alone.offered
    threads = whole.threads()
    engine_side = _engine_side(threads)
    net = raw - idle_cpu - (tap_cpu or 0.0)
    print(
        f"CPU PER CASE   engine alone, {judged} judged in {whole.seconds:.1f} s: raw {_ms(raw / judged)} of sidecar CPU "
        f"per judged case; net {_ms(net / judged)} (less {idle_cpu:.2f} s idle polling/housekeeping"
        + (f", less {tap_cpu:.2f} s for the tap to ingest {alone.offered} exchanges at rate 0" if tap_cpu is not None
           else ", tap share not measured (run the starvation or cpu phases for it)")
        + f"); engine loop + engine store thread alone {_ms(engine_side / judged)}"
    )
    print(
        f"               by thread over the phase: "
        + ", ".join(f"{g} {_ms(c / judged)}" for g, c in threads.items())
        + f"; fake provider {_ms((whole.cpu('fake') or 0.0) / judged)} per case (not counted above)"
    )


async def run_starvation(fake: Child, args: argparse.Namespace, shared: Child | None = None) -> dict[str, EnginePhase]:
    phases: dict[str, EnginePhase] = {}
    phases["engine alone"] = await engine_alone(fake, args, shared)
    print("done: engine alone", file=sys.stderr, flush=True)
    if "starvation" in args.phases:
        phases["engine under flood"] = await flood_phase(fake, args, "engine under flood", args.flood_rate, shared)
        print("done: engine under flood", file=sys.stderr, flush=True)
    phases["ingest alone"] = await flood_phase(fake, args, "ingest alone", 0.0, shared)
    print("done: ingest alone", file=sys.stderr, flush=True)
    return phases


# --- report -------------------------------------------------------------------


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def report(
    phases: list[Phase], args: argparse.Namespace, fake_calls: dict[str, int] | None, loads: tuple[str, str],
) -> None:
    ex_bytes = sum(map(len, exchange_template())) + len("run-a-0")
    print(
        f"\nshadowtrial tap benchmark: {os.cpu_count()} CPU(s), Python {sys.version.split()[0]}, "
        f"aiohttp {aiohttp.__version__}, {sys.platform}; load average before {loads[0]}, after {loads[1]}"
    )
    if args.rounds > 1:
        print(f"best of {args.rounds} rounds per row (highest exchanges/s)")
    print(
        f"load: 1 client process, aiohttp keep-alive, concurrency {args.concurrency}, 127.0.0.1; "
        f"{args.duration:g} s measured per phase after {args.warmup:g} s warm-up (or {args.max_requests} requests); "
        f"exchange ~{ex_bytes} B of JSON"
    )
    print(
        f"tap: real Sidecar (temp TOML, SQLite on a temp file), one running trial matching every exchange at "
        f"sample rate {args.sample_rate:g}; candidate and judge on a local FakeProvider with zero latency "
        "(own process), so the sampled share is really dispatched and judged in the sidecar process"
    )
    if args.unsampled:
        print("tap r=0: the same, with the trial's sample rate 0 (the tap's ingest path alone)")
    print()
    head = (
        f"{'mode':<27}{'server':<10}{'requests':>9}{'err':>5}{'req/s':>9}{'exch/s':>10}"
        f"{'srv CPU%':>10}{'cli CPU%':>10}{'srv µs/exch':>13}{'proc µs/exch':>14}"
    )
    print(head)
    print("-" * len(head))
    for p in phases:
        print(
            f"{p.mode:<27}{p.name:<10}{p.load.requests:>9}{p.load.errors:>5}{p.requests_per_s:>9.0f}"
            f"{p.exchanges_per_s:>10.0f}{_fmt(p.server_cpu_pct, '.0f'):>10}{p.client_cpu_pct:>10.0f}"
            f"{_fmt(p.cpu_us_per_exchange, '.1f'):>13}{_fmt(p.own_us_per_exchange, '.2f'):>14}"
        )
    print()
    for mode in dict.fromkeys(p.mode for p in phases):
        ref = next(p for p in phases if p.mode == mode and p.name == "reference")
        floor = next((p for p in phases if p.mode == mode and p.name == "floor"), None)
        print(f"{mode}")
        for tap in (p for p in phases if p.mode == mode and p.name not in ("reference", "floor")):
            if floor is not None and tap.own_us_per_exchange and floor.own_us_per_exchange:
                print(
                    f"  {tap.name:<8} / floor (read + typed decode): tap process CPU per exchange "
                    f"{tap.own_us_per_exchange:.2f} / {floor.own_us_per_exchange:.2f} µs = "
                    f"{tap.own_us_per_exchange / floor.own_us_per_exchange:.2f}x"
                )
            line = f"  {tap.name:<8} / reference: exchanges/s {tap.exchanges_per_s / ref.exchanges_per_s:.2f}"
            line += f", requests/s {tap.requests_per_s / ref.requests_per_s:.2f}"
            if tap.cpu_us_per_exchange and ref.cpu_us_per_exchange:
                line += f", server CPU per exchange {tap.cpu_us_per_exchange / ref.cpu_us_per_exchange:.1f}x"
            print(line)
            e = tap.extra
            print(
                f"      measured window: {e.get('exchanges_received', 0)} received, {e.get('cases_sampled', 0)} sampled, "
                f"{e.get('cases_shed', 0)} shed (queue full); trial funnel before shutdown: {e.get('funnel')}"
            )
    if fake_calls is not None:
        print(f"fake provider calls, whole run: {fake_calls}")
    print(
        "note: a server near 100% CPU is the bottleneck; where the reference's server is well below 100% the client "
        "limits it, and the exchanges/s ratio then flatters the tap; server CPU per exchange is the fairer ratio."
    )


@dataclass
class Servers:
    """The fake provider, and under ``--quick`` every server of the run, started once."""

    fake: Child
    shared: Child | None = None
    shared_tmp: tempfile.TemporaryDirectory[str] | None = None
    refs: dict[bool, Child] = field(default_factory=dict)

    def stop(self) -> Any:
        """Stop them all; what the fake provider reports (its calls)."""
        for ref in self.refs.values():
            ref.stop()
        if self.shared is not None:
            _echo_log("shared sidecar", self.shared.stop())
        if self.shared_tmp is not None:
            self.shared_tmp.cleanup()
        return self.fake.stop()


def fork_servers(args: argparse.Namespace) -> Servers:
    """``--quick``: one server of each kind for the whole run (every phase runs against it, settled
    between phases: see ``PhaseSidecar``), forked from this process before its event loop starts."""
    servers = Servers(Child(run_fake_provider, start="fork"))
    try:
        servers.shared_tmp = tempfile.TemporaryDirectory(prefix="shadowtrial-bench-")
        servers.shared = _fresh_sidecar(
            servers.fake, servers.shared_tmp.name, args, max(args.queue_size, -(-args.cases // 100) * 100), "fork")
        if "ingest" in args.phases:
            for decode in (False, True):  # the reference, the floor
                servers.refs[decode] = Child(run_reference, MAX_BODY, decode, start="fork")
    except BaseException:
        servers.stop()
        raise
    return servers


async def amain(args: argparse.Namespace, servers: Servers | None = None) -> int:
    """``servers``: those ``fork_servers`` started (``--quick``); by default a fresh server per phase."""
    servers = servers or Servers(Child(run_fake_provider))
    fake = servers.fake
    if args.pin:
        pin(os.getpid(), TAP_CPU)
        pin(fake.proc.pid, ENGINE_CPU)
    phases: list[Phase] = []
    engine_phases: dict[str, EnginePhase] = {}
    taps = [("tap", args.sample_rate)] + ([("tap r=0", 0.0)] if args.unsampled else [])
    load_before = _loadavg()
    shared, refs = servers.shared, servers.refs
    try:
        if "ingest" in args.phases:
            for r in range(args.rounds):
                for mode, per_request, tag in (("(a) 1 exchange/request", 1, "a"), ("(b) 100 exchanges/request", 100, "b")):
                    for ref_name, decode in (("reference", False), ("floor", True)):
                        ref = refs.get(decode) or Child(run_reference, MAX_BODY, decode)
                        if args.pin:
                            pin(ref.proc.pid, TAP_CPU)
                        try:
                            phases.append(await run_phase(ref_name, mode, ref, per_request, args, f"{tag}{r}{ref_name}"))
                            phases[-1].round = r
                        finally:
                            if ref is not refs.get(decode):
                                ref.stop()
                    for i, (name, rate) in enumerate(taps):
                        # A fresh sidecar (and store) per phase: no backlog of one phase runs into the next.
                        lease = PhaseSidecar(fake, args, args.queue_size, shared)
                        try:
                            async with lease as tap:
                                phases.append(await run_phase(name, mode, tap, per_request, args, f"{tag}{r}{i}", rate))
                                phases[-1].round = r
                        finally:
                            _echo_log(name, lease.log)
                    print(f"round {r + 1}/{args.rounds} done: {mode}", file=sys.stderr, flush=True)
        load_mid = _loadavg()
        if {"starvation", "cpu"} & set(args.phases):
            engine_phases = await run_starvation(fake, args, shared)
    finally:
        fake_calls = servers.stop()
    if phases:
        report(best_of(phases), args, fake_calls, (load_before, load_mid))
        if args.rounds > 1:
            report_rounds(phases)
    if engine_phases:
        report_starvation(engine_phases, args, (load_mid, _loadavg()))
    ok = all(p.load.errors == 0 for p in phases) and all(
        p.load is None or p.load.errors == 0 for p in engine_phases.values()
    )
    return 0 if ok else 1


def _echo_log(name: str, reply: Any) -> None:
    """The sidecar's warnings of an ingest phase, to stderr as before (the child now collects them)."""
    if isinstance(reply, dict):
        for line in reply.get("running", []) + reply.get("stopping", []):
            print(f"[{name}] {line}", file=sys.stderr)


def floor_ratios(phases: list[Phase]) -> dict[tuple[str, str], list[float]]:
    """Per (mode, tap), the tap process's CPU per exchange over the floor's of the same round, one
    per round: on a shared machine the floor moves between rounds, and so does a tap beside it."""
    floors = {(p.mode, p.round): p.own_us_per_exchange for p in phases if p.name == "floor"}
    out: dict[tuple[str, str], list[float]] = {}
    for p in phases:
        floor = floors.get((p.mode, p.round))
        if p.name in ("reference", "floor") or not floor or not p.own_us_per_exchange:
            continue
        out.setdefault((p.mode, p.name), []).append(p.own_us_per_exchange / floor)
    return out


def report_rounds(phases: list[Phase]) -> None:
    """``--rounds`` > 1: each tap's ratio to the floor round by round, and their median (the
    table above takes each row's best round, which need not be the same round for a tap and its floor)."""
    print("\nper round, tap process CPU per exchange / floor's in the same round:")
    for (mode, name), ratios in floor_ratios(phases).items():
        each = ", ".join(f"{x:.2f}" for x in ratios)
        print(f"  {mode:<27}{name:<9} median {statistics.median(ratios):.2f}x over {len(ratios)} rounds ({each})")


def best_of(phases: list[Phase]) -> list[Phase]:
    """Per (mode, server), the phase with the highest exchange rate (the least disturbed round)."""
    best: dict[tuple[str, str], Phase] = {}
    for p in phases:
        key = (p.mode, p.name)
        if key not in best or p.exchanges_per_s > best[key].exchanges_per_s:
            best[key] = p
    return list(best.values())


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"



def _quick(parser: argparse.ArgumentParser, argv: list[str] | None, **small: object) -> None:
    """``--quick``: a run of seconds that shows the benchmark still works (``make test`` runs every
    benchmark so, tests/bench/); its figures are not for reading. Flags given explicitly still win."""
    parser.add_argument("--quick", action="store_true", help="a run of seconds that proves the benchmark works")
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**small)

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Benchmark the tap's ingest rate against a bare aiohttp handler.")
    p.add_argument("--duration", type=float, default=5.0, help="measured seconds per phase (default 5)")
    p.add_argument("--warmup", type=float, default=1.0, help="uncounted warm-up seconds per phase (default 1)")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (default 32)")
    p.add_argument("--max-requests", type=int, default=100_000, help="request bound per phase (default 100000)")
    p.add_argument("--rounds", type=int, default=1, help="repeat every ingest phase; report the best (default 1)")
    p.add_argument("--sample-rate", type=float, default=0.05, help="the trial's sample rate (default 0.05)")
    p.add_argument(
        "--no-unsampled", dest="unsampled", action="store_false",
        help="skip the extra tap phase at sample rate 0",
    )
    p.add_argument(
        "--phases", default="ingest,starvation,cpu",
        help="comma-separated, any of: ingest (tap vs reference), starvation (engine alone vs under flood, ingest "
        "alone vs beside the busy engine), cpu (CPU per judged case); default all",
    )
    p.add_argument("--workers", type=int, default=16, help="engine workers in every sidecar (default 16)")
    p.add_argument("--queue-size", type=int, default=10_000, help="the tap's intake queue (default 10000)")
    p.add_argument("--cases", type=int, default=3000, help="exchanges offered in the engine-alone phase (default 3000)")
    p.add_argument("--engine-timeout", type=float, default=60.0, help="bound on the engine-alone phase (default 60 s)")
    p.add_argument("--idle", type=float, default=1.0, help="idle baseline before the engine-alone phase (default 1 s)")
    p.add_argument("--flood-duration", type=float, default=10.0, help="measured seconds of each flood (default 10)")
    p.add_argument("--flood-rate", type=float, default=0.05, help="the trial's sample rate under flood (default 0.05)")
    p.add_argument("--poll", type=float, default=0.25, help="admin API poll interval in the new phases (default 0.25 s)")
    p.add_argument(
        "--pin", action="store_true",
        help="pin the load generator and the tap to CPU 0, the engine's process and the fake provider to CPU 1: "
        "on a 2-core machine, the starvation ratios then show the design, not the two sides' competition for cores",
    )
    # --quick: every phase, each as short as still measures something (the suite runs it so).
    _quick(p, argv, duration=0.2, warmup=0.05, max_requests=20, concurrency=8, cases=30, engine_timeout=30.0,
           idle=0.05, flood_duration=0.3, poll=0.1, workers=4)
    args = p.parse_args(argv)
    args.phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    if not args.phases or not set(args.phases) <= {"ingest", "starvation", "cpu"}:
        p.error("--phases takes a comma-separated subset of: ingest, starvation, cpu")
    if not 0.0 <= args.sample_rate <= 1.0 or args.concurrency < 1 or args.duration <= 0 or args.rounds < 1:
        p.error("need 0 <= --sample-rate <= 1, --concurrency >= 1, --duration > 0, --rounds >= 1")
    if not 0.0 < args.flood_rate <= 1.0 or args.workers < 1 or args.queue_size < 1 or args.cases < 1 or args.poll <= 0:
        p.error("need 0 < --flood-rate <= 1, --workers >= 1, --queue-size >= 1, --cases >= 1, --poll > 0")
    return asyncio.run(amain(args, fork_servers(args) if args.quick else None))


if __name__ == "__main__":
    raise SystemExit(main())
