"""Every benchmark in ``bench/`` runs, in its ``--quick`` mode, as part of the suite.

Benchmarks are not timed here (speed is measured, not asserted): each one is run as a whole
process, the way a reader runs it, and must exit 0 and print the figures it exists to print.
What this catches is rot: a benchmark that no longer imports, or whose harness drifted from
the code it measures (``bench/ingest_path.py`` crashed on a renamed attribute for a whole
release because nothing ran it).

The list of benchmarks is read from the folder, so a new one is covered the day it lands; its
expected figure (a pattern its output must contain) is declared in ``FIGURES``, and a benchmark
missing from there fails the suite, so nobody adds one without saying what it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"

#: Per benchmark, a pattern (or several) every run must print: the figures the benchmark exists for.
FIGURES: dict[str, str | tuple[str, ...]] = {
    "betting.py": r"\| \*\*shipped: betting, mixed constant bets, hedged\*\* \| [\d.]+% / ",
    "bootstrap.py": r"direct / aggregated at [\d,]+ cases: [\d,]+x",
    "corpus_runs.py": (r"\| null \| pref \(paired_judge\) \| \d+ x 2 \| [^|]+ \|[\s\S]*"
                       r"200 items x 2 with the paired judge: refused, comparison_invocation_limit"),
    "collector_capacity.py": r"one collector replica into PostgreSQL: [\d,]+ records/s",
    "engine_case.py": (r"engine CPU per judged case -?\d+ µs",
                       r"engine / fake provider (-?\d+\.\d\d|n/a); [^\n]*; unpinned; load average"),
    # Every row of the full mode (all its proxies; --quick forks them from one LiteLLM import).
    "gateway_overhead.py": (
        *(rf"\n{row} +\d+ +0 +\d+\.\d+ +\d+\.\d+ +\d+\.\d{{3}} +\d+\.\d{{3}} +\d+\.\d +\d+\.\d{{3}} +\d+\.\d{{3}} +[+-]\d"
          for row in (r"none", r"plugin, sidecar up", r"plugin, sidecar stopped", r"plugin, sidecar hung",
                      r"generic_api \(unlicensed\)", r"generic format -> sink")),
        r"mean latency ms: none \d+\.\d+",
        r"sidecar: shadowtrial_exchanges_received_total \d+; trial funnel \{",
        r"hung server: \d+ connection\(s\) accepted, none answered",
    ),
    "ingest_path.py": r"rate 0 retained : \d+\.\d+ us/exchange",
    "otlp.py": r"OTLP rate 0\.05: +\d+\.\d+ us/span",
    "provider_calls.py": r"estimated engine CPU per judged case",
    "segments.py": (r"\| equal \| 17 \(cap 16 \+ other\) \(0\.00294\) \|[^\n]*\*\*[\d.]+% \[[\d.]+%, [\d.]+%\]\*\*"
                    r"[\s\S]*\| 0\.35 \| 17 \(cap 16 \+ other\) \| [\d.]+% \["),
    "store_sql.py": r"share of query statements defined once: \d+%",
    # Every phase of the full mode: ingest (both modes, all four servers), starvation, cpu.
    "tap.py": (
        *(rf"\n\({m}\) [^\n]*/request +{server} +[1-9]\d* +0 "
          for m in "ab" for server in ("reference", "floor", r"tap", r"tap r=0")),
        *(rf"\n  {tap} +/ reference: exchanges/s [\d.]+, requests/s [\d.]+" for tap in ("tap", r"tap r=0")),
        r"fake provider calls, whole run: \{'bench-",
        r"\nengine alone +1\.00 ", r"\nengine under flood +0\.05 ", r"\ningest alone +0\.00 ",
        # the engine-alone phase ends when every case it offered was judged (the funnel, not the gauges)
        r"\n  at the end: funnel \{'judged': (\d+)\}, in flight 0, queue depth 0\n"
        r"  \1 offered; window from \d+ to \d+ judged \(10%-90% marks\); every case finished",
        r"judged/s under flood / judged/s alone = ",
        r"INGEST +exch/s engine busy \(rate 0\.05\) / exch/s alone \(rate 0\) = ",
        r"CPU PER CASE +engine alone, [1-9]\d* judged",
        r"by thread over the phase: tap\+admin loop",
    ),
    "tap_windows.py": (r"\nwindow  2/2: floor \d+\.\d\d / \d+\.\d\d µs  tap \d+\.\d\d µs \(\d+\.\d\dx\)",
                       r"\n  tap      median \d+\.\d\dx \(quartiles [\d.]+ to [\d.]+\); median [\d.]+ µs per exchange; "
                       r"[1-9]\d* sampled, \d+ shed",
                       r"\n  tap r=0  median \d+\.\d\dx .*; 0 sampled, 0 shed"),
    "uplink_outage.py": r"every record held exactly once",
    "uplink_throughput.py": r"sidecar-side CPU per delivered record: +[\d,.]+ µs",
    "verdicts.py": r"## smalln\n\| items \| plain percentile \| expanded \|\n\| 20 \| \d",
    "watch_detection.py": r"50 watches: false alarms",
}

#: Benchmarks that need the real LiteLLM proxy's own environment (built once, cached, by
#: tests/litellm_proxy.py): skipped where it cannot be built, like the proxy's own tests.
NEEDS_LITELLM = {"gateway_overhead.py"}

#: Bound on one quick run, far above what any takes on 2 cores (a hang fails, never waits).
TIMEOUT_S = 240


def benchmarks() -> list[str]:
    return sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def test_every_benchmark_declares_its_figure() -> None:
    assert set(benchmarks()) == set(FIGURES), "add the new benchmark's figure to FIGURES"


@pytest.mark.parametrize("name", benchmarks())
def test_benchmark_runs_quick(name: str, tmp_path: Path) -> None:
    if name in NEEDS_LITELLM:
        from tests.litellm_proxy import litellm_or_skip

        litellm_or_skip()  # fails under CI, as the proxy's own tests do
    # The suite's own switches (SHADOWTRIAL_REQUIRE_*, set by .ci/run) are not settings of the
    # sidecars and collectors a benchmark starts: their config refuses unknown SHADOWTRIAL_ names.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWTRIAL_")}
    env["PYTHONPATH"] = str(ROOT)
    # Its own temp dir, to see that it leaves nothing behind (uplink_outage.py once left a
    # shadowtrial-outage-* directory in /tmp on every run).
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env["TMPDIR"] = str(tmp)
    run = subprocess.run(
        [sys.executable, str(BENCH / name), "--quick"], cwd=ROOT, env=env,
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, f"{name} --quick exited {run.returncode}:\n{out[-4000:]}"
    patterns = FIGURES[name]
    for pattern in (patterns,) if isinstance(patterns, str) else patterns:
        assert re.search(pattern, run.stdout), f"{name} --quick printed no {pattern!r}:\n{out[-4000:]}"
    assert sorted(p.name for p in tmp.iterdir()) == [], f"{name} --quick left temp files behind"
