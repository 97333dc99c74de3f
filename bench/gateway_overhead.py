"""Benchmark: what a logging callback costs a real LiteLLM proxy's serving path (issue 10, item 4).

    .venv/bin/python bench/gateway_overhead.py                      # 3 rounds x 1,000 requests per proxy
    .venv/bin/python bench/gateway_overhead.py --rounds 1 --requests 200 --throughput-requests 200   # a quick look
    .venv/bin/python bench/gateway_overhead.py --stream             # streamed answers instead
    .venv/bin/python bench/gateway_overhead.py --proxies null,up,stopped,hung --rounds 5   # the plugin's states

LiteLLM ``litellm[proxy]==1.80.0`` runs from the environment ``tests/litellm_proxy.py``
builds and caches (``~/.cache/shadowtrial/...``; about 35 s the first time). Six proxies,
one config, differing only in what is registered as a callback:

- **none** — no callback: the reference;
- **plugin, sidecar up** — shadowtrial's plugin (``sidecar.integrations.litellm``, default
  settings: 0.5 s timeout, 1 s flush, batches of 100) posting to a real sidecar (its own
  process, engine in another) with one running trial that matches every call and samples
  ``--sample-rate`` of them, so candidate and judge calls really run beside the load;
- **plugin, sidecar stopped** — the same plugin, its tap URL a port nothing listens on;
- **plugin, sidecar hung** — its tap URL a raw socket server that accepts connections and
  never reads or answers them (every POST runs into the plugin's timeout);
- **generic_api (unlicensed)** — LiteLLM's own generic API logger to a sink. In 1.80.0 it is
  an enterprise feature: without a licence it raises before queueing anything
  (``tests/integrations/FINDINGS.md``), so this row is the cost of that check and its
  logged traceback, not of sending;
- **null callback** (``--proxies null``) — a ``CustomLogger`` whose hook does nothing: what
  LiteLLM itself spends on calling any callback, the floor under the plugin's rows;
- **generic format -> sink** — a stand-in posting what the generic API logger would (JSON
  arrays of standard logging objects through LiteLLM's own ``safe_dumps`` and HTTP client,
  512 per batch or every 5 s) to the same sink (``GENERIC_SENDER`` in tests/litellm_proxy.py).

Load: one ``httpx.AsyncClient`` (keep-alive), the same chat completion (a system and a user
message of about 1 KB, ``max_tokens`` 256, key ``sk-team-a``) for every proxy, only to
127.0.0.1. Each round has two phases, and ``--rounds`` rounds are pooled:

- **latency**: one request at a time, round-robin over the proxies (the order rotated every
  cycle), ``--requests`` per proxy: p50 and p99 of the full request time;
- **throughput**: ``--throughput-requests`` per proxy at ``--concurrency`` in flight, the
  proxies taking turns in blocks of ``--block`` requests: requests/s = requests / time in
  that proxy's blocks.

Reported per proxy: p50, p99, requests/s, each as a ratio against *none*, and the proxy
process's CPU per request (user + system, from /proc, both phases) and its excess over
*none* (``CPU +ms``): on a shared machine the CPU figures move least. ``--proxies`` runs
only the named rows (and *none*); ``--pin`` puts the proxies on one core and everything
else of the benchmark on the other. A warm-up of
``--warmup`` requests per proxy is not counted. The fake upstream answers at once, so the
latencies are LiteLLM's own overhead plus loopback. ``others`` is the CPU the rest of the
machine used meanwhile: when it is high, compare only within the run. Speed is measured,
never asserted (DESIGN.md section 14). The run is bounded by its request counts and by
``--deadline`` seconds, and stops every process it started. ``--quick`` (the suite runs it)
prints every row on a few requests each, its proxies forked from one process that imported
LiteLLM once (``bench/_forked_proxies.py``) instead of each importing it, the fake upstream and
the sink on the benchmark's own event loop instead of processes of their own, the plugin rows
posting after 0.05 s instead of 1 s (the report waits for the sidecar to have an exchange).

Two options for telling a plugin's cost (tens of microseconds) from the run's noise (the
proxies' CPU per request moves by tenths of a millisecond between proxies on a shared machine):

- ``--plugin-cpu`` registers the plugin rows' callback through a timing shim (``TIMING_SHIM``)
  that adds up, inside the proxy, the thread CPU of the plugin's hook (and of a ``_map_pending``
  callback, if the plugin has one) and of its sender's background tasks (each step between
  awaits), and reports it per hook call, the mapping's part apart.
  What the event loop spends on the sender's socket outside those steps is not in it;
  the cost of one clock reading (measured when the shim loads) is taken off each step.
  Inside a proxy, the plugin's work costs several times what it costs in a loop outside one
  (the proxy's own work between two calls evicts the caches the plugin's code runs from):
  only a figure taken inside the proxy tells what the gateway pays.
- ``--plugin-profile N`` does what ``--plugin-cpu`` does with the same steps also run under
  cProfile (on thread CPU, so a loaded machine does not inflate it; its own overhead does,
  several times for small functions) and prints each plugin row's top ``N`` functions by own
  time, per hook call: where the plugin's time goes, not what it costs.
- ``--compare-root DIR`` adds, for each plugin row, the same row running the plugin from
  another checkout (``DIR``, e.g. a worktree of the base commit), marked ``[ref]``: before and
  after measured in one run, their requests interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pstats
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from tap import (  # noqa: E402
    CANDIDATE, HOST, INCUMBENT, JUDGE, QUESTION, SYSTEM, Child, _machine_busy, _own_cpu, _proc_cpu, pin, run_fake_provider,
    run_sidecar,
)

if TYPE_CHECKING:
    from tests.litellm_proxy import LiteLLMProxy

TEAM_KEY, TEAM = "sk-team-a", "team-a"
#: LiteLLM's own cost of calling a callback: a ``CustomLogger`` whose hooks do nothing.
NULL_NAME, NULL_CALLBACK = "null callback", "shadowtrial_null_callback.callback"
NULL_MODULE = '''
"""A LiteLLM callback that does nothing: what calling any callback costs the proxy."""
from litellm.integrations.custom_logger import CustomLogger


class NullCallback(CustomLogger):
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        return None


callback = NullCallback()
'''
#: ``--plugin-cpu``: the plugin rows' callback module, timing the plugin's own work inside the proxy.
TIMING_SHIM = '''
"""The shadowtrial plugin, its hook and its sender's background tasks timed (thread CPU)."""
import cProfile, gc, json, os, time
from sidecar.integrations.litellm import proxy_handler_instance as _plugin

