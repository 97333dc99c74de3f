"""The collector's copy of a control-plane trial follows the latest ``trial_spec`` it holds
(:mod:`sidecar.collector.collected`), whatever order the specs arrive in."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import AsyncIterator

import msgspec
import pytest

from sidecar.collector.collected import CollectedRecords
from sidecar.collector.store import ControlPlaneStore, make_collector_store
from sidecar.trials.spec import spec_effects
from tests.store.factories import trial
from uplink.collector_store import Held
from uplink.schema import TrialSpec, encode_record

CP = trial("t1", team="team-a", execution_site="control_plane", prompt_retention=True)


def spec(status: str, at: float, *, site: str | None = None) -> Held:
    [effect] = spec_effects(CP, status=status, reason=None if status == "running" else status, at=at, site=site)
    return Held(effect.record_id, "trial_spec", "s1", effect.body.encode(), at, "team-a", "t1",
                int(round(at * 1_000_000)))


@pytest.fixture
async def records(tmp_path: Path) -> AsyncIterator[CollectedRecords]:
    store: ControlPlaneStore = make_collector_store(str(tmp_path / "c.db"))
    await store.open()
    yield CollectedRecords(store, control_plane=None, clock=lambda: 50.0)
    await store.close()


async def _status(records: CollectedRecords) -> tuple[str, str] | None:
    copy = await records.store.get_trial("t1")
    return None if copy is None else (copy.status, copy.execution_site)


async def test_specs_in_order_create_pause_and_re_pin_the_copy(records: CollectedRecords) -> None:
    await records.put([spec("running", 1.0)])
    assert await _status(records) == ("running", "control_plane")
    await records.put([spec("posture_changed", 2.0)])
    assert await _status(records) == ("posture_changed", "control_plane")
    await records.put([spec("running", 3.0, site="local")])
    assert await _status(records) == ("running", "local")
    [row] = await records.trials()
    assert row["control_plane"]["status"] == "running" and row["control_plane"]["run_here"] is False


async def test_an_older_spec_arriving_late_changes_nothing(records: CollectedRecords) -> None:
    await records.put([spec("posture_changed", 2.0)])
    assert await _status(records) == ("posture_changed", "control_plane")
    await records.put([spec("running", 1.0)])  # the creation's spec, delivered after the pause's
    assert await _status(records) == ("posture_changed", "control_plane")
    await records.put([spec("running", 1.0)])  # and again: a re-delivery
    assert await _status(records) == ("posture_changed", "control_plane")


async def test_a_missed_pause_still_re_pins_and_an_ended_copy_stays_ended(records: CollectedRecords) -> None:
    await records.put([spec("running", 1.0)])
    await records.put([spec("running", 3.0, site="local")])  # the pause's spec (2.0) never came first
    assert await _status(records) == ("running", "local")
    await records.put([spec("stopped", 4.0)])
    assert await _status(records) == ("stopped", "local")
    await records.put([spec("running", 5.0)])
    assert await _status(records) == ("stopped", "local"), "a stopped trial is never run again"


def test_a_spec_records_what_the_collector_needs_to_run_the_trial() -> None:
    [effect] = spec_effects(CP, status="running", reason=None, at=7.5)
    assert effect.record_id == "trial_spec:t1:7500000"
    decoded = msgspec.json.decode(effect.body, type=TrialSpec)
    assert (decoded.cap_micros, decoded.judge_spec_json, decoded.candidate_price_out) == (
        CP.cap_micros, CP.judge_spec_json, CP.candidate_price_out)
    assert encode_record(decoded).decode() == effect.body
    assert spec_effects(trial("l"), status="stopped", reason="x", at=1.0) == (), "a local trial has no spec"


def _held(record: TrialSpec | bytes, at: float) -> Held:
    body = record if isinstance(record, bytes) else encode_record(record)
    return Held(f"trial_spec:t1:{at}", "trial_spec", "s1", body, at, "team-a", "t1", int(round(at * 1_000_000)))


@pytest.mark.parametrize("setting", ["continue", "stop"])
async def test_the_copy_keeps_the_trials_on_decision(records: CollectedRecords, setting: str) -> None:
    """Issue 26: the collector's copy of a control-plane trial stops (or goes on) once decided as
    the sidecar's trial does: the spec carries ``on_decision``."""
    [effect] = spec_effects(replace(CP, on_decision=setting), status="running", reason=None, at=1.0)
    assert msgspec.json.decode(effect.body)["on_decision"] == setting
    await records.put([_held(effect.body.encode(), 1.0)])
    copy = await records.store.get_trial("t1")
    assert copy is not None and copy.on_decision == setting


async def test_a_spec_from_before_on_decision_reads_continue(records: CollectedRecords) -> None:
    """A spec without the field comes from a sidecar whose trials never stopped on a decision
    (its store migrated them ``continue``): the copy goes on too, as it did before."""
    [effect] = spec_effects(CP, status="running", reason=None, at=1.0)
    old = msgspec.json.decode(effect.body)
    del old["on_decision"]
    await records.put([_held(msgspec.json.encode(old), 1.0)])
    copy = await records.store.get_trial("t1")
    assert copy is not None and copy.on_decision == "continue"
