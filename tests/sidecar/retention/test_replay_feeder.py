"""The replay feeder's wait for its last cases reads progress, never a full snapshot.

A snapshot reads every judgment of the trial; the feeder polled one every quarter second
until the replay's cases finished, a cost that grew with the replay (most of a 2,000-case
replay's store time). What it needs is the funnel and the case states.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness import Harness
from tests.sidecar.services.test_replay import ended, fill, replay, retention


class CountingStore:
    """The store, counting the reads the feeder makes by name."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        self.calls[name] = self.calls.get(name, 0) + 1
        return getattr(self._store, name)


async def test_a_replay_ends_on_its_progress_without_reading_a_snapshot(tmp_path: Path) -> None:
    async with Harness(tmp_path, **retention()) as h:
        await fill(h, 40)
        counting = CountingStore(h.runtime.replays._store)
        h.runtime.replays._store = counting
        trial = await replay(h)
        view = await ended(h, trial["id"])
    assert view["status"] == "stopped" and view["status_reason"].startswith("replay window exhausted")
    assert view["funnel"]["total"] == 40 and view["funnel"]["outcomes"]["judged"] == 40
    assert counting.calls.get("progress", 0) >= 1
    assert counting.calls.get("snapshot", 0) == 0, counting.calls