_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plugin_cpu.json")
_ns = {"hook": 0, "background": 0, "calls": 0, "gc_in_hook": 0, "gc_in_hook_n": 0, "gc_in_map": 0, "gc_in_map_n": 0,
       "gc_all": 0, "gc_all_n": 0}
_clock = time.thread_time_ns
_gc = {"in_hook": False, "in_map": False, "t0": 0}


def _clock_cost():
    """What one reading of the clock adds to an interval it ends (the median of back-to-back
    readings): subtracted from every step timed, since a step's own work can be smaller."""
    readings = [_clock() for _ in range(2001)]
    deltas = sorted(b - a for a, b in zip(readings, readings[1:]))
    return deltas[len(deltas) // 2]


_COST = _clock_cost()
_ns["clock_cost"] = _COST


def _gc_timer(phase, info):
    """The garbage collections' CPU: all of the proxy's, and those that ran inside the hook."""
    if phase == "start":
        _gc["t0"] = _clock()
        return
    spent = _clock() - _gc["t0"]
    _ns["gc_all"] += spent
    _ns["gc_all_n"] += 1
    if _gc["in_hook"]:
        _ns["gc_in_hook"] += spent
        _ns["gc_in_hook_n"] += 1
    elif _gc["in_map"]:
        _ns["gc_in_map"] += spent
        _ns["gc_in_map_n"] += 1


gc.callbacks.append(_gc_timer)
#: ``--plugin-profile``: the same steps under cProfile too, on thread CPU, not wall time (its
#: overhead inflates the figures above).
_PROFILE = cProfile.Profile(time.thread_time_ns, 1e-9) if {profile} else None


class _Timed:
    """Awaits ``coro``, adding the thread CPU of each of its steps (between awaits) to ``background``."""

    def __init__(self, coro):
        self.coro = coro

    def __await__(self):
        it, value, error = self.coro.__await__(), None, None
        while True:
            t0 = _clock()
            if _PROFILE is not None:
                _PROFILE.enable()
            try:
                future = it.throw(error) if error is not None else it.send(value)
            except StopIteration as stop:
                _ns["background"] += _clock() - t0 - _COST
                return stop.value
            except BaseException:
                _ns["background"] += _clock() - t0 - _COST
                raise
            finally:
                if _PROFILE is not None:
                    _PROFILE.disable()
            _ns["background"] += _clock() - t0 - _COST
            value, error = None, None
            try:
                value = yield future
            except BaseException as exc:  # a cancellation (a flush's timeout) goes on into the coroutine
                error = exc


def _timed_method(method):
    async def timed(*args, **kwargs):
        return await _Timed(method(*args, **kwargs))
    return timed


_sender = getattr(_plugin, "sender", None)
if _sender is not None:  # a disabled plugin has none
    for _name in ("_flush", "_report_drops"):
        setattr(_sender, _name, _timed_method(getattr(_sender, _name)))
    if hasattr(_plugin, "_map_pending"):  # the callback that maps pending calls in batches
        _map = _plugin._map_pending

        def _timed_map(*args):
            if _gc["in_hook"]:  # called from the hook: already in the hook's figure
                return _map(*args)
            t0 = _clock()
            _gc["in_map"] = True
            if _PROFILE is not None:
                _PROFILE.enable()
            try:
                return _map(*args)
            finally:
                if _PROFILE is not None:
                    _PROFILE.disable()
                _gc["in_map"] = False
                spent = _clock() - t0 - _COST
                _ns["background"] += spent
                _ns["map"] = _ns.get("map", 0) + spent

        _plugin._map_pending = _timed_map
    _hook = _plugin.async_log_success_event

    async def _timed_hook(kwargs, response_obj, start_time, end_time):
        t0 = _clock()
        _gc["in_hook"] = True
        if _PROFILE is not None:
            _PROFILE.enable()
        try:
            return await _hook(kwargs, response_obj, start_time, end_time)
        finally:
            if _PROFILE is not None:
                _PROFILE.disable()
            _gc["in_hook"] = False
            _ns["hook"] += _clock() - t0 - _COST
            _ns["calls"] += 1
            if _ns["calls"] % 100 == 0:
                with open(_OUT + ".tmp", "w") as f:
                    json.dump(_ns, f)
                os.replace(_OUT + ".tmp", _OUT)
                if _PROFILE is not None:
                    _PROFILE.dump_stats(_OUT + ".prof")

    _plugin.async_log_success_event = _timed_hook
proxy_handler_instance = _plugin
'''
#: ``--proxies`` names -> rows.
SHORT = {
    "none": "none", "null": NULL_NAME, "up": "plugin, sidecar up", "stopped": "plugin, sidecar stopped",
    "hung": "plugin, sidecar hung", "generic_api": "generic_api (unlicensed)", "generic": "generic format -> sink",
}
#: ``--pin``: the proxies on one core, the load generator, upstream, sidecar and sink on the other.
PROXY_CPU, HELPER_CPU = 1, 0


def chosen(names: str) -> list[str]:
    """The rows ``--proxies`` names (``none`` always first: the reference)."""
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in SHORT]
    if unknown:
        raise SystemExit(f"--proxies: unknown {unknown}; choose from {list(SHORT)}")
    return [SHORT["none"]] + [SHORT[n] for n in wanted if n != "none"]


def pin_tree(pid: int, cpu: int) -> None:
    """Pin ``pid`` and its child processes (a uvicorn worker) to ``cpu``."""
    pin(pid, cpu)
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return
    for child in children:
        pin_tree(int(child), cpu)
PRICE = (2e-6, 8e-6)  # USD per token, the sidecar's list price for the incumbent (bench/tap.py)


# --- servers -------------------------------------------------------------------------


def run_sink(conn: Connection) -> None:
    """Takes any POST and answers 200 (the generic logger's endpoint)."""
    from aiohttp import web

    async def take(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200, text="{}", content_type="application/json")

    async def main() -> None:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/{path:.*}", take)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, HOST, 0).start()
        conn.send(f"http://{HOST}:{runner.addresses[0][1]}")
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        await runner.cleanup()
        conn.send("stopped")

    asyncio.run(main())


class HungServer:
    """Accepts TCP connections on 127.0.0.1 and never reads or answers; keeps them open until closed."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind((HOST, 0))
        self.sock.listen(1024)
        self.port: int = self.sock.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, name="hung-server", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            self.accepted.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.accepted:
            conn.close()


class Local:
    """A helper server on this process's event loop (``--quick``): ``hello`` as a :class:`Child`'s,
    its CPU in this process's."""

    def __init__(self, hello: str, close: Callable[[], Awaitable[Any]]) -> None:
        self.hello = hello
        self._close = close

    async def aclose(self) -> None:
        await self._close()


async def local_fake_provider() -> Local:
    """:func:`run_fake_provider`'s upstream, in this process."""
    from sidecar.demo.fake_provider import FakeModel, FakeProvider

    models = {INCUMBENT: FakeModel(quality=0.5), CANDIDATE: FakeModel(quality=0.55), JUDGE: FakeModel(judge=True)}
    provider = FakeProvider(models, seed=1, host=HOST)
    await provider.__aenter__()
    return Local(provider.base_url, lambda: provider.__aexit__(None, None, None))


async def local_sink() -> Local:
    """:func:`run_sink`'s sink, in this process."""
    from aiohttp import web

    async def take(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200, text="{}", content_type="application/json")

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/{path:.*}", take)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, HOST, 0).start()
    return Local(f"http://{HOST}:{runner.addresses[0][1]}", runner.cleanup)


# --- load -------------------------------------------------------------------------------


@dataclass
class Figures:
    """One proxy's measurements, pooled over rounds."""

    latencies: list[float] = field(default_factory=list)
    throughput_requests: int = 0
    throughput_seconds: float = 0.0
    errors: int = 0
    cpu_seconds: float = 0.0
    requests: int = 0  # all measured requests, both phases (for CPU per request)

    def p(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000.0

    @property
    def rps(self) -> float:
        return self.throughput_requests / self.throughput_seconds if self.throughput_seconds else 0.0


def request_body(stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": INCUMBENT,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}],
        "max_tokens": 256,
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


async def one(client: httpx.AsyncClient, proxy: LiteLLMProxy, body: dict[str, Any]) -> tuple[float, bool]:
    t0 = time.perf_counter()
    try:
        async with client.stream("POST", f"{proxy.base_url}/chat/completions", json=body) as r:
            async for _ in r.aiter_raw():
                pass
            ok = r.status_code == 200
    except httpx.HTTPError:
        ok = False
    return time.perf_counter() - t0, ok


async def latency_phase(client: httpx.AsyncClient, proxies: list[LiteLLMProxy], figures: dict[str, Figures],
                        n: int, body: dict[str, Any], deadline: float) -> None:
    for i in range(n):
        if time.monotonic() > deadline:
            return
        shift = i % len(proxies)
        for proxy in proxies[shift:] + proxies[:shift]:
            seconds, ok = await one(client, proxy, body)
            f = figures[proxy.name]
            f.requests += 1
            if ok:
                f.latencies.append(seconds)
            else:
                f.errors += 1


async def throughput_phase(client: httpx.AsyncClient, proxies: list[LiteLLMProxy], figures: dict[str, Figures],
                           n: int, block: int, concurrency: int, body: dict[str, Any], deadline: float) -> None:
    async def burst(proxy: LiteLLMProxy, count: int) -> None:
        queue = iter(range(count))
        f = figures[proxy.name]

        async def worker() -> None:
            for _ in queue:
                _, ok = await one(client, proxy, body)
                f.requests += 1
                f.errors += 0 if ok else 1

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, count))))
        f.throughput_seconds += time.perf_counter() - t0
        f.throughput_requests += count

    done = 0
    turn = 0
    while done < n and time.monotonic() < deadline:
        count = min(block, n - done)
        shift = turn % len(proxies)
        for proxy in proxies[shift:] + proxies[:shift]:
            await burst(proxy, count)
        done += count
        turn += 1


# --- the run ----------------------------------------------------------------------------


async def create_trial(admin: str, rate: float) -> str:
    async with httpx.AsyncClient(timeout=30.0, trust_env=False) as c:
        r = await c.post(f"{admin}/v1/trials", json={
            "team": TEAM, "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE,
            "spend_cap_usd": 1000.0, "sample_rate": rate, "audit_share": 0.0,
            "on_decision": "continue",  # keep judging past the decision: the load stays what it measures
        })
        r.raise_for_status()
        return str(r.json()["id"])


async def sidecar_report(admin: str, trial_id: str, wait_s: float = 0.0) -> str:
    """The sidecar's counts; ``wait_s``: first wait (polling, up to that long) for an exchange
    to have arrived (``--quick`` sends a few, and reports right after)."""
    async with httpx.AsyncClient(timeout=30.0, trust_env=False) as c:
        deadline = time.monotonic() + wait_s
        while True:
            metrics = (await c.get(f"{admin}/metrics")).text
            received = [line for line in metrics.splitlines() if line.startswith("shadowtrial_exchanges_received_total")]
            if time.monotonic() >= deadline or any(not line.endswith(" 0") for line in received):
                break
            await asyncio.sleep(0.05)  # polling with a deadline
        trial = (await c.get(f"{admin}/v1/trials/{trial_id}")).json()
    wanted = ("shadowtrial_exchanges_received_total", "shadowtrial_plugin_dropped_total")
    lines = [line for line in metrics.splitlines() if line.startswith(wanted) and not line.endswith(" 0")]
    outcomes = {k: v for k, v in trial["funnel"]["outcomes"].items() if v}
    return "; ".join(lines) + f"; trial funnel {outcomes}"


def proxy_cpu(proxy: LiteLLMProxy) -> float:
    assert proxy.process is not None
    return _proc_cpu(proxy.process.pid) or 0.0


def helpers_cpu(children: list[Child]) -> float:
    """CPU seconds so far of this process (the load generator) and the helper children."""
    return _own_cpu() + sum(c.cpu_seconds() or 0.0 for c in children)


async def measure(
    args: argparse.Namespace, proxies: list[LiteLLMProxy], children: list[Child],
) -> tuple[dict[str, Figures], float, float, float]:
    """Figures per proxy, wall seconds, CPU seconds of the helpers (client, upstream, sidecar,
    sink) and of everything else on the machine, over the measured part."""
    figures = {p.name: Figures() for p in proxies}
    body = request_body(args.stream)
    limits = httpx.Limits(max_connections=args.concurrency + 4, max_keepalive_connections=args.concurrency + 4)
    headers = {"Authorization": f"Bearer {TEAM_KEY}"}
    deadline = time.monotonic() + args.deadline
    async with httpx.AsyncClient(limits=limits, timeout=60.0, headers=headers, trust_env=False) as client:
        for proxy in proxies:  # warm-up, not counted
            for _ in range(args.warmup):
                await one(client, proxy, body)
        cpu0 = {p.name: proxy_cpu(p) for p in proxies}
        wall0, busy0, helpers0 = time.monotonic(), _machine_busy(), helpers_cpu(children)
        for r in range(args.rounds):
            print(f"  round {r + 1}/{args.rounds}: latency ...", flush=True)
            await latency_phase(client, proxies, figures, args.requests, body, deadline)
            print(f"  round {r + 1}/{args.rounds}: throughput ...", flush=True)
            await throughput_phase(client, proxies, figures, args.throughput_requests, args.block, args.concurrency,
                                   body, deadline)
        wall, busy1, helpers = time.monotonic() - wall0, _machine_busy(), helpers_cpu(children) - helpers0
        for p in proxies:
            figures[p.name].cpu_seconds = proxy_cpu(p) - cpu0[p.name]
    if time.monotonic() > deadline:
        print(f"  stopped at the --deadline of {args.deadline:.0f} s: figures cover what was measured")
    ours = sum(f.cpu_seconds for f in figures.values()) + helpers
    machine = (busy1 - busy0) if busy0 is not None and busy1 is not None else float("nan")
    return figures, wall, helpers, machine - ours


def report(figures: dict[str, Figures], order: list[str], wall: float, helpers_cpu: float, others_cpu: float) -> None:
    ref = figures[order[0]]
    print()
    head = (f"{'callback':<32}{'n':>6}{'err':>5}{'p50 ms':>9}{'p99 ms':>9}{'p50 x':>8}{'p99 x':>8}"
            f"{'req/s':>9}{'req/s x':>9}{'CPU ms/req':>12}{'CPU +ms':>9}")
    print(head)
    print("-" * len(head))
    for name in order:
        f = figures[name]
        if not f.latencies:
            print(f"{name:<32}{'no successful request':>40}")
            continue
        cpu = f.cpu_seconds / f.requests * 1000.0 if f.requests else float("nan")
        ref_cpu = ref.cpu_seconds / ref.requests * 1000.0 if ref.requests else float("nan")
        print(f"{name:<32}{len(f.latencies):>6}{f.errors:>5}{f.p(0.50):>9.2f}{f.p(0.99):>9.2f}"
              f"{f.p(0.50) / ref.p(0.50):>8.3f}{f.p(0.99) / ref.p(0.99):>8.3f}"
              f"{f.rps:>9.1f}{(f.rps / ref.rps if ref.rps else float('nan')):>9.3f}{cpu:>12.3f}{cpu - ref_cpu:>+9.3f}")
    proxies_cpu = sum(f.cpu_seconds for f in figures.values())
    print(f"\nwall {wall:.0f} s; CPU-s: proxies {proxies_cpu:.0f}, load generator + upstream + sidecar + sink "
          f"{helpers_cpu:.0f}, others (outside this benchmark) {others_cpu:.0f} "
          f"({others_cpu / wall * 100 if wall else 0:.0f}% of one core); load average now {_loadavg()}")
    means = {name: statistics.fmean(figures[name].latencies) * 1000 for name in order if figures[name].latencies}
    print("mean latency ms: " + ", ".join(f"{k} {v:.2f}" for k, v in means.items()))


def report_plugin_cpu(proxies: list[LiteLLMProxy], profile: int = 0) -> None:
    """``--plugin-cpu``: the plugin's own thread CPU per hook call, as the timing shim counted it;
    ``--plugin-profile N``: also the top ``N`` functions of its cProfile (by own time)."""
    print("\nplugin's own CPU inside the proxy (timing shim; per hook call, all calls since the start):")
    for proxy in proxies:
        path = proxy.config.parent / "plugin_cpu.json"
        if not path.exists():
            continue
        ns = json.loads(path.read_text())
        calls = max(1, int(ns["calls"]))
        print(f"  {proxy.name:<34} calls {ns['calls']:>7}  hook {ns['hook'] / calls / 1000:7.1f} us  "
              f"background {ns['background'] / calls / 1000:6.1f} us  total {(ns['hook'] + ns['background']) / calls / 1000:7.1f} us"
              + (f" (of which mapping {ns['map'] / calls / 1000:.1f} us)" if "map" in ns else "")
              + (f"  (clock reading {ns['clock_cost'] / 1000:.1f} us, taken off each step)" if "clock_cost" in ns else ""))
        if "gc_all" in ns:
            print(f"    garbage collections: {ns['gc_in_hook_n']} inside the hook, {ns['gc_in_hook'] / calls / 1000:.1f} us "
                  f"per hook call of the hook's figure; {ns.get('gc_in_map_n', 0)} inside the mapping, "
                  f"{ns.get('gc_in_map', 0) / calls / 1000:.1f} us per hook call of its figure; the whole proxy's {ns['gc_all_n']}, "
                  f"{ns['gc_all'] / calls / 1000:.1f} us per hook call")
        prof = path.parent / "plugin_cpu.json.prof"
        if profile and prof.exists():
            stats = pstats.Stats(str(prof))
            print(f"    cProfile, top {profile} by own time (us per hook call: own, cumulative; calls per hook call):")
            rows = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:profile]  # type: ignore[attr-defined]
            for (file, line, func), (_cc, nc, tt, ct, _callers) in rows:
                where = f"{Path(file).name}:{line}({func})" if line else func
                print(f"    {tt / calls * 1e6:8.1f} {ct / calls * 1e6:8.1f} {nc / calls:6.2f}  {where}")


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


async def amain(args: argparse.Namespace) -> int:
    # Imported here, not at the top: the helper processes (spawned, so they import this module
    # again) need none of it, and it brings pytest.
    from _forked_proxies import ForkedProxy, Zygote
    from tests.litellm_proxy import (
        GENERIC_CALLBACK, LITELLM_GENERIC_API, PLUGIN_CALLBACK, Deployment, LiteLLMProxy, ensure_litellm_venv,
        free_port, proxy_env, start_proxies, write_proxy_dir,
    )

    venv = ensure_litellm_venv()
    print(f"LiteLLM environment: {venv}; load average {_loadavg()}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="gateway-overhead-"))
    # --quick: every row, each proxy forked from one process that imported LiteLLM once
    # (bench/_forked_proxies.py); it imports while the helpers below start.
    zygote = Zygote(venv, proxy_env(), tmp / "zygote.log") if args.quick else None
    # --quick: the fake upstream and the sink on this process's event loop, not spawned.
    fake: Child | Local = await local_fake_provider() if args.quick else Child(run_fake_provider)
    sidecar: Child | None = None
    sink: Child | Local | None = None
    hung = HungServer()
    proxies: list[LiteLLMProxy] = []
    try:
        sidecar = Child(run_sidecar, fake.hello, str(tmp))
        sink = await local_sink() if args.quick else Child(run_sink)
        if zygote is not None:
            zygote.wait_ready()
        trial_id = await create_trial(sidecar.hello["admin_url"], args.sample_rate)
        stopped = free_port()
        tap = {
            "plugin, sidecar up": f"{sidecar.hello['tap_url']}/v1/exchanges",
            "plugin, sidecar stopped": f"http://{HOST}:{stopped}/v1/exchanges",
            "plugin, sidecar hung": f"http://{HOST}:{hung.port}/v1/exchanges",
        }
        deployments = [Deployment(INCUMBENT, INCUMBENT, PRICE)]
        specs: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {"none": ((), {})}
        for name, url in tap.items():
            specs[name] = ((PLUGIN_CALLBACK,), {"LITELLM_SHADOWTRIAL_TAP_URL": url, "LITELLM_SHADOWTRIAL_GATEWAY": "bench"})
            if args.quick:  # a few requests: their exchanges reach the sidecar before the report
                specs[name][1]["LITELLM_SHADOWTRIAL_FLUSH_S"] = "0.05"
            elif args.flush_s is not None:
                specs[name][1]["LITELLM_SHADOWTRIAL_FLUSH_S"] = str(args.flush_s)
        specs["generic_api (unlicensed)"] = ((LITELLM_GENERIC_API,), {"GENERIC_LOGGER_ENDPOINT": f"{sink.hello}/generic"})
        specs["generic format -> sink"] = ((GENERIC_CALLBACK,), {"SHADOWTRIAL_TEST_GENERIC_ENDPOINT": f"{sink.hello}/generic"})
        specs[NULL_NAME] = ((NULL_CALLBACK,), {})
        if args.proxies:
            specs = {name: specs[name] for name in chosen(args.proxies)}
        else:
            del specs[NULL_NAME]
        if args.compare_root:  # the same plugin rows, the plugin imported from another checkout
            ref_root = str(Path(args.compare_root).resolve())
            for name in [n for n in specs if n in tap]:
                specs[f"{name} [ref]"] = (specs[name][0], {**specs[name][1], "PYTHONPATH": ref_root})
        for i, (name, (callbacks, env)) in enumerate(specs.items()):
            config = write_proxy_dir(tmp / f"proxy{i}", upstream=fake.hello, deployments=deployments,
                                     callbacks=[c for c in callbacks if c != NULL_CALLBACK])
            if (args.plugin_cpu or args.plugin_profile) and PLUGIN_CALLBACK in callbacks:
                shim = TIMING_SHIM.replace("{profile}", str(bool(args.plugin_profile)))
                (config.parent / "shadowtrial_callback.py").write_text(shim)
            if NULL_CALLBACK in callbacks:  # written here: a callback only this benchmark uses
                (config.parent / "shadowtrial_null_callback.py").write_text(NULL_MODULE)
                settings = json.loads(config.read_text())
                settings["litellm_settings"]["callbacks"] = [NULL_CALLBACK]
                config.write_text(json.dumps(settings, indent=2))
            if zygote is not None and "PYTHONPATH" not in env:  # a fork imports from the zygote's path
                proxies.append(ForkedProxy(name, venv, config, proxy_env(env), zygote=zygote))
            else:
                proxies.append(LiteLLMProxy(name, venv, config, proxy_env(env)))
        t0 = time.monotonic()
        start_proxies(proxies, timeout_s=240.0)
        if args.pin:
            for proxy in proxies:
                assert proxy.process is not None
                pin_tree(proxy.process.pid, PROXY_CPU)
            for child in (fake, sidecar, sink):
                if isinstance(child, Child):
                    pin_tree(child.proc.pid, HELPER_CPU)
            pin_tree(os.getpid(), HELPER_CPU)
        print(f"{len(proxies)} proxies ready in {time.monotonic() - t0:.1f} s; measuring "
              f"({args.rounds} x {args.requests} sequential + {args.rounds} x {args.throughput_requests} at "
              f"concurrency {args.concurrency} per proxy{', streamed' if args.stream else ''})", flush=True)
        figures, wall, helpers, others = await measure(args, proxies, [c for c in (fake, sidecar, sink) if isinstance(c, Child)])
        report(figures, list(specs), wall, helpers, others)
        if args.plugin_cpu or args.plugin_profile:
            report_plugin_cpu(proxies, args.plugin_profile)
        print(f"sidecar: {await sidecar_report(sidecar.hello['admin_url'], trial_id, wait_s=60.0 if args.quick else 0.0)}")
        print(f"hung server: {len(hung.accepted)} connection(s) accepted, none answered")
        return 0
    finally:
        for proxy in proxies:  # all asked to stop first: their shutdowns overlap
            if proxy.process is not None and proxy.process.poll() is None:
                proxy.process.send_signal(signal.SIGTERM)
        for proxy in proxies:
            proxy.stop()
        if zygote is not None:
            zygote.close()
        hung.close()
        for child in (sink, sidecar, fake):
            if isinstance(child, Local):
                await child.aclose()
            elif child is not None:
                child.stop()
        if args.quick:  # the suite runs it: leave no directory behind (a measuring run keeps its logs)
            shutil.rmtree(tmp, ignore_errors=True)



def _quick(parser: argparse.ArgumentParser, argv: list[str] | None, **small: object) -> None:
    """``--quick``: a run of seconds that shows the benchmark still works (``make test`` runs every
    benchmark so, tests/bench/); its figures are not for reading. Flags given explicitly still win."""
    parser.add_argument("--quick", action="store_true", help="a run of seconds that proves the benchmark works")
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**small)

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=1000, help="sequential requests per proxy per round")
    parser.add_argument("--throughput-requests", type=int, default=1000, help="concurrent requests per proxy per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--block", type=int, default=100, help="throughput requests per proxy turn")
    parser.add_argument("--warmup", type=int, default=30, help="uncounted requests per proxy first")
    parser.add_argument("--sample-rate", type=float, default=0.05, help="the running trial's rate (sidecar up)")
    parser.add_argument("--stream", action="store_true", help="streamed answers (stream_options.include_usage)")
    parser.add_argument("--deadline", type=float, default=2400.0, help="stop measuring after this many seconds")
    parser.add_argument("--proxies", default="", help=f"comma-separated rows to run besides none, of {list(SHORT)} "
                        "(default: all but null)")
    parser.add_argument("--pin", action="store_true", help=f"pin the proxies to CPU {PROXY_CPU} and the load "
                        f"generator, upstream, sidecar and sink to CPU {HELPER_CPU}")
    parser.add_argument("--plugin-cpu", action="store_true", help="time the plugin's own work inside the proxy "
                        "(a timing shim around its hook and its sender's tasks)")
    parser.add_argument("--plugin-profile", type=int, default=0, metavar="N", help="--plugin-cpu, and print "
                        "the top N functions of a cProfile of the plugin's hook and tasks inside each plugin proxy")
    parser.add_argument("--flush-s", type=float, default=None, help="the plugin rows' LITELLM_SHADOWTRIAL_FLUSH_S "
                        "(default: the plugin's own default)")
    parser.add_argument("--compare-root", default="", help="also run each plugin row with the plugin imported "
                        "from this checkout (rows marked [ref]): before and after in one run")
    _quick(parser, argv, requests=3, throughput_requests=4, rounds=1, block=4, warmup=1, deadline=300.0)
    args = parser.parse_args(argv)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
