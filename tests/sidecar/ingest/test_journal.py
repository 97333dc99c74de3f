"""The intake journal: sampled claims written before the tap answers survive a crash, a
torn last record is dropped, done segments are deleted, a clean stop keeps only the
uncertain claims, and one directory serves one sidecar. (The crash itself, end to end, is
test_lifecycle's SIGKILL test: the cases queued at the kill run after the restart.)"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec
import pytest

from sidecar.ingest.claims import Claim
from sidecar.ingest import journal as journal_mod
from sidecar.ingest.journal import Journal, JournalInUse
from sidecar.ingest.wire import Exchange
from tests.harness import Harness, exchange, wait_for


def claim(i: int, trial: str = "t-1") -> Claim:
    return Claim(trial, msgspec.convert(exchange(i), Exchange))


def ids(claims: list[Claim]) -> list[str]:
    return [c.exchange.exchange_id for c in claims]


def crash(j: Journal) -> None:
    """What a killed process leaves: its files as written; the kernel drops its descriptors and lock."""
    for fd in (j._fd, j._lockfile):
        if fd is not None:
            os.close(fd)


def fresh(path: Path) -> Journal:
    j = Journal(str(path))
    assert j.open() == []
    j.forget_previous()
    return j


def test_claims_written_before_a_crash_come_back_in_order(tmp_path: Path) -> None:
    j = fresh(tmp_path)
    for start in (0, 5, 10):
        j.write(j.number([claim(i) for i in range(start, start + 5)]))
    crash(j)  # no close; the next life takes the directory over
    again = Journal(str(tmp_path))
    left = again.open()
    assert ids(left) == [f"ex-{i}" for i in range(15)] and {c.trial_id for c in left} == {"t-1"}
    assert again.replayed == 15


def test_a_torn_last_record_is_dropped(tmp_path: Path) -> None:
    j = fresh(tmp_path)
    j.write(j.number([claim(1), claim(2)]))
    j.close(keep=None)
    segment = sorted(tmp_path.glob("segment-*.bin"))[-1]
    with segment.open("ab") as f:
        f.write(b"\x40\x00\x00\x00partial")  # a length prefix promising 64 bytes, then the crash
    left = Journal(str(tmp_path)).open()
    assert ids(left) == ["ex-1", "ex-2"]


def test_done_segments_are_deleted_and_the_rest_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_mod, "SEGMENT_BYTES", 1)  # every write closes its segment
    j = fresh(tmp_path)
    batches = [j.number([claim(i)]) for i in range(6)]
    for b in batches:
        j.write(b)
    assert j.segments == 7  # six closed, one open
    assert j.prune(done_through=batches[3][0].seq) == 4
    assert j.segments == 3
    j.close(keep=None)
    assert ids(Journal(str(tmp_path)).open()) == ["ex-4", "ex-5"]


def test_a_clean_stop_keeps_only_the_uncertain_claims(tmp_path: Path) -> None:
    j = fresh(tmp_path)
    numbered = j.number([claim(i) for i in range(10)])
    j.write(numbered)
    j.close(keep=[numbered[7]])
    assert ids(Journal(str(tmp_path)).open()) == ["ex-7"]


def test_one_directory_serves_one_sidecar(tmp_path: Path) -> None:
    fresh(tmp_path)
    with pytest.raises(JournalInUse, match="in use by another sidecar"):
        Journal(str(tmp_path)).open()


async def test_a_running_sidecar_forgets_what_is_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_mod, "SEGMENT_BYTES", 2048)  # a few claims per segment
    async with Harness(tmp_path) as h:
        journal = h.runtime.journal
        assert journal is not None and journal.dir == Path(str(tmp_path / "trials.db") + ".intake")
        trial = await h.create_trial()
        for start in range(0, 120, 10):
            await h.send([exchange(start + i) for i in range(10)])
        await h.settle(trial["id"], 120)
        written = journal._segment

        async def forgotten() -> bool:
            return journal.segments <= 1

        await wait_for(forgotten, timeout=10, what="the done segments to be deleted", wake=h.runtime.progress)
        assert written > 5 and len(list(journal.dir.glob("segment-*.bin"))) == 1
    # A clean stop leaves nothing to offer again.
    assert Journal(str(tmp_path / "trials.db") + ".intake").open() == []


def test_a_retention_off_teams_content_never_reaches_the_journal(tmp_path: Path) -> None:
    j = fresh(tmp_path)
    private = Claim("t-off", msgspec.convert(exchange(1, content="PRIVATE-ANSWER"), Exchange))
    kept = Claim("t-on", msgspec.convert(exchange(2, content="KEPT-ANSWER"), Exchange))
    numbered = j.number([private, kept])
    j.write(numbered, content_free={"t-off"})
    j.close(keep=None)
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("segment-*.bin"))
    assert b"PRIVATE-ANSWER" not in raw and b"question 1" not in raw and b"KEPT-ANSWER" in raw
    left = Journal(str(tmp_path)).open()
    assert [(c.trial_id, c.exchange.exchange_id, c.content_kept) for c in left] == [
        ("t-off", "ex-1", False), ("t-on", "ex-2", True)]
    assert left[0].exchange.request.messages == [] and left[0].exchange.response.content is None


def test_uncertain_claims_of_a_retention_off_team_are_kept_without_content(tmp_path: Path) -> None:
    j = fresh(tmp_path)
    numbered = j.number([Claim("t-off", msgspec.convert(exchange(1, content="PRIVATE-ANSWER"), Exchange))])
    j.write(numbered, content_free={"t-off"})
    j.close(keep=numbered)  # the engine hands back the full claim; the journal still drops its content
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("segment-*.bin"))
    assert raw and b"PRIVATE-ANSWER" not in raw
