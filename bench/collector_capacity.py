"""Benchmark: what one collector replica takes into PostgreSQL, and how many gateways that serves.

    .venv/bin/python bench/collector_capacity.py [--records 40000] [--batch-size 500] [--senders 4] [--quick]

A throwaway PostgreSQL (``tests/pg.py``: the machine's own binaries, a temp directory) and one
``shadowtrial collector`` process on it, on loopback. Two phases in the same run, the same
records (content-free ``case_result`` records, as every finished case sends):

- **collector** — ``--senders`` concurrent senders POST gzip batches of ``--batch-size``
  records, each with a fresh EdDSA token, as sidecars' delivery loops do: the collector checks
  the token, gunzips, decodes, keeps each record once by id (one transaction per batch) and
  acknowledges. Reported: records/s held in PostgreSQL (counted there at the end).
- **postgres** — the write alone, the reference: the same rows inserted straight into a table of
  the same shape (``INSERT … ON CONFLICT (id) DO NOTHING``, one transaction per batch, the
  same number of concurrent connections), no HTTP, no token, no decoding.

Then the capacity table (docs/scale.md): gateways one replica serves at a given traffic and
sample rate, from the measured records/s and the records a sampled case sends (a
``case_result``, and on average at most one ``trial_state``; a control-plane trial's case adds
its ``exchange``, bodies included, which a collector also runs).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncpg
import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sidecar.auth.mint import generate_key_pair  # noqa: E402
from tests.pg import INSTALL_HINT, find_bindir, postgres_server  # noqa: E402
from uplink.delivery import BATCHES_PATH  # noqa: E402
from uplink.schema import CaseResult, encode_batch, encode_record  # noqa: E402
from uplink.signing import Signer, load_private_key  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _forked_cli import ForkedCommand  # noqa: E402

#: Records a sampled case sends: its case_result and, on average, at most one trial_state.
RECORDS_PER_CASE = 2
#: ...and a control-plane trial's case its exchange too.
RECORDS_PER_CP_CASE = 3
TRAFFIC_RPS = (10, 100, 1000)
SAMPLE_RATES = (0.01, 0.05, 0.2)


def record(i: int, team: str = "team-a") -> bytes:
    return encode_record(CaseResult(id=f"case:c{i}", trial_id="t1", case_id=f"c{i}", exchange_id=f"x{i}",
                                    team=team, outcome="judged", finished_at=1.0, score=1.0,
                                    judge_version_id="jv-1"))


def _collector(tmp: Path, pub: Path, dsn: str, fork: bool) -> tuple[subprocess.Popen[bytes] | ForkedCommand, str]:
    """``shadowtrial collector`` in a process of its own (``fork``, ``--quick``: forked from this one,
    see ``bench/_forked_cli.py``) and its URL, from the line it prints once it listens."""
    cfg = tmp / "collector.toml"
    cfg.write_text(f'[collector]\nlisten = "127.0.0.1:0"\nstore_url = "{dsn}"\naudience = "bench"\n'
                   f'issuers = ["bench"]\n[[collector.keys]]\nkid = "k1"\npath = "{pub}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHADOWTRIAL_")}
    argv = ["collector", "--config", str(cfg), "--log-level", "WARNING"]
    proc: subprocess.Popen[bytes] | ForkedCommand
    if fork:
        proc = ForkedCommand(argv, cwd=ROOT, env=env)
    else:
        proc = subprocess.Popen([sys.executable, "-m", "sidecar.cli.main", *argv], stdout=subprocess.PIPE,
                                cwd=ROOT, env=env)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise SystemExit("the collector did not start")
    return proc, line.decode().split()[-1]


async def _collector_phase(url: str, signer: Signer, bodies: list[bytes], senders: int) -> float:
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)

    async def sender(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            body = queue.get_nowait()
            r = await client.post(url + BATCHES_PATH, content=body, headers={
                "Authorization": f"Bearer {signer.token()}", "Content-Encoding": "gzip"})
            assert r.status_code == 200, r.text

    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=senders)) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(sender(client) for _ in range(senders)))
        return time.perf_counter() - t0


async def _collector_held(url: str, signer: Signer, bodies: list[bytes], senders: int, dsn: str) -> tuple[float, int]:
    """The collector phase's seconds, and the records the collector then holds."""
    took = await _collector_phase(url, signer, bodies, senders)
    conn = await asyncpg.connect(dsn)
    held: int = await conn.fetchval("SELECT COUNT(*) FROM collected_records")
    await conn.close()
    return took, held


