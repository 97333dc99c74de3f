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


# -- issue 21, item 13: nothing in plain text at rest with a retention key -----------------------

SECRET = "JOURNAL-CANARY-51e0"


def secret_claim(i: int, trial: str = "t-1") -> Claim:
    ex = exchange(i, content=f"answer {SECRET}")
    ex["request"]["messages"] = [{"role": "user", "content": f"question {i} {SECRET}"}]
    return Claim(trial, msgspec.convert(ex, Exchange))


def raw(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in path.rglob("*") if p.is_file())


def test_with_a_retention_key_the_journal_seals_every_exchange(tmp_path: Path) -> None:
    from sidecar.seal import Sealer

    key = os.urandom(32)
    j = Journal(str(tmp_path), sealer=Sealer(key))
    assert j.open() == []
    j.forget_previous()
    numbered = j.number([secret_claim(i) for i in range(5)] + [secret_claim(9, trial="t-off")])
    j.write(numbered, content_free={"t-off"})
    on_disk = raw(tmp_path)
    crash(j)
    assert on_disk and SECRET.encode() not in on_disk and b"question" not in on_disk
    # The same key opens them after a crash: the claims run as they were sampled.
    again = Journal(str(tmp_path), sealer=Sealer(key))
    left = again.open()
    assert ids(left) == [f"ex-{i}" for i in range(5)] + ["ex-9"]
    assert SECRET in left[0].exchange.request.messages[0]["content"] and left[0].content_kept
    assert not left[5].content_kept  # retention off: never had content to seal
    again.write(again.number(left))
    again.forget_previous()
    crash(again)
    assert SECRET.encode() not in raw(tmp_path)
    # Another key (or none): the content cannot be read; the claims come back without it and
    # are counted shed_stopped by the engine, never run on a guess.
    for other in (Journal(str(tmp_path), sealer=Sealer(os.urandom(32))), Journal(str(tmp_path))):
        left = other.open()
        assert [c.content_kept for c in left] == [False] * 6 and other.unreadable == 5
        crash(other)


def test_the_segment_being_written_goes_as_soon_as_its_claims_are_done(tmp_path: Path) -> None:
    j = fresh(tmp_path)
    numbered = j.number([secret_claim(i) for i in range(10)])
    j.write(numbered)
    assert SECRET.encode() in raw(tmp_path)  # no key: plain, but only while a claim needs it
    j.prune(done_through=numbered[4].seq)
    assert SECRET.encode() in raw(tmp_path) and j.segments == 1
    j.prune(done_through=numbered[-1].seq)
    assert SECRET.encode() not in raw(tmp_path), "every claim had its outcome, the segment stayed"
    assert len(list(tmp_path.glob("segment-*.bin"))) == 1  # a fresh one, for the next claims
    later = j.number([claim(20)])
    j.write(later)
    j.close(keep=None)
    assert ids(Journal(str(tmp_path)).open()) == ["ex-20"]


def test_an_old_segment_is_closed_and_deleted_once_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_mod, "SEGMENT_MAX_AGE_S", 0.0)  # every prune closes the segment being written
    j = fresh(tmp_path)
    first = j.number([secret_claim(i) for i in range(3)])
    j.write(first)
    j.prune(done_through=0)  # nothing done: closed, kept
    second = j.number([claim(10)])
    j.write(second)
    assert j.segments == 2
    j.prune(done_through=first[-1].seq)  # the first is done and deleted; the second closed, kept
    assert SECRET.encode() not in raw(tmp_path)
    assert j.segments == 2
    j.close(keep=None)
    assert ids(Journal(str(tmp_path)).open()) == ["ex-10"]


# -- issue 21, item 14: the start-up count says how many actually run ----------------------------

def test_claims_done_before_a_crash_are_not_offered_again_and_the_log_counts_both(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The measured case: 633 claims in the segment being written (it had not reached 8 MiB),
    611 of them with their outcome, 22 queued at the crash. It used to offer all 633 again."""
    j = fresh(tmp_path)
    numbered = j.number([claim(i) for i in range(633)])
    for start in range(0, 633, 10):
        j.write(numbered[start : start + 10])
    j.prune(done_through=numbered[610].seq)  # 611 have their outcome; 22 were queued at the crash
    crash(j)
    caplog.set_level("WARNING", logger="shadowtrial.journal")
    again = Journal(str(tmp_path))
    left = again.open()
    print(f"\nrestart: {caplog.records[-1].getMessage()}")
    assert ids(left) == [f"ex-{i}" for i in range(611, 633)]
    assert (again.replayed, again.already_done) == (22, 611)
    message = caplog.records[-1].getMessage()
    assert "22 sampled case(s)" in message and "offered again to run" in message and "611 more" in message


def test_done_claims_of_a_closed_segment_are_dropped_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal_mod, "SEGMENT_BYTES", 4096)  # several segments of one life
    j = fresh(tmp_path)
    numbered = j.number([claim(i) for i in range(100)])
    for start in range(0, 100, 10):
        j.write(numbered[start : start + 10])
    j.prune(done_through=numbered[89].seq)
    crash(j)
    assert len(list(tmp_path.glob("segment-*.bin"))) > 1
    again = Journal(str(tmp_path))
    assert ids(again.open()) == [f"ex-{i}" for i in range(90, 100)]


def test_a_done_through_of_another_life_never_hides_a_claim(tmp_path: Path) -> None:
    """Each life numbers its claims from 1: a watermark applies to its own life's claims only."""
    first = fresh(tmp_path)
    old = first.number([claim(i) for i in range(5)])
    first.write(old)
    crash(first)
    second = Journal(str(tmp_path))
    left = second.open()
    numbered = second.number(left)  # renumbered 1..5 in the second life
    second.write(numbered)
    second.write(second.number([claim(50 + i) for i in range(20)]))
    second.prune(done_through=20)  # the second life's 1..20 are done (ex-0..4 and ex-50..64)
    crash(second)  # before forget_previous: the first life's segment is still there
    third = Journal(str(tmp_path))
    again = ids(third.open())
    assert again.count("ex-0") == 1 and "ex-0" in again  # the first life's copy, which no watermark covers
    assert [x for x in again if x.startswith("ex-5") or x.startswith("ex-6")] == [f"ex-{i}" for i in range(65, 70)]
