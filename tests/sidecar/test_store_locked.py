"""A store another process keeps locked (issue 8, item 7): admin requests answer within their
timeout — a write with 503 store_unavailable, never a hang or a 500 — and sampled cases whose
claim the store keeps refusing are counted, not lost; nothing is counted twice once the lock
is released."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from tests.harness import Harness, exchange, wait_for


#: The store's lock bound, and the bound on the answer: far apart, so that the answer is seen
#: to come from the lock's bound (not the request's, nor SQLite's default of seconds) while a
#: loop stalled for a second or two on a loaded machine still answers in time.
LOCK_S = 0.3
ANSWER_S = 5.0


async def test_a_locked_store_costs_no_case_and_hangs_no_request(tmp_path: Path) -> None:
    async with Harness(
        tmp_path, store_extra=f"lock_timeout_seconds = {LOCK_S}", admin_extra=f"request_timeout_seconds = {2 * ANSWER_S}"
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
            assert r.headers["Retry-After"] and took < ANSWER_S, f"answered after {took:.2f} s"
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
