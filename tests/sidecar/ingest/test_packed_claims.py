"""Sampled exchanges packed once (:class:`sidecar.ingest.claims.Packed`, issue 29): the intake
journal numbers a claim with its exchange as msgpack bytes, writes those bytes, and the engine's
pipe sends the same bytes; every reader gets back the exchange the gateway sent, and nothing of
a decoded batch is held once the tap has answered it."""

from __future__ import annotations

import gc
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgspec
import pytest

from sidecar.engine.pipe import decode_claims, encode_claims
from sidecar.export.forwarder import exchange_record
from sidecar.ingest.claims import Claim, Packed, pack
from sidecar.ingest.funnel import FunnelCounter
from sidecar.ingest.handoff import Handoff
from sidecar.ingest.intake import ingest
from sidecar.ingest.journal import Journal
from sidecar.ingest.routing import Route, RoutingTable, Routes
from sidecar.ingest.wire import Exchange
from sidecar.seal import Sealer
from sidecar.telemetry.counters import TapCounters

JSON = "application/json"
WIDE = 2**64 + 5  # JSON has no bound on an integer; msgpack stops at 2**64 - 1


def exchange(i: int, **params: Any) -> dict[str, Any]:
    return {
        "exchange_id": f"ex-{i}", "team": "team-a", "gateway": "gw", "route": "/v1/chat/completions", "model": "m",
        "request": {"messages": [{"role": "user", "content": f"question {i}"}],
                    "params": {"temperature": 0.2, **params}},
        "response": {"content": f"answer {i}", "usage": {"input_tokens": 9, "output_tokens": 3}},
        "tags": {"tier": "gold"},
    }


def decoded(i: int, **params: Any) -> Exchange:
    return msgspec.json.decode(json.dumps(exchange(i, **params)), type=Exchange)


def parts(journal: Journal | None, sink: Handoff[Claim]) -> Any:
    table = RoutingTable()
    table.current = Routes([Route("t1", "team-a", "m", None, None, 1.0, "local")])
    return SimpleNamespace(routing=table, sinks={"local": sink}, journals={"local": journal} if journal else {},
                           funnel=FunnelCounter(), counters=TapCounters(), retention=None, outbox_full=False)


@pytest.mark.parametrize("params", [{}, {"seed": WIDE, "tools": [{"type": "function"}]}], ids=["plain", "wide-nested"])
def test_a_packed_claim_reads_and_travels_as_the_exchange_it_packs(params: dict[str, Any]) -> None:
    ex = decoded(1, **params)
    packed = Claim("t1", pack(ex), 7)
    whole = Claim("t1", ex, 7)
    assert isinstance(packed.exchange, Packed)
    assert (packed.exchange.exchange_id, packed.exchange.team) == (ex.exchange_id, ex.team)
    assert packed.content() == ex and whole.content() is ex
    # The engine's pipe: the same bytes whether the exchange went packed or whole, wide integers included.
    assert encode_claims([packed]) == encode_claims([whole])
    [back] = decode_claims(encode_claims([packed]))
    assert back.exchange == ex and back.seq == 7
    if params:
        assert back.exchange.request.params["seed"] == WIDE
    # The control-plane forwarder's record.
    assert exchange_record(packed) == exchange_record(whole)


def test_a_pipe_message_may_mix_packed_and_whole_claims_with_a_wide_integer() -> None:
    """The pipe's fallback for an integer msgpack cannot carry rewrites whole exchanges only."""
    wide, plain = decoded(1, seed=WIDE), decoded(2)
    claims = [Claim("t1", pack(plain), 1), Claim("t1", wide, 2), Claim("t1", pack(wide), 3)]
    assert [c.exchange for c in decode_claims(encode_claims(claims))] == [plain, wide, wide]


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
def test_the_journal_numbers_claims_packed_writes_their_bytes_and_reads_them_back(tmp_path: Path, sealed: bool) -> None:
    sealer = Sealer(b"k" * 32) if sealed else None
    journal = Journal(str(tmp_path), sealer=sealer)
    journal.open()
    given = [decoded(1), decoded(2, seed=WIDE)]
    numbered = journal.number([Claim("t1", ex) for ex in given] + [Claim("t1", pack(decoded(3)))])
    assert [type(c.exchange) for c in numbered] == [Packed] * 3
    assert [c.seq for c in numbered] == [1, 2, 3]
    journal.write(numbered)
    journal.close(keep=None)
    again = Journal(str(tmp_path), sealer=sealer)
    assert [c.exchange for c in again.open()] == [*given, decoded(3)]
    again.close(keep=None)
    if sealed:  # the content at rest is sealed, packed or not
        assert b"question" not in b"".join(p.read_bytes() for p in tmp_path.glob("segment-*.bin"))


def test_the_tap_holds_no_decoded_exchange_once_a_journaled_batch_is_answered(tmp_path: Path) -> None:
    """What the sink and the journal keep of a sampled batch is packed bytes: the batch's decoded
    objects all go when ingest returns (no list, dict or struct of it left for the collector)."""
    journal = Journal(str(tmp_path))
    journal.open()
    sink: Handoff[Claim] = Handoff(100)
    body = json.dumps([exchange(i) for i in range(20)]).encode()
    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    reply = ingest(parts(journal, sink), body, JSON)
    assert (reply.accepted, reply.sampled) == (20, 20)
    claims = sink.drain_remaining()
    assert all(isinstance(c.exchange, Packed) for c in claims)
    assert [c.content().request.messages[0]["content"] for c in claims] == [f"question {i}" for i in range(20)]
    # Messages are lists (tracked by the collector): none of the batch's is alive.
    left = [o for o in gc.get_objects() if id(o) not in before and isinstance(o, list)
            and any(isinstance(m, dict) and str(m.get("content", "")).startswith("question") for m in o)]
    assert left == []
    journal.close(keep=None)


def test_without_a_journal_claims_go_to_the_sink_whole(tmp_path: Path) -> None:
    sink: Handoff[Claim] = Handoff(100)
    ingest(parts(None, sink), json.dumps([exchange(1)]).encode(), JSON)
    [claim] = sink.drain_remaining()
    assert isinstance(claim.exchange, Exchange) and claim.content() is claim.exchange
