"""What a case writes to SQLite (issue 29, goal 2): the trial row — which carries the kept
statistics, tens of KB — is written once to reserve and once to settle, never again by the
revision trigger, and the case row once fewer on each path; the revision still moves."""

from __future__ import annotations

from pathlib import Path
from typing import AsyncIterator

import pytest

from sidecar.store.sqlite import SQLiteStore
from tests.store.factories import finish, judgment, start, trial


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    s = SQLiteStore(str(tmp_path / "store.db"))
    await s.open()
    yield s
    await s.close()


async def test_a_judged_case_writes_its_trial_row_twice_and_the_revision_trigger_never(store: SQLiteStore) -> None:
    await store.create_trial(trial("t1", cap_micros=1_000_000, sequence_state="x" * 20_000))
    before = await store.get_trial("t1")
    assert before is not None

    async def changes() -> int:  # rows written since the connection opened, by triggers too
        return await store._run(lambda conn: conn.total_changes)

    written = await changes()
    assert await store.claim_and_reserve(start("c1"), 1_000, at=1.0) == ("claimed", True)
    claim_rows = await changes() - written
    assert await store.finish_case(finish("c1", charged=400, score=0.5, judgments=[judgment("j1", "c1")]), "A")
    finish_rows = await changes() - written - claim_rows
    # Claim: the case inserted; the trial reserved; the case reserved and dispatched; a ledger row.
    assert claim_rows == 4
    # Finish: the trial settled (with the scoring number); the case finished (with it); release and
    # charge in the ledger; the judgment; the funnel count.
    assert finish_rows == 6
    after = await store.get_trial("t1")
    assert after is not None and after.state_revision == before.state_revision + 2
    assert (after.reserved_micros, after.spent_micros) == (0, 400)
    assert await store.scores_after("t1", 0) == [(1, 0.5)]
    cases = {c["id"]: c["state"] for c in await store.cases("t1")}
    assert cases == {"c1": "finished"}
