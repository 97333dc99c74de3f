"""Benchmark: the sidecar's CPU per judged case, read from the sidecar process itself.

    .venv/bin/python bench/engine_case.py [--cases 1000] [--rounds 3] [--concurrency 8] [--otlp [--sample-ratio 1]] [--pin]

Three processes, as in ``bench/tap.py`` (whose helpers this reuses): this one
posts exchanges to the tap; the real :class:`sidecar.app.Sidecar` (temp TOML,
SQLite on a temp file) runs in a child; the fake provider (zero latency) plays
candidate and judge in another child. Each round runs two fresh sidecars:

- **r=1** — one running trial samples every exchange, so each one becomes a
  case: a candidate call, a judge call (10% of cases a second, audit call),
  pricing, the store writes;
- **r=0** — the same trial at sample rate 0: decode, match, not sampled.

With ``--otlp`` every sidecar exports its telemetry (a trace per case at ``--sample-ratio``,
default 1, and its metrics every ``--export-interval`` seconds) over OTLP/HTTP to a loopback sink in
another child process, which only reads each body and answers 200; without it nothing is
configured and nothing is exported. Compare the two runs' engine figures for the cost of
telemetry.

After a warm-up, ``--cases`` exchanges are posted (``--concurrency`` requests
in flight, one exchange each) and the run waits until every one has its funnel
outcome and nothing is in flight: it polls ``/metrics`` every 0.25 s (counters and
gauges, one cheap store read) and reads the trial's funnel (a snapshot of the trial
and its cases, whose cost grows with them) only once those say done, so the waiting
costs the sidecar little and alike at r=1 and r=0. The
sidecar's CPU (user + system, from ``/proc``) over that window divided by the
exchange count is the CPU per exchange; **engine per case = r=1 − r=0**, the
work a judged case adds on top of ingesting its exchange, shown split into the
sidecar's main process (tap, admin, forwarding) and the engine's own process. The
fake provider's CPU per case is shown apart, and the engine's figure over it: the fake
provider runs the same code in every run, so that ratio takes out how fast the machine was
at the time (on a shared 2-core VM the same code's CPU per case moved 1.8x between runs minutes
apart; the ratio moved 2.2 to 2.5). Reported per round and as the median; speed is
never asserted (DESIGN.md section 14). ``--pin`` places the processes as ``bench/tap.py --pin``
does: this process and the sidecar's main process on CPU 0, the engine's process and the fake
provider on CPU 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import aiohttp
from aiohttp import web

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from tap import (  # noqa: E402
    ENGINE_CPU, HOST, TAP_CPU, Child, _proc_cpu, _wait_for_stop, body_maker, create_trial, pin, run_fake_provider,
    run_sidecar, trial_funnel,
)
from tap import settle as settle_shared  # noqa: E402

POLL_S = 0.25


@dataclass
class Run:
    rate: float
    cases: int
    sidecar_cpu_s: float
    engine_cpu_s: float  # the engine's own process, part of sidecar_cpu_s
    fake_cpu_s: float
    seconds: float
    funnel: dict[str, object]

    @property
    def us_per_exchange(self) -> float:
        return self.sidecar_cpu_s / self.cases * 1e6

    @property
    def engine_us_per_exchange(self) -> float:
        return self.engine_cpu_s / self.cases * 1e6


async def post_all(session: aiohttp.ClientSession, url: str, n: int, tag: str, concurrency: int) -> None:
    make = body_maker(1, tag)
    queue = iter(range(n))

    async def worker() -> None:
        for i in queue:
            async with session.post(url, data=make(i), headers={"content-type": "application/json"}) as resp:
                await resp.read()
                if resp.status != 202:
                    raise RuntimeError(f"tap answered {resp.status}")

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def metrics_done(session: aiohttp.ClientSession, admin: str) -> tuple[int, int, int]:
    """(funnel outcomes decided, cases in flight, queue depth) from ``/metrics``."""
    async with session.get(f"{admin}/metrics") as resp:
        text = await resp.text()
    outcomes = in_flight = depth = 0
    for line in text.splitlines():
        if line.startswith("shadowtrial_funnel_outcomes_total{"):
            outcomes += int(float(line.rpartition(" ")[2]))
        elif line.startswith("shadowtrial_cases_in_flight "):
            in_flight = int(float(line.rpartition(" ")[2]))
        elif line.startswith("shadowtrial_intake_queue_depth "):
            depth = int(float(line.rpartition(" ")[2]))
    return outcomes, in_flight, depth


async def settle(
    session: aiohttp.ClientSession, admin: str, trial: str, total: int, timeout: float = 300.0, before: int = 0,
) -> dict[str, object]:
    """Wait until ``total`` exchanges have an outcome and none is in flight: ``/metrics`` until
    its counters say so (``before``: the outcomes the sidecar counted for other trials), then the
    trial's funnel (the store's, the one that counts) until it agrees."""
    deadline = time.monotonic() + timeout
    while True:
        outcomes, in_flight, depth = await metrics_done(session, admin)
        if outcomes >= before + total and in_flight == 0 and depth == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"cases did not settle: {outcomes} outcomes of {total}, {in_flight} in flight")
        await asyncio.sleep(POLL_S)
    while True:
        funnel = await trial_funnel(session, admin, trial)
        done = sum(v for k, v in funnel.items() if k != "in_flight" and isinstance(v, int))
        if done >= total and funnel.get("in_flight") == 0:
            return funnel
        if time.monotonic() > deadline:
            raise RuntimeError(f"cases did not settle: {funnel}")
        await asyncio.sleep(POLL_S)


def run_otlp_sink(conn: Connection) -> None:
    """An OTLP/HTTP sink: reads each export's body and answers 200; counts them."""
    got = {"bodies": 0, "bytes": 0}

    async def take(request: web.Request) -> web.Response:
        got["bytes"] += len(await request.read())
        got["bodies"] += 1
        return web.Response(body=b"", content_type="application/x-protobuf")

    async def main() -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/traces", take)
        app.router.add_post("/v1/metrics", take)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, HOST, 0).start()
        conn.send(f"http://{HOST}:{runner.addresses[0][1]}")
        await _wait_for_stop(conn)
        conn.send(got)
        await runner.cleanup()

    asyncio.run(main())


