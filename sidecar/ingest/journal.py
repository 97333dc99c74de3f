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
"""

from __future__ import annotations

import fcntl
import logging
import os
import struct
import threading
from pathlib import Path
from typing import Collection, Sequence

import msgspec

from sidecar.engine.engine import Claim
from sidecar.errors import StartupError
from sidecar.ingest import wide_ints
from sidecar.ingest.wire import Exchange, ExchangeRequest, ExchangeResponse

log = logging.getLogger("shadowtrial.journal")

SEGMENT_BYTES = 8 * 1024 * 1024
_LEN = struct.Struct("<I")
_ENCODER = msgspec.msgpack.Encoder()
#: A record: (number, trial id, exchange id, the exchange or None when its content is not kept).
_DECODER = msgspec.msgpack.Decoder(list[tuple[int, str, str, Exchange | None]], ext_hook=wide_ints.ext_hook)


class JournalInUse(StartupError):
    """Another sidecar holds the journal directory."""


class Journal:
    def __init__(self, directory: str) -> None:
        self.dir = Path(directory)
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
        self.replayed = 0

    # -- lifecycle -------------------------------------------------------------

    def open(self) -> list[Claim]:
        """Take the directory and start a new segment; returns, unnumbered, the claims a
        previous life left. The caller numbers them, offers them, writes (:meth:`write`) those the
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
        left: list[Claim] = []
        for path in self._previous:
            left.extend(_read(path))
        self._segment = max((int(p.stem.split("-")[1]) for p in self._previous), default=0) + 1
        self._start_segment()
        self.replayed = len(left)
        if left:
            log.warning("%d sampled case(s) a previous run had not finished are offered again", len(left))
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
        """Give ``claims`` their sequence numbers (before they are offered)."""
        with self._lock:
            first = self._seq + 1
            self._seq += len(claims)
        return [Claim(c.trial_id, c.exchange, first + i, c.content_kept) for i, c in enumerate(claims)]

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
             None if (c.trial_id in free or not c.content_kept) else c.exchange)
            for c in claims
        ], 3)
        record = _LEN.pack(len(body)) + body
        assert self._fd is not None, "journal not open"
        os.write(self._fd, record)
        self._size += len(record)
        self._last_in_current = max(self._last_in_current, claims[-1].seq)
        if self._size >= SEGMENT_BYTES:
            os.close(self._fd)
            self._closed.append((self._segment, self._last_in_current))
            self._segment += 1
            self._start_segment()

    def prune(self, done_through: int) -> int:
        """Delete closed segments whose claims are all done; returns how many."""
        with self._lock:
            return self._prune_locked(done_through)

    @property
    def segments(self) -> int:
        return len(self._closed) + (1 if self._fd is not None else 0)

    # -- plumbing ---------------------------------------------------------------------

    def _start_segment(self) -> None:
        path = self.dir / f"segment-{self._segment:08d}.bin"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = 0
        self._last_in_current = 0

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


def _read(path: Path) -> list[Claim]:
    """Claims of one segment (unnumbered); a torn last record (the process died mid-write) is dropped."""
    data = path.read_bytes()
    out: list[Claim] = []
    at = 0
    while at + _LEN.size <= len(data):
        (n,) = _LEN.unpack_from(data, at)
        end = at + _LEN.size + n
        if end > len(data):
            log.warning("journal %s ends in a torn record; its %d byte(s) are dropped", path.name, len(data) - at)
            break
        try:
            out.extend(
                Claim(t, ex) if ex is not None else Claim(t, _stub(eid), content_kept=False)
                for _, t, eid, ex in _DECODER.decode(data[at + _LEN.size : end])
            )
        except msgspec.DecodeError:
            log.error("journal %s has an unreadable record at byte %d; the rest of the file is skipped", path.name, at)
            break
        at = end
    return out


def _stub(exchange_id: str) -> Exchange:
    """An exchange that carries its id only (its team keeps no content)."""
    return Exchange(
        exchange_id=exchange_id, team="", model="", request=ExchangeRequest(messages=[]), response=ExchangeResponse()
    )