async def _postgres_phase(dsn: str, rows: list[list[tuple[object, ...]]], senders: int) -> float:
    conn = await asyncpg.connect(dsn)
    await conn.execute("CREATE TABLE IF NOT EXISTS collected_records (seq BIGSERIAL PRIMARY KEY, id TEXT NOT NULL "
                       "UNIQUE, kind TEXT NOT NULL, sidecar_id TEXT NOT NULL, team TEXT, trial_id TEXT, "
                       "exchange_id TEXT, revision BIGINT, body BYTEA NOT NULL, received_at DOUBLE PRECISION NOT NULL)")
    await conn.close()
    pool = await asyncpg.create_pool(dsn, min_size=senders, max_size=senders)
    queue: asyncio.Queue[list[tuple[object, ...]]] = asyncio.Queue()
    for batch in rows:
        queue.put_nowait(batch)

    async def writer() -> None:
        while not queue.empty():
            batch = queue.get_nowait()
            async with pool.acquire() as c, c.transaction():
                await c.executemany(
                    "INSERT INTO collected_records (id, kind, sidecar_id, team, trial_id, exchange_id, revision, "
                    "body, received_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (id) DO NOTHING",
                    batch)

    t0 = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(senders)))
    took = time.perf_counter() - t0
    await pool.close()
    return took


def main(n: int, batch: int, senders: int, fork: bool = False) -> None:
    if find_bindir() is None:
        raise SystemExit(INSTALL_HINT)
    with tempfile.TemporaryDirectory() as d, postgres_server() as server:
        tmp = Path(d)
        key, pub = generate_key_pair(tmp, name="bench")
        signer = Signer(load_private_key(str(key)), kid="k1", issuer="bench", audience="bench")
        collector_dsn, reference_dsn = server.create_database(), server.create_database()
        # Started before the event loop (``--quick`` forks it from this process).
        proc, url = _collector(tmp, pub, collector_dsn, fork)
        try:
            bodies = [gzip.compress(encode_batch("bench", 1.0, [record(j) for j in range(i, min(i + batch, n))]), 5)
                      for i in range(0, n, batch)]
            took, held = asyncio.run(_collector_held(url, signer, bodies, senders, collector_dsn))
        finally:
            proc.terminate()
            proc.wait(10)
        rows = [[(f"case:c{j}", "case_result", "bench", "team-a", "t1", None, None, record(j), 1.0)
                 for j in range(i, min(i + batch, n))] for i in range(0, n, batch)]
        ref = asyncio.run(_postgres_phase(reference_dsn, rows, senders))
    assert held == n, f"the collector holds {held} of {n} records"
    rate, ref_rate = n / took, n / ref
    print(f"records: {n}, batch size {batch}, concurrent senders {senders}, cores {os.cpu_count()}")
    print(f"postgres alone (the same rows, one transaction per batch): {ref_rate:,.0f} records/s")
    print(f"one collector replica into PostgreSQL: {rate:,.0f} records/s ({rate / ref_rate:.2f} of postgres alone)")
    print()
    print(f"gateways one replica serves ({RECORDS_PER_CASE} records per sampled case; "
          f"{RECORDS_PER_CP_CASE} for a control-plane trial's case):")
    print("| traffic per gateway | sample rate | records/s per gateway | gateways | gateways (control plane) |")
    print("|---|---|---|---|---|")
    for rps in TRAFFIC_RPS:
        for rate_ in SAMPLE_RATES:
            per = rps * rate_ * RECORDS_PER_CASE
            per_cp = rps * rate_ * RECORDS_PER_CP_CASE
            print(f"| {rps} req/s | {rate_:.0%} | {per:,.1f} | {rate / per:,.0f} | {rate / per_cp:,.0f} |")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=40_000)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--senders", type=int, default=4)
    p.add_argument("--quick", action="store_true", help="a run of seconds that proves the benchmark works")
    if "--quick" in sys.argv[1:]:  # the suite runs it so (tests/bench/); explicit flags still win
        p.set_defaults(records=600, batch_size=100, senders=2)
    a = p.parse_args()
    main(a.records, a.batch_size, a.senders, fork=a.quick)
