"""A store another process keeps locked (issue 8, item 7): admin requests answer within their
timeout — a write with 503 store_unavailable, never a hang or a 500 — and sampled cases whose
claim the store keeps refusing are counted, not lost; nothing is counted twice once the lock
is released."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.harness import Harness, exchange, wait_for


async def test_a_locked_store_costs_no_case_and_hangs_no_request(tmp_path: Path) -> None:
    async with Harness(
        tmp_path, store_extra="lock_timeout_seconds = 0.3", admin_extra="request_timeout_seconds = 2.0"
    ) as h:
        assert h.admin is not None
        trial = await h.create_trial()
        holder = sqlite3.connect(tmp_path / "trials.db", isolation_level=None, timeout=10)
        holder.execute("BEGIN EXCLUSIVE")  # another process holding the write lock
        try:
            started = time.monotonic()
            r = await h.admin.post("/v1/trials", json={
                "team": "team-b", "incumbent_model": "inc-model", "candidate_model": "cand-model",
                "spend_cap_usd": 1.0, "sample_rate": 1.0})
            took = time.monotonic() - started
            assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable", r.text
            assert r.headers["Retry-After"] and took < 2.0
            assert (await h.admin.get(f"/v1/trials/{trial['id']}")).status_code in (200, 503)

            assert (await h.send([exchange(i) for i in range(5)]))["sampled"] == 5

            async def counted() -> bool:
                r = await h.admin.get(f"/v1/trials/{trial['id']}")
                return r.status_code == 200 and r.json()["funnel"]["total"] == 5

            await wait_for(counted, timeout=30, what="the refused claims to be counted", wake=h.runtime.progress)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        await h.runtime.idle()
        view = await h.settle(trial["id"], 5)
    assert view["funnel"]["outcomes"]["indeterminate"] == 5 and view["funnel"]["total"] == 5, view["funnel"]
