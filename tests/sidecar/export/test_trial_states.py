"""The uplink's ``trial_state`` carries a trial's per-segment verdicts (issue 27), and the
collector's Results row shows them: which segment values were Rejected, with their bounds."""

from __future__ import annotations

from pathlib import Path

from sidecar.collector.operator_views import trial_row
from sidecar.collector.store.reports import SidecarReport
from sidecar.export.trial_states import trial_state
from sidecar.store.sqlite import SQLiteStore
from tests.store.factories import finish, start, trial
from uplink.schema import encode_record


async def test_a_trial_state_names_the_rejected_segments_and_results_show_them(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path / "s.db"))
    await store.open()
    try:
        await store.create_trial(trial("t1", segments='["tag:tier"]', segment_cap=4))
        for i in range(160):
            tier = "reasoning" if i % 4 == 3 else "fast"
            await store.claim_case(start(f"c{i}", segment_values=(("tag:tier", tier),), segment_cap=4))
            assert await store.finish_case(finish(f"c{i}", score=-1.0 if tier == "reasoning" else 1.0), "A")
        snap = await store.snapshot("t1")
        assert snap is not None
        state = await trial_state(store, snap, at=2000.0)
    finally:
        await store.close()
    assert state.verdict == "Adoptable"
    assert state.segments_rejected == ["tag:tier=reasoning"]
    by_key = {s.key: s for s in state.segments}
    assert by_key["tag:tier=reasoning"].judged == 40 and by_key["tag:tier=reasoning"].decision == "regression"
    assert by_key["tag:tier=fast"].judged == 120 and by_key["tag:tier=fast"].interval.low > 0.5

    report = SidecarReport("t1", "sc-1", "team-a", 160, encode_record(state), 2000.0)
    row = trial_row("t1", [report], None)
    assert row["segments"]["rejected"] == ["tag:tier=reasoning"]
    values = {v["key"]: v for v in row["segments"]["values"]}
    assert values["tag:tier=reasoning"]["verdict"] == "Rejected"
    assert values["tag:tier=fast"]["verdict"] == "Adoptable"
