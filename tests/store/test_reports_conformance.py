"""What the control plane's console reads of the uplink records (issue 25, item 1), on SQLite
and PostgreSQL: per trial and reporting sidecar, its case-result count and its own
highest-revision ``trial_state``; every ``alert`` record in arrival order."""

from __future__ import annotations

import pytest

from sidecar.collector.store import ControlPlaneStore
from uplink.collector_store import Held

pytestmark = pytest.mark.collector_store


def held(rid: str, kind: str, sidecar: str, *, trial: str | None = "t1", revision: int | None = None,
         at: float = 1.0, team: str = "team-a") -> Held:
    return Held(rid, kind, sidecar, f'{{"id": "{rid}"}}'.encode(), at, team, trial, revision)


async def test_each_sidecar_reports_its_own_latest_state_and_count(store: ControlPlaneStore) -> None:
    assert await store.sidecar_reports() == [] and await store.alert_records() == []
    await store.put_collected([
        held("trial:t1:1", "trial_state", "a", revision=1, at=1.0),
        held("case:t1:1", "case_result", "a", at=2.0), held("case:t1:2", "case_result", "a", at=3.0),
        held("trial:t1:3", "trial_state", "b", revision=3, at=4.0), held("case:t1:3", "case_result", "b", at=5.0),
        held("trial:t1:2", "trial_state", "b", revision=2, at=6.0),  # late, older: not b's latest
        held("case:t2:1", "case_result", "c", trial="t2", at=7.0, team="team-b"),
        held("alert:x:1", "alert", "c", trial=None, at=8.0), held("alert:x:2", "alert", "a", trial=None, at=9.0),
        held("exchange:t1:x1", "exchange", "a", at=10.0),  # not a report
    ])
    got = [(r.trial_id, r.sidecar_id, r.team, r.case_results, r.state, r.last_received_at)
           for r in await store.sidecar_reports()]
    assert got == [
        ("t1", "a", "team-a", 2, b'{"id": "trial:t1:1"}', 3.0),
        ("t1", "b", "team-a", 1, b'{"id": "trial:t1:3"}', 6.0),
        ("t2", "c", "team-b", 1, None, 7.0),
    ]
    assert await store.alert_records() == [("c", b'{"id": "alert:x:1"}'), ("a", b'{"id": "alert:x:2"}')]
