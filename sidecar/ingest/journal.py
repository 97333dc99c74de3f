"""The intake journal: sampled claims written down before the tap answers, so a crash
cannot lose them.

The tap answers ``202 {"sampled": n}`` without waiting for the store or the engine;
until the engine has claimed a case in the store (or counted its outcome there), the
claim lives only in memory. So every claim the hand-off accepts is appended here
first — one ``write`` of a length-prefixed msgpack record per request, to the
operating system's cache, no ``fsync``: it survives the process being killed
(SIGKILL, OOM), not the machine losing power.

Claims carry a sequence number. The engine reports ``done_through``: every claim
with a number at most that has an outcome that is durable in the store (see
:mod:`sidecar.engine.watermark`). Records go to segment files that rotate every
``SEGMENT_BYTES``; a closed segment whose last number is done is deleted. At start,
:meth:`Journal.open` reads what a previous life left, writes it into the new
segment (a second crash cannot lose it either), deletes the old files and hands
the claims back to be offered again. Replaying a claim that was in fact claimed is
harmless: the case ledger recognises the exchange and it is not run or counted
twice.

One directory belongs to one sidecar at a time (an exclusive ``flock``).

At rest (issue 21, items 13 and 14):

- With a retention key (``Journal(..., sealer=...)``), every exchange is sealed before it is
  written (:class:`~sidecar.seal.Sealer`, AES-256-GCM, the trial and exchange id as
  associated data); only sequence numbers, trial ids and exchange ids are in clear. A
  sealed claim that does not open at the next start (the key changed or was removed) comes
  back without its content and is counted ``shed_stopped``, like a retention-off team's.
- The segment being written does not wait for 8 MiB: :meth:`Journal.prune` deletes it as
  soon as every claim in it is done, and closes it once it is ``SEGMENT_MAX_AGE_S`` old,
  so a claim's body outlives its outcome by about that much under steady traffic.
- Each segment starts with the id of the life that wrote it, and :meth:`Journal.prune`
  appends the life's ``done_through`` when it moves. At start, a claim at or below its
  life's last recorded ``done_through`` already has its outcome: it is dropped, not offered
  again, and the log says how many of each there were.
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Collection, Sequence

import msgspec

from sidecar.ingest.claims import Claim, Packed, pack
from sidecar.errors import StartupError
from sidecar.ingest import wide_ints
from sidecar.ingest.wire import Exchange, ExchangeRequest, ExchangeResponse
from sidecar.seal import Sealer, UnsealError

log = logging.getLogger("shadowtrial.journal")

SEGMENT_BYTES = 8 * 1024 * 1024
#: The segment being written is closed (and deleted once done) when it is this old.
SEGMENT_MAX_AGE_S = 60.0
_LEN = struct.Struct("<I")
_ENCODER = msgspec.msgpack.Encoder()
#: A claims record: (number, trial id, exchange id, the exchange; its sealed msgpack with a
#: retention key; or None when its content is not kept). It is a msgpack array, so its first
#: byte is never one of the markers below. An integer wider than msgpack's 64 bits travels as
#: an extension value (:mod:`sidecar.ingest.wide_ints`), sealed or not.
_DECODER = msgspec.msgpack.Decoder(list[tuple[int, str, str, Exchange | bytes | None]], ext_hook=wide_ints.ext_hook)
_EXCHANGE = msgspec.msgpack.Decoder(Exchange, ext_hook=wide_ints.ext_hook)
#: A segment's first record: the life (one :meth:`Journal.open`) that numbered its claims.
_LIFE = b"\x03"
_LIFE_BYTES = 16
#: A record of the life's ``done_through``: every claim numbered at most that is done.
_DONE = b"\x02"
_DONE_NUMBER = struct.Struct("<Q")


def _aad_team(trial_id: str) -> str:
    """The associated data's first part for a journaled exchange (the sealer's ``team``)."""
    return f"journal:{trial_id}"


class JournalInUse(StartupError):
    """Another sidecar holds the journal directory."""


@dataclass
class _Segment:
    """What one segment file held: its life, its numbered claims, its highest ``done_through``."""

    life: bytes | None = None
    claims: list[tuple[int, Claim]] = field(default_factory=list)
    done_through: int = 0
    unreadable: int = 0


class Journal:
    """See the module's docstring. ``sealer``: the retention key's; with it every exchange is
    sealed at rest. ``what`` names the claims in the start-up log line."""

    def __init__(self, directory: str, *, sealer: Sealer | None = None, what: str = "sampled case(s)") -> None:
        self.dir = Path(directory)
        self._sealer = sealer
        self._what = what
        self._life = os.urandom(_LIFE_BYTES)
        self._lock = threading.Lock()
        self._lockfile: int | None = None
        self._fd: int | None = None
        self._segment = 0
        self._size = 0
        self._seq = 0
        #: Closed segments: (number, last sequence number written to it).
        self._closed: list[tuple[int, int]] = []
        self._last_in_current = 0
        self._previous: list[Path] = []
        #: Trials whose team keeps no content: their records carry the exchange id only.
        self._content_free: set[str] = set()
        #: When (monotonic) the current segment got its first claim; the done_through last written.
        self._current_since: float | None = None
        self._done_written = 0
        #: At open: claims offered again, those dropped as done, those whose seal did not open.
        self.replayed = 0
        self.already_done = 0
        self.unreadable = 0

    # -- lifecycle -------------------------------------------------------------

    def open(self) -> list[Claim]:
        """Take the directory and start a new segment; returns, unnumbered, the claims a
        previous life left with no recorded outcome (those its ``done_through`` covers are dropped). The caller numbers them, offers them, writes (:meth:`write`) those the
        hand-off took, then calls :meth:`forget_previous`."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._lockfile = os.open(self.dir / "LOCK", os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StartupError(f"store.journal_dir {str(self.dir)!r}: cannot open the intake journal: "
                               f"{exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lockfile, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lockfile)
            self._lockfile = None
            raise JournalInUse(
                f"store.journal_dir {str(self.dir)!r}: the intake journal is in use by another sidecar; "
                "give each sidecar a directory of its own"
            ) from None
        self._previous = sorted(self.dir.glob("segment-*.bin"))
        segments = [_read(path, self._sealer) for path in self._previous]
        done: dict[bytes, int] = {}
        for seg in segments:
            if seg.life is not None:
                done[seg.life] = max(done.get(seg.life, 0), seg.done_through)
        left: list[Claim] = []
        total = 0
        for seg in segments:
            through = done.get(seg.life, 0) if seg.life is not None else 0
            total += len(seg.claims)
            left.extend(claim for seq, claim in seg.claims if seq > through)
        self._segment = max((int(p.stem.split("-")[1]) for p in self._previous), default=0) + 1
        self._start_segment()
        self.replayed = len(left)
        self.already_done = total - len(left)
        self.unreadable = sum(seg.unreadable for seg in segments)
        if total:
            log.log(
                logging.WARNING if left else logging.INFO,
                "intake journal %s: %d %s of the previous run had no recorded outcome and are offered again "
                "to run (%d more in the journal had theirs and are dropped)",
                self.dir.name, len(left), self._what, self.already_done,
            )
        if self.unreadable:
            log.error(
                "intake journal %s: %d %s were sealed with another retention key; they cannot run and are "
                "counted shed_stopped", self.dir.name, self.unreadable, self._what,
            )
        return left

    def forget_previous(self) -> None:
        """The previous life's claims are in the new segment (or counted): delete its files."""
        for path in self._previous:
            path.unlink(missing_ok=True)
        self._previous = []

    def close(self, *, keep: Sequence[Claim] | None) -> None:
        """Close. ``keep``: after a clean stop, every claim is done but these (written to a
        fresh segment for the next start); ``None`` (the last counts may not have reached the
        store): keep every segment, so the next start offers them again."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
                self._closed.append((self._segment, self._last_in_current))
            if keep is not None:
                self._prune_locked(self._seq)
                if keep:
                    self._segment += 1
                    self._start_segment()
                    self._write_locked(list(keep))
                    assert self._fd is not None
                    os.close(self._fd)
                    self._fd = None
            if self._lockfile is not None:
                os.close(self._lockfile)
                self._lockfile = None

    # -- writing -------------------------------------------------------------------

    def number(self, claims: Sequence[Claim]) -> list[Claim]:
        """Give ``claims`` their sequence numbers (before they are offered), their exchanges
        packed (:class:`~sidecar.ingest.claims.Packed`): :meth:`write` writes those bytes and
        the engine's pipe sends them, with no second encoding, and no decoded exchange outlives
        the tap's batch (issue 29)."""
        with self._lock:
            first = self._seq + 1
            self._seq += len(claims)
        return [Claim(c.trial_id, _packed(c.exchange), first + i, c.content_kept) for i, c in enumerate(claims)]

    def write(self, claims: Sequence[Claim], content_free: Collection[str] = ()) -> None:
        """Append numbered claims (those the hand-off took) in one write. For trials in
        ``content_free`` (retention off) only the exchange id is written: the team's content
        is never stored, so after a crash such a case is counted, not run."""
        if not claims:
            return
        with self._lock:
            self._content_free.update(content_free)
            self._write_locked(claims)

    def _write_locked(self, claims: Sequence[Claim]) -> None:
        free = self._content_free
        # An integer wider than msgpack's 64 bits is written as an extension value (sidecar.ingest.wide_ints).
        body = wide_ints.encode(_ENCODER.encode, [
            (c.seq, c.trial_id, c.exchange.exchange_id,
             None if (c.trial_id in free or not c.content_kept) else self._content(c))
            for c in claims
        ], 3)
        self._append_locked(body)
        self._last_in_current = max(self._last_in_current, claims[-1].seq)
        if self._current_since is None:
            self._current_since = time.monotonic()
        if self._size >= SEGMENT_BYTES:
            self._rotate_locked()

    def _content(self, claim: Claim) -> Exchange | msgspec.Raw | bytes:
        if self._sealer is None:
            return claim.wire()
        packed = _packed(claim.exchange)
        return self._sealer.seal(packed.data, team=_aad_team(claim.trial_id), exchange_id=packed.exchange_id)

    def _append_locked(self, body: bytes) -> None:
        record = _LEN.pack(len(body)) + body
        assert self._fd is not None, "journal not open"
        os.write(self._fd, record)
        self._size += len(record)

    def _rotate_locked(self) -> None:
        assert self._fd is not None
        os.close(self._fd)
        self._closed.append((self._segment, self._last_in_current))
        self._segment += 1
        self._start_segment()

    def prune(self, done_through: int) -> int:
        """Delete segments whose claims are all done, the one being written included (a new
        one is started); close the one being written once it is ``SEGMENT_MAX_AGE_S`` old;
        else note ``done_through`` in it. Returns how many segments were deleted."""
        with self._lock:
            if self._fd is not None and self._current_since is not None and (
                self._last_in_current <= done_through  # every claim in it is done: it goes now
                or time.monotonic() - self._current_since >= SEGMENT_MAX_AGE_S  # deleted once done
            ):
                self._rotate_locked()
            gone = self._prune_locked(done_through)
            if (self._fd is not None and done_through > self._done_written
                    and (self._closed or self._current_since is not None)):  # claims left: note what is done
                self._append_locked(_DONE + _DONE_NUMBER.pack(done_through))
                self._done_written = done_through
            return gone

    @property
    def segments(self) -> int:
        return len(self._closed) + (1 if self._fd is not None else 0)

    # -- plumbing ---------------------------------------------------------------------

    def _start_segment(self) -> None:
        path = self.dir / f"segment-{self._segment:08d}.bin"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = 0
        self._last_in_current = 0
        self._current_since = None
        self._append_locked(_LIFE + self._life)

    def _prune_locked(self, done_through: int) -> int:
        keep, gone = [], 0
        for number, last in self._closed:
            if last <= done_through:
                (self.dir / f"segment-{number:08d}.bin").unlink(missing_ok=True)
                gone += 1
            else:
                keep.append((number, last))
        self._closed = keep
        return gone


