"""The watches' post-finish hook: pure, one step per judged case of a watch, nothing for a trial."""

from __future__ import annotations

import dataclasses
from typing import Any

from sidecar.engine.subjects import Subject
from sidecar.store.records import OutboxRecord
from sidecar.store.watch_records import WatchStep
from sidecar.export.case_results import uplink_case_result
from sidecar.engine.watch_step import watch_step, watch_step_with_uplink
from tests.store.factories import finish, trial


def subject(kind: str, watch_id: str | None) -> Subject:
    record = trial("wa1-20261130", kind=kind, watch_id=watch_id)
    fields: dict[str, Any] = {f.name: None for f in dataclasses.fields(Subject)}
    return Subject(**{**fields, "kind": kind, "record": record})


def test_a_judged_watch_case_is_one_step_with_its_observation() -> None:
    s = subject("watch", "wa1")
    assert watch_step(s, finish("c1", score=1.0)) == (WatchStep("wa1", "c1", "old_wins", 1003.0),)
    assert watch_step(s, finish("c2", score=-0.5))[0].observation == "new_wins"  # type: ignore[union-attr]
    assert watch_step(s, finish("c3", score=0.0))[0].observation == "tie"  # type: ignore[union-attr]


def test_nothing_for_a_case_not_judged_or_a_trial() -> None:
    assert watch_step(subject("watch", "wa1"), finish("c1", outcome="candidate_failed")) == ()
    assert watch_step(subject("trial", None), finish("c1")) == ()
    assert uplink_case_result(subject("watch", "wa1"), finish("c1")) == ()  # a sentinel's case is not a trial result


def test_with_the_uplink_the_step_carries_the_content_free_firing_record() -> None:
    (step,) = watch_step_with_uplink(subject("watch", "wa1"), finish("c1"))
    assert isinstance(step, WatchStep) and isinstance(step.on_fire, OutboxRecord)
    assert step.on_fire.record_id == "alert:wa1.alert:firing" and step.on_fire.topic == "alert"
    assert '"state":"firing"' in step.on_fire.body and "question" not in step.on_fire.body
