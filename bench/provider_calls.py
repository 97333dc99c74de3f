"""Benchmark: CPU per provider call, against a bare aiohttp POST in the same run.

    .venv/bin/python bench/provider_calls.py [--calls 400] [--rounds 5] [--concurrency 16] [--profile]

The fake provider (:class:`sidecar.fake_provider.FakeProvider`, zero latency)
runs in a child process, so its CPU is not counted against the client; it is
reported separately (from ``/proc``). This process makes the calls, one
variant after another, interleaved round by round, and reports the CPU time
(``time.process_time``: user + system of this process) per call:

- **aiohttp** — the reference: a bare ``aiohttp.ClientSession`` POST of the
  same JSON body (encoded with msgspec), the answer decoded with msgspec;
- **httpx** — the same through a bare ``httpx.AsyncClient`` (``trust_env=False``),
  to separate the HTTP library's cost from ours;
- **provider** — the real client, ``make_provider("openai", ...).chat(...)``,
  and for judge-style calls ``ProviderCompleter.complete`` over it (what the
  engine calls);
- **anthropic** — ``make_provider("anthropic", ...)`` for candidate-style calls.

Two call shapes: *candidate* (an exchange's system + user message, about 0.6 KB,
answer of 5–40 filler words) and *judge* (the rubric and the rendered pair,
about 3 KB, a one-line verdict). Two modes: sequential (one call at a time) and
concurrent (``--concurrency`` calls in flight). Each number is the median over
``--rounds`` rounds; the ratio column is the median of the per-round ratios to
the aiohttp reference of the same round, which is what to compare across runs
on a noisy 2-core machine. Also reported: the judge package's own CPU per judged
case (prompt rendering for the reservation bound and the call, label parsing).

``--profile`` runs the provider variant under cProfile instead and prints the
top functions by own time and by cumulative time. Speed is reported, never
asserted (DESIGN.md section 14).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import multiprocessing as mp
import os
import pstats
import statistics
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import msgspec

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from judge.labels import parse_labels  # noqa: E402
from judge.paired import judge_input_upper_bound  # noqa: E402
from judge.prompt import render_judge_messages  # noqa: E402
from judge.rubric import DEFAULT_PAIRWISE_RUBRIC, get_rubric  # noqa: E402
from judge.version import JudgeSpec  # noqa: E402
from sidecar.engine.completer_adapter import ProviderCompleter  # noqa: E402
from sidecar.demo.fake_provider import FakeModel, FakeProvider  # noqa: E402
from sidecar.providers.base import ChatRequest, Provider  # noqa: E402
from sidecar.providers.factory import make_provider  # noqa: E402

HOST = "127.0.0.1"
CANDIDATE = "bench-candidate"
JUDGE = "bench-judge"
SHADOW_HEADERS = {"x-shadowtrial-trial": "trial-0123456789abcdef"}
AUDIT_SHARE = 0.1  # DESIGN.md section 7: 10% of cases get a second, swapped judge call

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
CONVERSATION: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
CANDIDATE_ANSWER = "Answer from bench-candidate ⟨q=0.620⟩ " + " ".join(["the answer weighs each option"] * 6)
JUDGE_SPEC = JudgeSpec(name="bench", model=JUDGE, rubric_id=DEFAULT_PAIRWISE_RUBRIC, temperature=0.0, max_tokens=512)


# --- the fake provider, in a child process ---------------------------------------------------


def run_fake_provider(conn: Connection) -> None:
    async def main() -> None:
        models = {CANDIDATE: FakeModel(quality=0.6), JUDGE: FakeModel(judge=True)}
        async with FakeProvider(models, seed=1, host=HOST) as fp:
            fp.requests = _Discard()  # a long run must not grow the recorded-request list
            conn.send(fp.root_url)
            loop = asyncio.get_running_loop()
            stop = asyncio.Event()
            loop.add_reader(conn.fileno(), stop.set)
            await stop.wait()
            loop.remove_reader(conn.fileno())

    asyncio.run(main())


class _Discard(list[Any]):
    def append(self, item: Any) -> None:
        pass


class Child:
    """The fake provider's process. ``start="spawn"`` (a full run): a fresh interpreter, which
    imports the fake provider again (about 0.6 s of CPU); ``"fork"`` (``--quick``): forked from this
    process, which imported it, only before this process runs an event loop or a second thread."""

    def __init__(self, start: str = "spawn") -> None:
        if start == "fork" and (_loop_running() or threading.active_count() != 1):
            raise RuntimeError("the fake provider is forked only before this process starts its event loop")
        ctx = mp.get_context(start)
        self.conn, child_conn = ctx.Pipe()
        self.proc = ctx.Process(target=run_fake_provider, args=(child_conn,), daemon=True)
        self.proc.start()
        self.root_url: str = self.conn.recv()

    def cpu_seconds(self) -> float | None:
        """user + system CPU time of the child so far, from /proc (None elsewhere)."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.conn.send("stop")
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