def _packed(ex: Exchange | Packed) -> Packed:
    return ex if isinstance(ex, Packed) else pack(ex)


def _read(path: Path, sealer: Sealer | None) -> _Segment:
    """What one segment holds; a torn last record (the process died mid-write) is dropped."""
    data = path.read_bytes()
    seg = _Segment()
    at = 0
    while at + _LEN.size <= len(data):
        (n,) = _LEN.unpack_from(data, at)
        end = at + _LEN.size + n
        if end > len(data):
            log.warning("journal %s ends in a torn record; its %d byte(s) are dropped", path.name, len(data) - at)
            break
        body = data[at + _LEN.size : end]
        try:
            if body[:1] == _LIFE and len(body) == 1 + _LIFE_BYTES:
                seg.life = body[1:]
            elif body[:1] == _DONE and len(body) == 1 + _DONE_NUMBER.size:
                seg.done_through = max(seg.done_through, _DONE_NUMBER.unpack_from(body, 1)[0])
            else:
                seg.claims.extend((seq, _claim(seg, sealer, t, eid, ex)) for seq, t, eid, ex in _DECODER.decode(body))
        except msgspec.DecodeError:
            log.error("journal %s has an unreadable record at byte %d; the rest of the file is skipped", path.name, at)
            break
        at = end
    return seg


def _claim(seg: _Segment, sealer: Sealer | None, trial_id: str, exchange_id: str,
           content: Exchange | bytes | None) -> Claim:
    """A claim as journaled (unnumbered); one whose sealed content does not open has none."""
    if isinstance(content, bytes):
        try:
            if sealer is None:
                raise UnsealError("no retention key")
            content = _EXCHANGE.decode(sealer.open(content, team=_aad_team(trial_id), exchange_id=exchange_id))
        except (UnsealError, msgspec.DecodeError):
            seg.unreadable += 1
            content = None
    if content is None:
        return Claim(trial_id, _stub(exchange_id), content_kept=False)
    return Claim(trial_id, content)


def _stub(exchange_id: str) -> Exchange:
    """An exchange that carries its id only (its team keeps no content)."""
    return Exchange(
        exchange_id=exchange_id, team="", model="", request=ExchangeRequest(messages=[]), response=ExchangeResponse()
    )