async def one_run(
    fake: Child, rate: float, args: argparse.Namespace, tag: str, extra: str = "", shared: Child | None = None,
) -> Run:
    """One measured run on a fresh sidecar, or (``--quick``) on the ``shared`` one, its trials stopped
    and its queue empty after the run."""
    with tempfile.TemporaryDirectory(prefix="shadowtrial-bench-") as tmp:
        sidecar = shared or Child(run_sidecar, fake.hello, tmp, 10_000, 16, extra)
        try:
            if args.pin:
                pin(sidecar.proc.pid, TAP_CPU)
                if sidecar.engine_pid:
                    pin(sidecar.engine_pid, ENGINE_CPU)
            tap_url = sidecar.hello["tap_url"] + "/v1/exchanges"
            admin = sidecar.hello["admin_url"]
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=args.concurrency)) as session:
                before = (await metrics_done(session, admin))[0] if shared else 0
                trial = await create_trial(session, admin, rate)
                await post_all(session, tap_url, args.warmup, f"warm-{tag}", args.concurrency)
                await settle(session, admin, trial, args.warmup, before=before)
                cpu0, fake0, t0 = sidecar.cpu_seconds(), fake.cpu_seconds(), time.perf_counter()
                eng0 = _engine_cpu(sidecar)
                await post_all(session, tap_url, args.cases, f"run-{tag}", args.concurrency)
                funnel = await settle(session, admin, trial, args.warmup + args.cases, before=before)
                cpu1, fake1, t1 = sidecar.cpu_seconds(), fake.cpu_seconds(), time.perf_counter()
                eng1 = _engine_cpu(sidecar)
        finally:
            if shared is None:
                sidecar.stop()
            else:
                await settle_shared(sidecar)
    if cpu0 is None or cpu1 is None or fake0 is None or fake1 is None:
        raise RuntimeError("needs /proc to read the children's CPU time")
    return Run(rate, args.cases, cpu1 - cpu0, eng1 - eng0, fake1 - fake0, t1 - t0, funnel)


def _ratio(ratios: list[float]) -> str:
    """The median of ``ratios``, or ``n/a`` where no round read the fake provider's CPU."""
    return f"{statistics.median(ratios):.2f}" if ratios else "n/a"


def _engine_cpu(sidecar: Child) -> float:
    """CPU seconds of the sidecar's engine process so far (0 with the engine on a thread)."""
    return (_proc_cpu(sidecar.engine_pid) or 0.0) if sidecar.engine_pid else 0.0


def _telemetry(args: argparse.Namespace, sink: Child | None) -> str:
    return (f'[telemetry]\notlp_endpoint = "{sink.hello}"\nexport_interval_seconds = {args.export_interval}\n'
            f"sample_ratio = {args.sample_ratio}\n" if sink is not None else "")


@dataclass
class Servers:
    fake: Child
    sink: Child | None
    #: ``--quick``: one sidecar for every run (each run's trial stopped after it), and its temp dir.
    shared: Child | None = None
    shared_tmp: tempfile.TemporaryDirectory[str] | None = None

    def stop(self) -> object:
        """Stop them all; what the OTLP sink took, if there is one."""
        if self.shared is not None:
            self.shared.stop()
        if self.shared_tmp is not None:
            self.shared_tmp.cleanup()
        self.fake.stop()
        return self.sink.stop() if self.sink is not None else None