# --- the call variants -------------------------------------------------------------------------

Call = Callable[[], Awaitable[str]]


def candidate_request() -> ChatRequest:
    return ChatRequest(
        model=CANDIDATE,
        messages=[dict(m) for m in CONVERSATION],
        params={"temperature": 0.7, "max_tokens": 512},
        headers=SHADOW_HEADERS,
    )


def judge_messages() -> list[dict[str, object]]:
    return render_judge_messages(get_rubric(DEFAULT_PAIRWISE_RUBRIC).text, CONVERSATION, ANSWER, CANDIDATE_ANSWER)


def openai_body(model: str, messages: list[dict[str, Any]], max_tokens: int, temperature: float) -> dict[str, Any]:
    return {"temperature": temperature, "max_tokens": max_tokens, "model": model, "messages": messages}


_ANY = msgspec.json.Decoder()


def _text(data: Any) -> str:
    return str(data["choices"][0]["message"]["content"])


class Variants:
    """Builds the calls; owns the clients of one run."""

    def __init__(self, root_url: str, concurrency: int) -> None:
        self.root_url = root_url
        self.base_url = f"{root_url}/v1"
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency))
        self.httpx = httpx.AsyncClient(
            timeout=httpx.Timeout(30.0), limits=httpx.Limits(max_connections=concurrency), trust_env=False
        )
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        self.openai: Provider = make_provider("openai", self.base_url, "sk-bench", limits=limits)
        self.anthropic: Provider = make_provider("anthropic", root_url, "sk-bench", limits=limits)
        self.completer = ProviderCompleter(self.openai, JUDGE, SHADOW_HEADERS)

    async def aclose(self) -> None:
        await self.session.close()
        await self.httpx.aclose()
        await self.openai.aclose()
        await self.anthropic.aclose()

    def aiohttp_call(self, model: str, messages: list[dict[str, Any]], max_tokens: int, temperature: float) -> Call:
        url = f"{self.base_url}/chat/completions"
        headers = {"authorization": "Bearer sk-bench", "content-type": "application/json", **SHADOW_HEADERS}

        async def call() -> str:
            data = msgspec.json.encode(openai_body(model, messages, max_tokens, temperature))
            async with self.session.post(url, data=data, headers=headers) as response:
                return _text(_ANY.decode(await response.read()))

        return call

    def httpx_call(self, model: str, messages: list[dict[str, Any]], max_tokens: int, temperature: float) -> Call:
        url = f"{self.base_url}/chat/completions"
        headers = {"authorization": "Bearer sk-bench", "content-type": "application/json", **SHADOW_HEADERS}

        async def call() -> str:
            data = msgspec.json.encode(openai_body(model, messages, max_tokens, temperature))
            response = await self.httpx.post(url, content=data, headers=headers)
            return _text(_ANY.decode(response.content))

        return call

    def calls(self, shape: str) -> dict[str, Call]:
        if shape == "candidate":
            request = candidate_request()
            args = (CANDIDATE, request.messages, 512, 0.7)

            async def provider() -> str:
                result = await self.openai.chat(request)
                assert result.ok, result
                return result.content or ""

            async def anthropic() -> str:
                result = await self.anthropic.chat(request)
                assert result.ok, result
                return result.content or ""

            return {
                "aiohttp": self.aiohttp_call(*args),
                "httpx": self.httpx_call(*args),
                "provider": provider,
                "anthropic": anthropic,
            }
        messages = judge_messages()
        jargs = (JUDGE, messages, JUDGE_SPEC.max_tokens, JUDGE_SPEC.temperature)

        async def completer() -> str:
            completion = await self.completer.complete(
                JUDGE, messages, temperature=JUDGE_SPEC.temperature, max_tokens=JUDGE_SPEC.max_tokens
            )
            assert completion.ok, completion
            return completion.text

        return {"aiohttp": self.aiohttp_call(*jargs), "httpx": self.httpx_call(*jargs), "provider": completer}


