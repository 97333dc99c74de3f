"""The watches' post-finish hook: pure, one step per judged case of a watch, nothing for a trial."""

from __future__ import annotations

import dataclasses
from typing import Any

from sidecar.engine.subjects import Subject
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


def test_with_the_uplink_the_step_asks_the_store_to_announce_the_alert() -> None:
    """The hook cannot know the watch's period (each has its own alert id): the store words
    the content-free firing record when the step fires (tests/store/test_watch_conformance.py)."""
    (step,) = watch_step_with_uplink(subject("watch", "wa1"), finish("c1"))
    assert isinstance(step, WatchStep) and step.announce
    (quiet,) = watch_step(subject("watch", "wa1"), finish("c1"))
    assert isinstance(quiet, WatchStep) and not quiet.announce