def fork_servers(args: argparse.Namespace) -> Servers:
    """``--quick``: every server of the run, forked from this process before its event loop starts
    (``bench/tap.py``'s ``Child``: none imports the sidecar again), and the sidecar's engine's process
    from a warm server (``bench/_warm_engine.py``)."""
    servers = Servers(Child(run_fake_provider, start="fork"), Child(run_otlp_sink, start="fork") if args.otlp else None)
    try:
        servers.shared_tmp = tempfile.TemporaryDirectory(prefix="shadowtrial-bench-")
        servers.shared = Child(run_sidecar, servers.fake.hello, servers.shared_tmp.name, 10_000, 16,
                               _telemetry(args, servers.sink), True, start="fork")  # its engine forked too
    except BaseException:
        servers.stop()
        raise
    return servers


async def amain(args: argparse.Namespace, servers: Servers | None = None) -> int:
    """``servers``: those ``fork_servers`` started (``--quick``); by default a fresh sidecar per run."""
    servers = servers or Servers(Child(run_fake_provider), Child(run_otlp_sink) if args.otlp else None)
    fake, shared = servers.fake, servers.shared
    if args.pin:
        pin(os.getpid(), TAP_CPU)
        pin(fake.proc.pid, ENGINE_CPU)
    extra = _telemetry(args, servers.sink)
    engine: list[float] = []
    fake_per_case: list[float] = []
    ratio: list[float] = []  # engine per case / fake provider per case: the machine's speed taken out
    try:
        for r in range(args.rounds):
            sampled = await one_run(fake, 1.0, args, f"{r}s", extra, shared)
            unsampled = await one_run(fake, 0.0, args, f"{r}u", extra, shared)
            per_case = sampled.us_per_exchange - unsampled.us_per_exchange
            in_engine = sampled.engine_us_per_exchange - unsampled.engine_us_per_exchange
            engine.append(per_case)
            fake_per_case.append(sampled.fake_cpu_s / sampled.cases * 1e6)
            # A short run can read no tick of the fake provider's CPU: no ratio for that round.
            this_ratio = [per_case / fake_per_case[-1]] if fake_per_case[-1] > 0 else []
            ratio += this_ratio
            print(
                f"round {r + 1}: r=1 {sampled.us_per_exchange:.0f} µs/exchange ({sampled.seconds:.1f} s), "
                f"r=0 {unsampled.us_per_exchange:.0f} µs/exchange -> engine {per_case:.0f} µs per judged case "
                f"(engine process {in_engine:.0f}, main process {per_case - in_engine:.0f}); "
                f"fake provider {fake_per_case[-1]:.0f} µs per case "
                f"(engine / fake provider {_ratio(this_ratio)}); "
                f"funnel {sampled.funnel}",
                flush=True,
            )
    finally:
        exported = servers.stop()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    telemetry = (f"telemetry exported over OTLP, sample ratio {args.sample_ratio} ({exported})"
                 if exported is not None else "no telemetry configured")
    print(
        f"\nmedian of {args.rounds}: engine CPU per judged case {statistics.median(engine):.0f} µs "
        f"(sidecar process, r=1 minus r=0); fake provider {statistics.median(fake_per_case):.0f} µs per case; "
        f"engine / fake provider {_ratio(ratio)}; "
        f"{args.cases} cases per run, concurrency {args.concurrency}; {telemetry}; "
        f"{'pinned (tap on CPU 0, engine on CPU 1)' if args.pin else 'unpinned'}; load average {load}"
    )
    return 0



def _quick(parser: argparse.ArgumentParser, argv: list[str] | None, **small: object) -> None:
    """``--quick``: a run of seconds that shows the benchmark still works (``make test`` runs every
    benchmark so, tests/bench/); its figures are not for reading. Flags given explicitly still win."""
    parser.add_argument("--quick", action="store_true", help="a run of seconds that proves the benchmark works")
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**small)

def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The sidecar's CPU per judged case, from the sidecar process.")
    p.add_argument("--cases", type=int, default=1000, help="exchanges per measured run (default 1000)")
    p.add_argument("--warmup", type=int, default=100, help="uncounted exchanges first (default 100)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=8, help="tap requests in flight (default 8)")
    p.add_argument("--otlp", action="store_true", help="export traces and metrics to a loopback OTLP/HTTP sink")
    p.add_argument("--export-interval", type=float, default=5.0, help="metric export interval with --otlp (s)")
    p.add_argument("--sample-ratio", type=float, default=1.0, help="share of cases traced with --otlp (default 1)")
    p.add_argument(
        "--pin", action="store_true",
        help="as bench/tap.py --pin: this process and the sidecar's main process (the tap) on CPU 0, the engine's "
             "process and the fake provider on CPU 1 (needs 2 CPUs)",
    )
    _quick(p, argv, cases=20, warmup=5, rounds=1)
    args = p.parse_args(argv)
    if args.pin and len(os.sched_getaffinity(0)) < 2:
        p.error("--pin needs 2 CPUs this process may run on")
    return asyncio.run(amain(args, fork_servers(args) if args.quick else None))


if __name__ == "__main__":
    raise SystemExit(main())
