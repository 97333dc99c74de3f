"""A claim: the plain-data unit of work intake hands to a sink.

It is the contract between intake (which makes claims) and every sink that takes them
(the local engine, its process, the control-plane forwarder), and between the intake
journal and the replay feeder: all of them import it from here, and this module imports
nothing of ours but the wire schema and its msgpack codec of wide integers.
"""

from __future__ import annotations

import msgspec

from sidecar.ingest import wide_ints
from sidecar.ingest.wire import Exchange

_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(Exchange, ext_hook=wide_ints.ext_hook)


class Packed(msgspec.Struct, frozen=True, gc=False):
    """An exchange already written as msgpack (:func:`pack`), with the two fields a sink reads
    before it needs the rest.

    The intake journal packs the claims it numbers: it writes these bytes, and the engine's
    pipe sends the same bytes (:mod:`sidecar.engine.pipe`), so a sampled exchange is encoded
    once, and the decoded objects of a batch all go when the tap has answered it. Holding
    them until the forwarding thread sent them made the garbage collector run on them, promote
    and traverse them, and kept the allocator's pools half full (issue 29: at 5% sampled, the
    collector took about 2% of the tap process's CPU samples, 0.1% since, and the allocator's
    share fell by 1.8 points)."""

    exchange_id: str
    team: str
    #: The exchange's msgpack; an integer wider than msgpack's 64 bits is an extension value.
    data: bytes

    def unpack(self) -> Exchange:
        return _DECODER.decode(self.data)


def pack(ex: Exchange) -> Packed:
    """The exchange as msgpack bytes (wide integers as :mod:`sidecar.ingest.wide_ints` writes them)."""
    try:
        data = _ENCODER.encode(ex)
    except OverflowError:
        data = _ENCODER.encode(wide_ints.widen(ex))
    return Packed(ex.exchange_id, ex.team, data)


class Claim(msgspec.Struct, frozen=True, gc=False):
    """A sampled (trial, exchange): plain data, no clients or judges inside.

    A msgspec struct, not a frozen dataclass: intake makes two per sampled exchange (offered,
    then numbered by the journal) and the engine's process one more, and a frozen dataclass's
    ``__init__`` cost about 1.7 µs each on this project's 2-core machine against 0.2 µs (issue
    29). Not tracked by the garbage collector: it holds a trial id, an exchange (decoded JSON,
    itself untracked, :mod:`sidecar.ingest.wire`, or its :class:`Packed` bytes) and two
    scalars, never a reference back to itself, so it can be in no reference cycle.

    ``exchange`` is :class:`Packed` once the intake journal numbered the claim; its
    ``exchange_id`` and ``team`` read the same either way, and :meth:`content` gives the
    exchange whole."""

    trial_id: str
    exchange: Exchange | Packed
    #: Its number in the intake journal (:mod:`sidecar.ingest.journal`); 0 when not journaled.
    seq: int = 0
    #: False for a claim carried over a crash for a retention-off team, whose content the
    #: journal did not keep: it cannot run, so it is recorded ``shed_stopped`` (once).
    content_kept: bool = True

    def content(self) -> Exchange:
        """The exchange, decoded if it travels packed."""
        ex = self.exchange
        return ex.unpack() if isinstance(ex, Packed) else ex

    def wire(self) -> Exchange | msgspec.Raw:
        """The exchange as a msgpack encoder embeds it: its packed bytes as they are."""
        ex = self.exchange
        return msgspec.Raw(ex.data) if isinstance(ex, Packed) else ex
