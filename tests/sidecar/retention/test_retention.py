"""The retention window (issue 14): bounded, evicting oldest first and counting it, fed off
the serving path, sealed at rest, and empty for teams with prompt retention off."""

from __future__ import annotations

import base64
import os
import sqlite3
from pathlib import Path

from sidecar.seal import SEALED_PREFIX, Sealer, UnsealError, open_case_bodies
from sidecar.retention.window import open_exchange
from sidecar.store.records import RetainedSelection
from tests.harness import Harness, exchange
from tests.sidecar.test_canary import CANARY, canary_exchange
from tests.sidecar.services.test_replay import KEY_ENV

ALL = RetainedSelection(team="team-a", served_from=0.0, served_to=1e12)


def window(extra: str = "", key: str | None = None) -> dict[str, object]:
    key = key or base64.urlsafe_b64encode(os.urandom(32)).decode()
    return {"environ": {KEY_ENV: key}, "extra": f'[retention]\nkey_env = "{KEY_ENV}"\n{extra}'}


async def test_the_window_holds_its_count_and_byte_bounds_under_a_flood(tmp_path: Path) -> None:
    async with Harness(tmp_path, **window("max_count = 500\nbuffer_size = 100000\n")) as h:
        for start in range(0, 5000, 1000):
            reply = await h.send([exchange(i) for i in range(start, start + 1000)])
            assert reply["accepted"] == 1000
        await h.runtime.retention.idle()
        totals = await h.runtime.store.retention_totals()
        kept = await h.runtime.store.retained(ALL, after_seq=0, limit=10_000)
        counters = dict(h.runtime.counters)
        assert h.admin is not None
        metrics = (await h.admin.get("/metrics")).text
    print(f"\nflood of 5000 into max_count=500: kept={counters['retention_kept']}, "
          f"evicted_count={counters['retention_evicted_count']}, window={totals}")
    assert totals["count"] == 500
    assert counters["retention_kept"] == 5000 and counters["retention_evicted_count"] == 4500
    assert [r.exchange_id for r in kept] == [f"ex-{i}" for i in range(4500, 5000)]  # the newest stay
    assert 'shadowtrial_retention_exchanges_total{outcome="evicted_count"} 4500' in metrics


async def test_the_byte_bound_and_the_full_buffer_are_counted(tmp_path: Path) -> None:
    async with Harness(tmp_path, **window("max_bytes = 20000\nbuffer_size = 300\n")) as h:
        await h.send([exchange(i) for i in range(1000)])  # one offer: 300 buffered, 700 shed
        await h.runtime.retention.idle()
        totals = await h.runtime.store.retention_totals()
        counters = dict(h.runtime.counters)
    print(f"\nbyte bound 20000 and a buffer of 300 under 1000 at once: {totals}, shed="
          f"{counters['retention_shed_buffer_full']}, evicted_bytes={counters['retention_evicted_bytes']}")
    assert counters["retention_shed_buffer_full"] == 700
    assert totals["bytes"] <= 20000 and totals["count"] > 0
    assert counters["retention_kept"] == 300
    assert counters["retention_evicted_bytes"] == 300 - totals["count"]


async def test_retained_bodies_are_sealed_at_rest_and_open_only_with_the_key(tmp_path: Path) -> None:
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    async with Harness(tmp_path, **window(key=key)) as h:
        await h.send([canary_exchange(i) for i in range(50)])
        await h.runtime.retention.idle()
        rows = await h.runtime.store.retained(ALL, after_seq=0, limit=100)
        files = [p for p in tmp_path.rglob("*") if p.is_file() and "trials.db" in p.name]
        stored = b"".join(p.read_bytes() for p in files)  # the database and its WAL, while open
    stored += b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "trials.db" in p.name)
    print(f"\ncanary scan of {len(files)} store file(s), {len(stored)} bytes, {len(rows)} retained rows")
    assert len(rows) == 50 and any(p.name.endswith("-wal") for p in files)
    assert CANARY.encode() not in stored
    opened = open_exchange(Sealer(base64.urlsafe_b64decode(key)), rows[0])
    assert CANARY in opened.request.messages[1]["content"] and opened.exchange_id == rows[0].exchange_id
    other = Sealer(os.urandom(32))
    try:
        open_exchange(other, rows[0])
    except UnsealError:
        pass
    else:
        raise AssertionError("a retained body opened with another key")


