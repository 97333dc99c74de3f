"""The retention window's store methods (``RetentionStore``), on every backend."""

from __future__ import annotations

from typing import Any

from sidecar.store import Store
from sidecar.store.records import RetainedExchange, RetainedSelection
from tests.store.factories import trial


def row(i: int, *, team: str = "team-a", size: int = 10, kept_at: float | None = None, **kw: Any) -> RetainedExchange:
    values: dict[str, Any] = dict(team=team, exchange_id=f"ex-{i}", model="inc", gateway="gw-1", route=None,
                                  served_at=1000.0 + i, kept_at=2000.0 + i if kept_at is None else kept_at,
                                  sealed=bytes([i % 256]) * size)
    values.update(kw)
    return RetainedExchange(**values)


ALL = RetainedSelection(team="team-a", served_from=0.0, served_to=1e12)
BIG = 1 << 40


async def test_retain_keeps_rows_once_and_reads_them_back_in_order(store: Store) -> None:
    result = await store.retain([row(i) for i in range(5)], keep_after=0.0, max_count=100, max_bytes=BIG)
    assert (result.kept, result.evicted_age, result.evicted_count, result.evicted_bytes) == (5, 0, 0, 0)
    again = await store.retain([row(3), row(4), row(5)], keep_after=0.0, max_count=100, max_bytes=BIG)
    assert again.kept == 1  # ex-3 and ex-4 are kept already
    rows = await store.retained(ALL, after_seq=0, limit=100)
    assert [r.exchange_id for r in rows] == [f"ex-{i}" for i in range(6)]
    assert rows[2] == row(2, seq=rows[2].seq) and rows[0].seq < rows[1].seq
    page = await store.retained(ALL, after_seq=rows[1].seq, limit=2)
    assert [r.exchange_id for r in page] == ["ex-2", "ex-3"]
    assert await store.retention_totals() == {"count": 6, "bytes": 60}


async def test_the_same_exchange_id_of_two_teams_is_two_rows(store: Store) -> None:
    await store.retain([row(1), row(1, team="team-b")], keep_after=0.0, max_count=100, max_bytes=BIG)
    assert (await store.retention_totals())["count"] == 2


async def test_selection_filters_team_time_model_route_and_gateway(store: Store) -> None:
    rows = [row(0), row(1, model="other"), row(2, route="/chat"), row(3, gateway="gw-2"), row(4, team="team-b"),
            row(5, served_at=5000.0)]
    await store.retain(rows, keep_after=0.0, max_count=100, max_bytes=BIG)

    async def ids(sel: RetainedSelection) -> list[str]:
        return [r.exchange_id for r in await store.retained(sel, after_seq=0, limit=100)]

    window = RetainedSelection(team="team-a", served_from=1000.0, served_to=1010.0)
    assert await ids(window) == ["ex-0", "ex-1", "ex-2", "ex-3"]
    assert await ids(RetainedSelection(team="team-a", served_from=1000.0, served_to=1010.0, model="inc")) == [
        "ex-0", "ex-2", "ex-3"]
    assert await ids(RetainedSelection(team="team-a", served_from=0, served_to=1e9, route="/chat")) == ["ex-2"]
    assert await ids(RetainedSelection(team="team-a", served_from=0, served_to=1e9, gateway="gw-2")) == ["ex-3"]
    assert await ids(RetainedSelection(team="team-a", served_from=1002.0, served_to=1003.0)) == ["ex-2"]  # [from, to)
    assert await store.count_retained(window) == 4
    assert await store.count_retained(RetainedSelection(team="team-c", served_from=0, served_to=1e9)) == 0


async def test_bounds_evict_the_oldest_first_and_count_by_reason(store: Store) -> None:
    await store.retain([row(i, kept_at=100.0 + i) for i in range(10)], keep_after=0.0, max_count=100, max_bytes=BIG)
    aged = await store.retain([], keep_after=103.0, max_count=100, max_bytes=BIG)
    assert aged.evicted_age == 3
    by_count = await store.retain([row(10), row(11)], keep_after=0.0, max_count=5, max_bytes=BIG)
    assert (by_count.kept, by_count.evicted_count, by_count.evicted_bytes) == (2, 4, 0)
    left = [r.exchange_id for r in await store.retained(ALL, after_seq=0, limit=100)]
    assert left == ["ex-7", "ex-8", "ex-9", "ex-10", "ex-11"]
    by_bytes = await store.retain([row(12, size=25)], keep_after=0.0, max_count=100, max_bytes=40)
    assert (by_bytes.evicted_count, by_bytes.evicted_bytes) == (0, 4)  # 75 bytes: four of 10 go, 35 stay
    assert [r.exchange_id for r in await store.retained(ALL, after_seq=0, limit=100)] == ["ex-11", "ex-12"]
    assert await store.retention_totals() == {"count": 2, "bytes": 35}


async def test_replay_progress_is_kept_with_the_trial_and_never_goes_back(store: Store) -> None:
    record = trial("r1", source="replay", source_from=1000.0, source_to=2000.0, source_size=50)
    assert await store.create_trial(record) == record
    assert await store.get_trial("r1") == record
    await store.save_replay_progress("r1", cursor=40, fed=12)
    await store.save_replay_progress("r1", cursor=30, fed=10)  # a stale writer
    got = await store.get_trial("r1")
    assert got is not None and (got.replay_cursor, got.replay_fed) == (40, 12)
    assert (await store.get_trial("r1")) == await store.get_trial("r1")
    plain = await store.create_trial(trial("t2"))
    assert plain.source == "live" and (await store.get_trial("t2")) == plain


async def test_forget_retained_forgets_one_team(store: Store) -> None:
    await store.retain([row(1), row(2), row(3, team="team-b")], keep_after=0.0, max_count=100, max_bytes=BIG)
    assert await store.forget_retained("team-a") == 2
    assert await store.forget_retained("team-a") == 0
    assert await store.retention_totals() == {"count": 1, "bytes": 10}


async def test_selection_with_kept_after_reads_nothing_expired(store: Store) -> None:
    """Issue 21, item 12: a replay reads the window's age bound too, evicted yet or not."""
    await store.retain([row(i, kept_at=100.0 + i) for i in range(6)], keep_after=0.0, max_count=100, max_bytes=BIG)
    fresh = RetainedSelection(team="team-a", served_from=0.0, served_to=1e12, kept_after=103.0)
    assert [r.exchange_id for r in await store.retained(fresh, after_seq=0, limit=100)] == ["ex-3", "ex-4", "ex-5"]
    assert await store.count_retained(fresh) == 3
    expired = RetainedSelection(team="team-a", served_from=0.0, served_to=1e12, kept_after=1000.0)
    assert await store.retained(expired, after_seq=0, limit=100) == [] and await store.count_retained(expired) == 0
    assert await store.count_retained(ALL) == 6  # still held: only the bound hides them
