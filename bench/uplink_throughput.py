"""Benchmark: delivery throughput from a sidecar's outbox to the reference collector, on loopback.

    .venv/bin/python bench/uplink_throughput.py [--records 20000] [--batch-size 500] [--quick]

The collector runs as ``shadowtrial collector`` in a process of its own
(SQLite, its own temp directory). Two phases, in the same run:

- **reference** — the same records, pre-encoded and pre-compressed, POSTed in
  batches by a bare httpx loop with a fresh token each: the collector's ceiling.
- **delivery** — the records in a real SQLite store's outbox (written through
  ``finish_case`` effects, as the post-finish hook writes them) and delivered
  by :class:`uplink.delivery.Delivery` (claim, encode, gzip, sign, POST,
  delete acked) until the outbox is empty.

Reported: records/s of each, their ratio, and this process's CPU per record
in the delivery phase (the sidecar's side: store, encoding, signing, HTTP).
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

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sidecar.auth.mint import generate_key_pair  # noqa: E402
from sidecar.store import make_store  # noqa: E402
from sidecar.store.records import OutboxRecord  # noqa: E402
from tests.store.factories import finish, start, trial  # noqa: E402
from uplink.delivery import BATCHES_PATH, Delivery, DeliverySettings  # noqa: E402
from uplink.schema import CaseResult, encode_batch, encode_record  # noqa: E402
from uplink.signing import Signer, load_private_key  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _forked_cli import ForkedCommand  # noqa: E402


def record(i: int) -> bytes:
    return encode_record(CaseResult(id=f"case:c{i}", trial_id="t1", case_id=f"c{i}", exchange_id=f"x{i}",
                                    team="team-a", outcome="judged", finished_at=1.0, score=1.0,
                                    judge_version_id="jv-1"))


def _collector(tmp: Path, pub: Path, fork: bool) -> tuple[subprocess.Popen[bytes] | ForkedCommand, str]:
    """``shadowtrial collector`` in a process of its own (``fork``, ``--quick``: forked from this one,
    see ``bench/_forked_cli.py``) and its URL, from the line it prints once it listens."""
    cfg = tmp / "collector.toml"
    cfg.write_text(f'[collector]\nlisten = "127.0.0.1:0"\ndb_path = "{tmp / "c.db"}"\naudience = "bench"\n'
                   f'issuers = ["bench"]\n[[collector.keys]]\nkid = "k1"\npath = "{pub}"\n')
    argv = ["collector", "--config", str(cfg), "--log-level", "WARNING"]
    proc: subprocess.Popen[bytes] | ForkedCommand
    if fork:
        proc = ForkedCommand(argv, cwd=ROOT, env=os.environ)
    else:
        proc = subprocess.Popen([sys.executable, "-m", "sidecar.cli.main", *argv], stdout=subprocess.PIPE, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    return proc, line.decode().split()[-1]


def main(n: int, batch: int, fork: bool = False) -> None:
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        key, pub = generate_key_pair(tmp, name="bench")
        signer = Signer(load_private_key(str(key)), kid="k1", issuer="bench", audience="bench")
        # Started before the event loop (``--quick`` forks it from this process).
        proc, url = _collector(tmp, pub, fork)
        try:
            delivery, ref_s, del_s, cpu = asyncio.run(phases(tmp, signer, url, n, batch))
        finally:
            proc.terminate()
            proc.wait(10)
    report(n, batch, delivery, ref_s, del_s, cpu)


async def phases(tmp: Path, signer: Signer, url: str, n: int, batch: int) -> tuple[Delivery, float, float, float]:
    """The reference, then the delivery: (the delivery, their seconds, this process's CPU in the delivery)."""
    # reference: pre-encoded batches (ids distinct from the delivery phase's)
    bodies = [gzip.compress(encode_batch("ref", 1.0, [record(n + j) for j in range(i, min(i + batch, n))]), 5)
              for i in range(0, n, batch)]
    async with httpx.AsyncClient(timeout=30) as client:
        t0 = time.perf_counter()
        for body in bodies:
            r = await client.post(url + BATCHES_PATH, content=body, headers={
                "Authorization": f"Bearer {signer.token()}", "Content-Encoding": "gzip"})
            assert r.status_code == 200, r.text
        ref_s = time.perf_counter() - t0
    # delivery: a real SQLite outbox
    store = make_store(str(tmp / "sidecar.db"))
    await store.open()
    await store.create_trial(trial("t1", cap_micros=10**12))
    for i in range(n):
        await store.claim_case(start(f"c{i}", exchange_id=f"x{i}"))
        await store.finish_case(finish(f"c{i}", effects=(
            OutboxRecord(f"case:c{i}", "case_result", record(i).decode()),)), "A")
    delivery = Delivery(store, DeliverySettings(url=url, sidecar_id="bench", owner="bench",
                                                batch_size=batch, idle_poll_s=0.01), signer)
    cpu0, t0 = time.process_time(), time.perf_counter()
    await delivery.start()
    while await store.outbox_depth():
        await asyncio.sleep(0.01)  # a benchmark's poll, not a test's synchronisation
    del_s, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    await delivery.stop()
    await store.close()
    return delivery, ref_s, del_s, cpu


def report(n: int, batch: int, delivery: Delivery, ref_s: float, del_s: float, cpu: float) -> None:
    print(f"records: {n}, batch size {batch}, cores {os.cpu_count()}")
    print(f"reference (bare POSTs of pre-encoded batches): {n / ref_s:,.0f} records/s")
    print(f"delivery (SQLite outbox -> collector):         {n / del_s:,.0f} records/s "
          f"({n / del_s / (n / ref_s):.2f} of reference)")
    print(f"sidecar-side CPU per delivered record:         {cpu / n * 1e6:,.1f} µs "
          f"(failures: {dict(delivery.stats.failures) or 'none'})")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--records", type=int, default=20_000)
    p.add_argument("--batch-size", type=int, default=500)
    p.add_argument("--quick", action="store_true", help="a run of seconds that proves the benchmark works")
    if "--quick" in sys.argv[1:]:  # make test runs it so (tests/bench/); explicit flags still win
        p.set_defaults(records=500, batch_size=100)
    a = p.parse_args()
    main(a.records, a.batch_size, fork=a.quick)