async def test_retention_off_keeps_nothing(tmp_path: Path) -> None:
    extra = "[teams.team-a]\nprompt_retention = false\n"
    async with Harness(tmp_path, **window(extra)) as h:
        await h.send([canary_exchange(i) for i in range(20)])
        await h.send([exchange(100 + i, team="team-b") for i in range(5)])
        await h.send([exchange(200 + i, team="team-b", redacted=True) for i in range(3)])
        await h.runtime.retention.idle()
        totals = await h.runtime.store.retention_totals()
        counters = dict(h.runtime.counters)
    assert totals["count"] == 5
    assert counters["retention_skipped_retention_off"] == 20 and counters["retention_skipped_redacted"] == 3
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file() and "trials.db" in p.name)
    assert CANARY.encode() not in stored


async def test_without_a_key_nothing_is_kept(tmp_path: Path) -> None:
    async with Harness(tmp_path) as h:
        await h.send([exchange(i) for i in range(5)])
        assert h.runtime.retention is None
        assert (await h.runtime.store.retention_totals())["count"] == 0


def test_the_key_comes_from_the_environment_and_must_be_32_bytes(tmp_path: Path) -> None:
    import pytest

    from sidecar.config import load_config
    from sidecar.errors import ConfigError

    path = tmp_path / "c.toml"
    path.write_text(f'[retention]\nkey_env = "{KEY_ENV}"\nwindow_seconds = 3600\nmax_count = 10\n')
    key = os.urandom(32)
    config = load_config(str(path), {KEY_ENV: base64.urlsafe_b64encode(key).decode().rstrip("=")})
    assert config.secrets.retention_key == key and config.retention.max_count == 10
    assert "retention" not in repr(config.secrets) or key.hex() not in repr(config.secrets)
    for bad in ("short", base64.urlsafe_b64encode(os.urandom(16)).decode()):
        with pytest.raises(ConfigError) as caught:
            load_config(str(path), {KEY_ENV: bad})
        assert bad not in str(caught.value) and "32 bytes" in str(caught.value)
    with pytest.raises(ConfigError):
        load_config(str(path), {})


def test_served_at_is_read_in_utc_and_falls_back_to_the_time_kept() -> None:
    from sidecar.ingest.wire import Exchange, ExchangeRequest, ExchangeResponse
    from sidecar.retention.window import served_epoch

    def ex(served_at: str | None) -> Exchange:
        return Exchange(exchange_id="e", team="t", model="m", request=ExchangeRequest(messages=[]),
                        response=ExchangeResponse(), served_at=served_at)

    assert served_epoch(ex("1970-01-01T00:01:00Z"), 5.0) == 60.0
    assert served_epoch(ex("1970-01-01T01:01:00+01:00"), 5.0) == 60.0
    assert served_epoch(ex("1970-01-01T00:01:00"), 5.0) == 60.0  # no offset: UTC
    assert served_epoch(ex("yesterday"), 5.0) == 5.0 and served_epoch(ex(None), 5.0) == 5.0


async def test_a_judged_cases_kept_bodies_are_sealed_too(tmp_path: Path) -> None:
    """With the retention key set, the bodies a retention-on trial keeps with each judged case
    are sealed like the window's: the store files hold no canary while cases are judged."""
    key = base64.urlsafe_b64encode(os.urandom(32)).decode()
    async with Harness(tmp_path, **window(key=key)) as h:
        t = await h.create_trial()
        await h.send([canary_exchange(i) for i in range(30)])
        view = await h.settle(t["id"], 30)
        await h.runtime.retention.idle()
        kept = await _kept_bodies(h, t["id"])
        files = [p for p in tmp_path.rglob("*") if p.is_file() and "trials.db" in p.name]
        stored = b"".join(p.read_bytes() for p in files)
    assert view["funnel"]["outcomes"]["judged"] > 0 and kept, "judged cases kept their bodies"
    assert CANARY.encode() not in stored, "a case's kept bodies were stored in plain text"
    case_id, exchange_id, text = kept[0]
    assert text.startswith(SEALED_PREFIX)
    opened = open_case_bodies(Sealer(base64.urlsafe_b64decode(key)), text, team="team-a", case_id=case_id)
    assert CANARY in opened and exchange_id


async def _kept_bodies(h: Harness, trial_id: str) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(h.runtime.config.store.location)
    try:
        return [(r[0], r[1], r[2]) for r in conn.execute(
            "SELECT id, exchange_id, bodies_json FROM cases WHERE trial_id = ? AND bodies_json IS NOT NULL", (trial_id,))]
    finally:
        conn.close()
