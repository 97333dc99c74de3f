"""Several sidecar processes on one fresh database: they migrate it at once,
race to create one trial under one idempotency key, and share its cap."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

from tests.store.conftest import Backend, OpenStore
from tests.store.factories import replay
from tests.store.worker import CAP

ROOT = Path(__file__).resolve().parents[2]
WORKERS, CYCLES = 3, 60


async def test_processes_share_one_cap(backend: Backend, stores: OpenStore) -> None:
    """The database is untouched until the workers start: they migrate it together."""
    # Plain Popen waited on in threads: no asyncio subprocess transport to outlive the test's loop.
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.store.worker", backend.url, f"w{n}", str(n), str(CYCLES)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        for n in range(WORKERS)
    ]
    results = await asyncio.gather(*(asyncio.to_thread(p.communicate, timeout=120) for p in procs))
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0, err
    assert sum(int(out) for out, _ in results) == WORKERS * CYCLES
    store = await stores()
    assert [t.id for t in await store.list_trials()] == ["t1"]
    spent, reserved = replay(await store.ledger("t1"), CAP)
    snap = await store.snapshot("t1")
    assert snap is not None
    assert (snap.record.spent_micros, snap.record.reserved_micros, reserved) == (spent, 0, 0)
    assert sum(snap.funnel.values()) == WORKERS * CYCLES and snap.funnel.get("shed_cap_busy", 0) > 0
