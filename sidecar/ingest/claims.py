"""A claim: the plain-data unit of work intake hands to a sink.

It is the contract between intake (which makes claims) and every sink that takes them
(the local engine, its process, the control-plane forwarder), and between the intake
journal and the replay feeder: all of them import it from here, and this module imports
nothing of ours but the wire schema.
"""

from __future__ import annotations

import msgspec

from sidecar.ingest.wire import Exchange


class Claim(msgspec.Struct, frozen=True, gc=False):
    """A sampled (trial, exchange): plain data, no clients or judges inside.

    A msgspec struct, not a frozen dataclass: intake makes two per sampled exchange (offered,
    then numbered by the journal) and the engine's process one more, and a frozen dataclass's
    ``__init__`` cost about 1.7 µs each on this project's 2-core machine against 0.2 µs (issue
    29). Not tracked by the garbage collector: it holds a trial id, an exchange (decoded JSON,
    itself untracked, :mod:`sidecar.ingest.wire`) and two scalars, never a reference back to
    itself, so it can be in no reference cycle."""

    trial_id: str
    exchange: Exchange
    #: Its number in the intake journal (:mod:`sidecar.ingest.journal`); 0 when not journaled.
    seq: int = 0
    #: False for a claim carried over a crash for a retention-off team, whose content the
    #: journal did not keep: it cannot run, so it is recorded ``shed_stopped`` (once).
    content_kept: bool = True
