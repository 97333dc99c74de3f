"""Benchmark: the tap's CPU per exchange against the floor's, in short alternating windows (issue 29).

    .venv/bin/python bench/tap_windows.py [--windows 20] [--window 1.0] [--sample-rate 0.05] [--pin]

``bench/tap.py --rounds N`` measures each server in a phase of its own, a few seconds apart, and
divides a tap's figure by the floor's of the same round. On a shared machine the machine's speed
moves within those seconds: in two runs of 5 rounds there, one tree's tap at rate 0 read 0.71x to
2.03x its round's floor with 100 exchanges per request (0.70x to 2.52x with one). Here three servers
run side by side for the whole run:

- **floor** — an aiohttp handler that reads the body and decodes it into the tap's typed schema
  (``bench/tap.py``'s floor: the least any tap must do);
- **tap** — the real sidecar (``bench/tap.py``'s, SQLite, the engine in its own process, a
  candidate and judge on the fake provider at zero latency) with one trial sampling every
  exchange at ``--sample-rate``, its hand-off large enough that no sampled claim is shed (every
  one is journaled, handed to the engine's process and judged: "with room in the hand-off");
- **tap r=0** — the same with the trial's sample rate at 0.

The load generator (100 exchanges per request, ``bench/tap.py``'s bodies) takes turns between them
in windows of ``--window`` seconds, each after an unmeasured warm-up, in an order that reverses
every window: floor, taps, floor. A tap window's CPU per exchange (its server process's, summed
over its threads from ``/proc/<pid>/task/*/schedstat``, in nanoseconds) is divided by the mean of
the two floor windows around it. Printed: each window's figures and ratios, then per tap the
median ratio with its quartiles, the exchanges sampled and shed. Speed is reported, not asserted.

With ``--pin``, as ``bench/tap.py --pin``: the load generator and the three servers' main
processes on CPU 0, the engines' processes and the fake provider on CPU 1.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import aiohttp  # noqa: E402

import tap as bench  # noqa: E402

PER_REQUEST = 100


def process_cpu_ns(pid: int) -> int:
    """CPU time of every thread of ``pid`` so far, in nanoseconds (``/proc/<pid>/task/*/schedstat``):
    finer than ``/proc/<pid>/stat``'s clock ticks, which are 10 ms, about 2% of a window."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended meanwhile
            pass
    return total


@dataclass
class Server:
    name: str
    child: bench.Child
    url: str
    admin: str = ""
    rate: float | None = None
    #: µs of CPU per exchange, one per window.
    figures: list[float] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    sampled: int = 0
    shed: int = 0


async def window(session: aiohttp.ClientSession, server: Server, args: argparse.Namespace, tag: str) -> float:
    """One window against ``server``: µs of its process's CPU per exchange."""
    await bench.generate(session, server.url, bench.body_maker(PER_REQUEST, f"w-{tag}"), concurrency=args.concurrency,
                         max_requests=args.max_requests, duration=args.warmup)
    before = await bench.live_counters(session, server.admin) if server.admin else {}
    cpu = process_cpu_ns(server.child.proc.pid)
    load = await bench.generate(session, server.url, bench.body_maker(PER_REQUEST, f"m-{tag}"),
                                concurrency=args.concurrency, max_requests=args.max_requests, duration=args.window)
    cpu = process_cpu_ns(server.child.proc.pid) - cpu
    if load.errors or not load.requests:
        raise RuntimeError(f"{server.name}: {load.requests} requests answered 202, {load.errors} errors")
    if server.admin:
        after = await bench.live_counters(session, server.admin)
        server.sampled += after.get("cases_sampled", 0) - before.get("cases_sampled", 0)
        server.shed += after.get("cases_shed", 0) - before.get("cases_shed", 0)
    return cpu / 1e3 / (load.requests * PER_REQUEST)


async def measure(floor: Server, taps: list[Server], args: argparse.Namespace) -> None:
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=60)) as session:
        for tap in taps:
            assert tap.rate is not None
            await bench.create_trial(session, tap.admin, tap.rate)
        for w in range(args.windows):
            before = await window(session, floor, args, f"{w}f0")
            figures = {}
            for tap in taps if w % 2 == 0 else taps[::-1]:
                figures[tap.name] = await window(session, tap, args, f"{w}{tap.name}")
            after = await window(session, floor, args, f"{w}f1")
            floor.figures += [before, after]
            reference = (before + after) / 2
            for tap in taps:
                tap.figures.append(figures[tap.name])
                tap.ratios.append(figures[tap.name] / reference)
            each = "  ".join(f"{tap.name} {figures[tap.name]:.2f} µs ({figures[tap.name] / reference:.2f}x)" for tap in taps)
            print(f"window {w + 1:>2}/{args.windows}: floor {before:.2f} / {after:.2f} µs  {each}", flush=True)


def report(floor: Server, taps: list[Server], args: argparse.Namespace) -> None:
    print(f"\ntap process CPU per exchange / the floor's in the windows around it, {PER_REQUEST} exchanges per "
          f"request, {args.windows} windows of {args.window:g} s ({'pinned' if args.pin else 'unpinned'}):")
    print(f"  floor    median {statistics.median(floor.figures):.2f} µs per exchange "
          f"(range {min(floor.figures):.2f} to {max(floor.figures):.2f})")
    for tap in taps:
        q = statistics.quantiles(tap.ratios, n=4) if len(tap.ratios) > 1 else [tap.ratios[0]] * 3
        print(f"  {tap.name:<8} median {statistics.median(tap.ratios):.2f}x (quartiles {q[0]:.2f} to {q[2]:.2f}); "
              f"median {statistics.median(tap.figures):.2f} µs per exchange; {tap.sampled} sampled, {tap.shed} shed")
    if any(tap.shed for tap in taps):
        print("  note: claims were shed (the hand-off was full): raise --queue-size for a run with room throughout")


def start(args: argparse.Namespace, tmp: str) -> tuple[bench.Child, Server, list[Server]]:
    """The fake provider, the floor and the taps, started before any event loop (``--quick`` forks them)."""
    method = "fork" if args.quick else "spawn"
    fake = bench.Child(bench.run_fake_provider, start=method)
    children = [fake]
    try:
        ref = bench.Child(bench.run_reference, bench.MAX_BODY, True, start=method)
        children.append(ref)
        floor = Server("floor", ref, ref.hello["tap_url"] + "/v1/exchanges")
        taps = []
        for name, rate in (("tap", args.sample_rate), ("tap r=0", 0.0)):
            home = os.path.join(tmp, str(len(taps)))  # its config, store and journal
            os.mkdir(home)
            child = bench._fresh_sidecar(fake, home, args, args.queue_size, method)  # pinned with --pin
            children.append(child)
            taps.append(Server(name, child, child.hello["tap_url"] + "/v1/exchanges", child.hello["admin_url"], rate))
    except BaseException:
        for child in reversed(children):
            child.stop()
        raise
    if args.pin:
        bench.pin(os.getpid(), bench.TAP_CPU)
        bench.pin(fake.proc.pid, bench.ENGINE_CPU)
        bench.pin(ref.proc.pid, bench.TAP_CPU)
    return fake, floor, taps


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="The tap's CPU per exchange against the floor's, in alternating windows.")
    p.add_argument("--windows", type=int, default=20, help="rounds of floor, taps, floor (default 20)")
    p.add_argument("--window", type=float, default=1.0, help="measured seconds per server and window (default 1)")
    p.add_argument("--warmup", type=float, default=0.2, help="unmeasured seconds before each window (default 0.2)")
    p.add_argument("--sample-rate", type=float, default=0.05, help="the sampled tap's rate (default 0.05)")
    p.add_argument("--concurrency", type=int, default=32, help="requests in flight (default 32)")
    p.add_argument("--max-requests", type=int, default=10**7, help="request bound per window")
    p.add_argument("--queue-size", type=int, default=200_000,
                   help="the taps' hand-off: large, so no sampled claim is shed (default 200000)")
    p.add_argument("--workers", type=int, default=16, help="engine workers per sidecar (default 16)")
    p.add_argument("--pin", action="store_true", help="the load generator and the servers on CPU 0, engines on CPU 1")
    bench._quick(p, argv, windows=2, window=0.2, warmup=0.05, concurrency=8, queue_size=10_000, workers=4)
    args = p.parse_args(argv)
    if args.windows < 1 or args.window <= 0 or args.warmup < 0 or not 0.0 < args.sample_rate <= 1.0:
        p.error("need --windows >= 1, --window > 0, --warmup >= 0, 0 < --sample-rate <= 1")
    with tempfile.TemporaryDirectory(prefix="shadowtrial-bench-") as tmp:
        fake, floor, taps = start(args, tmp)
        try:
            asyncio.run(measure(floor, taps, args))
        finally:
            for child in (*(tap.child for tap in taps), floor.child, fake):
                child.stop()
    report(floor, taps, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
