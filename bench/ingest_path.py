"""Benchmark: the tap's ``ingest`` function alone, in this process, per exchange — at sample
rate 0, at 5% with the hand-off full (a flood: every sampled claim is shed), at 5% with
room (every sampled claim journaled), and at rate 0 with the retention window buffering every
exchange. It separates what the tap's own code costs under a flood
from what the machine costs it (bench/tap.py measures the whole server).

    .venv/bin/python bench/ingest_path.py [--quick]

``--quick`` runs in about a second (``make test`` runs it so, tests/bench/): its figures are not for reading.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import atexit
import json
import shutil
import tempfile
import time
from sidecar.telemetry.counters import TapCounters
from types import SimpleNamespace
from sidecar.ingest.intake import ingest
from sidecar.ingest.routing import RoutingTable, Route, Routes
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.journal import Journal
from sidecar.ingest.handoff import Handoff
import tap as benchtap
QUICK = "--quick" in sys.argv[1:]
make = benchtap.body_maker(100, "m")
bodies = [make(i) for i in range(10 if QUICK else 300)]
ex0 = json.loads(bodies[0])[0]
def rt_for(rate, full, journal):
    rt = SimpleNamespace()
    rt.routing = RoutingTable(); rt.routing.current = Routes([Route("t1", ex0["team"], ex0["model"], None, None, rate, "local", True)])
    h = Handoff(10000)
    if full: h.offer_many([object()] * 10000)
    rt.sinks = {"local": h}; rt.journals = {"local": journal} if journal is not None else {}; rt.funnel = FunnelCounter(); rt.counters = TapCounters()
    rt.outbox_full = False
    rt.retention = None  # the retention window off: the tap path as it was measured
    return rt
def bench(rt):
    best = 1e9
    for _ in range(3):
        t = time.perf_counter()
        for b in bodies: ingest(rt, b, "application/json")
        best = min(best, time.perf_counter() - t)
    return best / (len(bodies) * 100) * 1e6
tmp = tempfile.mkdtemp(); atexit.register(shutil.rmtree, tmp, True)  # the journal's files go with the run
j = Journal(tmp); j.open(); j.forget_previous()
# The reference, in the same run: the typed msgspec decode of the same bodies (the tap's
# schema), the least any tap must do after reading a body. Process CPU, min of interleaved
# repeats, so that what other processes take from the machine counts least.
import msgspec
from sidecar.ingest.wire import Exchange
_typed = msgspec.json.Decoder(list[Exchange])
def cpu(fn) -> float:
    t = time.process_time()
    for b in bodies:
        fn(b)
    return time.process_time() - t
runs = {"decode": None, "rate 0": rt_for(0.0, False, None), "rate 0.05 room": rt_for(0.05, False, j)}
best = dict.fromkeys(runs, float("inf"))
for _ in range(3 if QUICK else 20):
    for name, rt in runs.items():
        best[name] = min(best[name], cpu(_typed.decode if rt is None else (lambda b, rt=rt: ingest(rt, b, "application/json"))))
        if rt is not None:
            rt.sinks["local"]._items.clear()
n = len(bodies) * 100
print(f"typed decode    : {best['decode'] / n * 1e6:.2f} us/exchange (process CPU; the reference)")
for name in ("rate 0", "rate 0.05 room"):
    print(f"{name:<16}: {best[name] / n * 1e6:.2f} us/exchange of process CPU = {best[name] / best['decode']:.2f}x the typed decode")
print(f"rate 0          : {bench(rt_for(0.0, False, None)):.2f} us/exchange")
print(f"rate 0.05 full  : {bench(rt_for(0.05, True, j)):.2f} us/exchange")
print(f"rate 0.05 room  : {bench(rt_for(0.05, False, j)):.2f} us/exchange (journal writes)")
# The retention window's share of the tap's path: an append to its bounded buffer (the writer
# that seals and stores runs off this path and is not started here).
from sidecar.config import RetentionConfig
from sidecar.seal import Sealer
from sidecar.retention.window import RetentionWindow
kept = rt_for(0.0, False, None)
kept.retention = RetentionWindow(RetentionConfig(key_env="K", buffer_size=10_000_000), Sealer(os.urandom(32)),
                                 None, kept.counters, default_retention=lambda team: True)  # type: ignore[arg-type]
def bench_drained(rt):
    """As bench(), the buffer emptied after each body as the writer would (else the run would
    measure the garbage collector walking 90,000 exchanges no writer took)."""
    best = 1e9
    for _ in range(3):
        t = time.perf_counter()
        for b in bodies:
            ingest(rt, b, "application/json")
            rt.retention._buffer.clear()
        best = min(best, time.perf_counter() - t)
    return best / (len(bodies) * 100) * 1e6
base, with_window = bench(rt_for(0.0, False, None)), bench_drained(kept)
print(f"rate 0 retained : {with_window:.2f} us/exchange ({with_window / base:.2f}x rate 0 without the window)")
