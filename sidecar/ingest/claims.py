"""A claim: the plain-data unit of work intake hands to a sink.

It is the contract between intake (which makes claims) and every sink that takes them
(the local engine, its process, the control-plane forwarder), and between the intake
journal and the replay feeder: all of them import it from here, and this module imports
nothing but the wire schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.ingest.wire import Exchange


@dataclass(frozen=True, slots=True)
class Claim:
    """A sampled (trial, exchange): plain data, no clients or judges inside."""

    trial_id: str
    exchange: Exchange
    #: Its number in the intake journal (:mod:`sidecar.ingest.journal`); 0 when not journaled.
    seq: int = 0
    #: False for a claim carried over a crash for a retention-off team, whose content the
    #: journal did not keep: it cannot run, so it is recorded ``shed_stopped`` (once).
    content_kept: bool = True