async def run_calls(call: Call, n: int, concurrency: int) -> None:
    if concurrency <= 1:
        for _ in range(n):
            await call()
        return
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await call()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


@dataclass
class Sample:
    cpu_us: list[float] = field(default_factory=list)
    wall_us: list[float] = field(default_factory=list)
    server_us: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)


async def measure(call: Call, n: int, concurrency: int, child: Child) -> tuple[float, float, float | None]:
    """CPU µs per call of this process, wall µs per call, the fake provider's CPU µs per call."""
    server0 = child.cpu_seconds()
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await run_calls(call, n, concurrency)
    cpu1, wall1 = time.process_time(), time.perf_counter()
    server1 = child.cpu_seconds()
    server = (server1 - server0) / n * 1e6 if server0 is not None and server1 is not None else None
    return (cpu1 - cpu0) / n * 1e6, (wall1 - wall0) / n * 1e6, server


def judge_cpu_per_case(repeats: int = 2000) -> dict[str, float]:
    """The judge package's CPU per judged case, in µs, outside the provider calls."""
    rubric = get_rubric(DEFAULT_PAIRWISE_RUBRIC).text
    reply = "Assistant B's answer is somewhat better. Verdict: [[B>A]]"

    def per_call(fn: Callable[[], object]) -> float:
        fn()
        t0 = time.process_time()
        for _ in range(repeats):
            fn()
        return (time.process_time() - t0) / repeats * 1e6

    bound = per_call(lambda: judge_input_upper_bound(CONVERSATION, ANSWER, CANDIDATE_ANSWER, JUDGE_SPEC))
    render = per_call(lambda: render_judge_messages(rubric, CONVERSATION, ANSWER, CANDIDATE_ANSWER))
    parse = per_call(lambda: parse_labels(reply))
    # The engine bounds the judge input twice per case (reservation and settlement).
    calls = 1.0 + AUDIT_SHARE
    return {
        "judge_input_upper_bound": bound,
        "render_judge_messages": render,
        "parse_labels": parse,
        "per judged case": 2 * bound + calls * (render + parse),
    }


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _fmt(value: float | None, spec: str = "8.0f") -> str:
    return format(value, spec) if value is not None and value == value else "       -"


async def amain(args: argparse.Namespace, child: Child | None = None) -> int:
    """``child``: the fake provider, if started already (``--quick`` forks it)."""
    child = child or Child()
    try:
        variants = Variants(child.root_url, args.concurrency)
        try:
            if args.profile:
                return await profile(variants, args)
            results: dict[tuple[str, str, str], Sample] = {}
            modes = (("sequential", 1), ("concurrent", args.concurrency))
            for shape in ("candidate", "judge"):
                calls = variants.calls(shape)
                for name, call in calls.items():  # warm up every connection pool and code path
                    await run_calls(call, args.warmup, args.concurrency)
                for mode, concurrency in modes:
                    for _ in range(args.rounds):
                        reference = None
                        for name, call in calls.items():
                            cpu, wall, server = await measure(call, args.calls, concurrency, child)
                            sample = results.setdefault((shape, mode, name), Sample())
                            sample.cpu_us.append(cpu)
                            sample.wall_us.append(wall)
                            if server is not None:
                                sample.server_us.append(server)
                            if reference is None:
                                reference = cpu
                            sample.ratio.append(cpu / reference)
            report(results, judge_cpu_per_case(args.judge_repeats), args)
        finally:
            await variants.aclose()
    finally:
        child.stop()
    return 0


def report(results: dict[tuple[str, str, str], Sample], judge: dict[str, float], args: argparse.Namespace) -> None:
    print(
        f"calls per measurement {args.calls}, rounds {args.rounds}, concurrency {args.concurrency}, "
        f"loadavg {' '.join(Path('/proc/loadavg').read_text().split()[:3]) if Path('/proc/loadavg').exists() else '-'}"
    )
    print(f"{'shape':<10} {'mode':<11} {'variant':<10} {'cpu µs/call':>12} {'× aiohttp':>10} "
          f"{'wall µs/call':>13} {'fake srv µs':>12}")
    for (shape, mode, name), s in results.items():
        print(
            f"{shape:<10} {mode:<11} {name:<10} {_fmt(_median(s.cpu_us), '12.0f')} {_median(s.ratio):>10.2f} "
            f"{_fmt(_median(s.wall_us), '13.0f')} {_fmt(_median(s.server_us), '12.0f')}"
        )
    print("\njudge package CPU (µs):", ", ".join(f"{k} {v:.0f}" for k, v in judge.items()))
    print("\nestimated engine CPU per judged case (candidate + 1.1 judge calls + judge package), µs:")
    for mode in ("sequential", "concurrent"):
        line = []
        for name in ("aiohttp", "httpx", "provider"):
            cand = results.get(("candidate", mode, name))
            jud = results.get(("judge", mode, name))
            if cand and jud:
                total = _median(cand.cpu_us) + (1 + AUDIT_SHARE) * _median(jud.cpu_us)
                line.append(f"{name} {total:.0f} (+judge pkg {total + judge['per judged case']:.0f})")
        print(f"  {mode:<11}", "; ".join(line))


async def profile(variants: Variants, args: argparse.Namespace) -> int:
    calls = variants.calls(args.profile_shape)
    call = calls["provider"]
    await run_calls(call, 50, args.concurrency)
    profiler = cProfile.Profile()
    profiler.enable()
    await run_calls(call, args.calls, args.profile_concurrency)
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("tottime").print_stats(args.profile_top)
    stats.sort_stats("cumulative").print_stats(args.profile_top)
    return 0



def _quick(parser: argparse.ArgumentParser, argv: list[str] | None, **small: object) -> None:
    """``--quick``: a run of seconds that shows the benchmark still works (``make test`` runs every
    benchmark so, tests/bench/); its figures are not for reading. Flags given explicitly still win."""
    parser.add_argument("--quick", action="store_true", help="a run of seconds that proves the benchmark works")
    if "--quick" in (sys.argv[1:] if argv is None else argv):
        parser.set_defaults(**small)

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=400, help="calls per measurement")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=50, help="uncounted calls per variant and shape first")
    parser.add_argument("--judge-repeats", type=int, default=2000, help="calls per judge-package function timed")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--profile", action="store_true", help="cProfile the provider variant instead")
    parser.add_argument("--profile-shape", choices=("candidate", "judge"), default="candidate")
    parser.add_argument("--profile-concurrency", type=int, default=1)
    parser.add_argument("--profile-top", type=int, default=30)
    # --quick: the warm-up still opens every connection (--concurrency calls in flight).
    _quick(parser, argv, calls=16, rounds=1, warmup=16, judge_repeats=100)
    args = parser.parse_args(argv)
    return asyncio.run(amain(args, Child("fork") if args.quick else None))


if __name__ == "__main__":
    sys.exit(main())
