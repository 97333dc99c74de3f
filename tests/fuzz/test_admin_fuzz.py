"""A property-based fuzz of the admin API (issue 8's must-show, admin half; extended by issue 21).

Thousands of generated requests — create bodies with extreme, mistyped, unknown and missing
fields, bodies that are not JSON at all, odd ``Idempotency-Key`` and ``Content-Encoding``
headers, list queries, trial ids and paths, methods — go to one real sidecar on loopback
(:class:`tests.harness.Harness`), and every answer must keep the API's promises:

* never a 5xx;
* every non-2xx is ``{"error": {"code", "message", "field"}}`` as JSON, and names the field
  when one is at fault (a body that is a JSON object, a header, a query parameter);
* every trial created holds only values inside their documented ranges;
* the sidecar is alive and ready at the end.

Issue 21 adds create bodies carrying one hostile value each — integers wider than 64 bits or
with more digits than Python reads, nesting up to thousands deep, invalid UTF-8 in a key or a
value, NaN and Infinity literals, strings of up to 256 KiB — counted by kind, none taken as a
trial; and runs the examples twice: the second run's peak RSS stays within 10% of the first's.

Deterministic (``derandomize=True``, no example database) and bounded: the examples are
fixed in number, each one a single request, drawn once and sent in each run by a bare
keep-alive client (:mod:`tests.fuzz.wire`; issue 29: drawing them twice and httpx's layers
were most of the test's CPU).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import msgspec
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from sidecar.config import MAX_TOKENS
from tests.fuzz.hostile import BAD_TEXT, peak_rss, reset_peak, rss_bytes, without_source_constants
from sidecar.trials.create import MAX_CAP_USD, MAX_CASES, MIN_CAP_USD, MIN_TOLERANCE, STATUSES, JudgeIn, TrialCreate
from tests.fuzz.wire import AsyncClient
from tests.harness import CANDIDATE, INCUMBENT, JUDGE, Harness

#: Examples per run; the run is made twice (the same examples: derandomized).
EXAMPLES = 1_200
RUNS = 2
MIN_EXAMPLES = 2_000
#: The second run's peak RSS may exceed the first's by this share at most (issue 21, item 7).
PEAK_GROWTH = 0.10

# -- values ---------------------------------------------------------------------------------------

EXTREME_NUMBERS = [
    0, -1, 1, 2, 2**31, 2**53 + 1, 2**63 - 1, 2**63, -(2**63), 2**64, 10**30, -(10**30),
    0.0, -0.0, 1e-300, -1e-300, 5e-324, 1e-9, 1e-6, 5e-7, 0.001, 0.0009, 0.4999999, 0.5, 1.0, 1.0000001,
    1e13, 1e14, 1e300, 1.7976931348623157e308, MAX_CAP_USD, MAX_CAP_USD + 0.01, MAX_TOKENS, MAX_TOKENS + 1,
    MAX_CASES, MAX_CASES + 1,
]
ODD_STRINGS = [
    "", " ", "a ", " a", "a\n", "\n", "\t", "\x00", "\x7f", "a\u2028b", "\u00a0", "é", "日本", "\U0001f600",
    "x" * 256, "x" * 257, "team-a", INCUMBENT, CANDIDATE, JUDGE, "unpriced-model", "pairwise-v1", "no-such-rubric",
    "null", "1e400", "NaN", "../../v1/live", "%00", "'; DROP TABLE trials; --",
]

numbers = st.one_of(
    st.sampled_from(EXTREME_NUMBERS),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
strings = st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=20))
scalars = st.one_of(st.none(), st.booleans(), numbers, strings)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
# A value for any field: mostly of the field's own kind, sometimes anything at all.
any_value = st.one_of(numbers, strings, scalars, json_values)


def price_value() -> st.SearchStrategy[Any]:
    full = st.fixed_dictionaries({"input_per_mtok_usd": numbers, "output_per_mtok_usd": numbers})
    return st.one_of(full, st.dictionaries(st.sampled_from(["input_per_mtok_usd", "output_per_mtok_usd", "x"]),
                                           any_value, max_size=3), any_value)


judge_value = st.one_of(
    st.dictionaries(st.sampled_from([*JudgeIn.__struct_fields__, "modle"]),
                    st.one_of(numbers, strings, st.sampled_from([JUDGE, "pairwise-v1"])), max_size=4),
    any_value,
)

def near(low: float, high: float) -> st.SearchStrategy[Any]:
    """Numbers in and just around a documented range, and anything else."""
    return st.one_of(st.floats(low, high), st.sampled_from([low, high]), numbers)


def near_int(low: int, high: int) -> st.SearchStrategy[Any]:
    return st.one_of(st.integers(low, high), st.sampled_from([low - 1, low, high, high + 1]), numbers)


FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "team": strings, "incumbent_model": strings, "candidate_model": strings, "route": strings, "gateway": strings,
    "spend_cap_usd": near(MIN_CAP_USD, MAX_CAP_USD), "sample_rate": near(0.0, 1.0),
    "expected_cases": near_int(1, MAX_CASES), "tolerance": near(MIN_TOLERANCE, 0.5),
    "min_cases": near_int(1, MAX_CASES), "audit_share": near(0.0, 1.0), "max_tokens": near_int(1, MAX_TOKENS),
    "judge": judge_value, "candidate_price": price_value(), "judge_price": price_value(),
    "incumbent_price": price_value(),
    "source": st.one_of(
        st.dictionaries(st.sampled_from(["kind", "from", "to", "form"]),
                        st.one_of(st.sampled_from(["live", "replay", "2026-11-30T00:00:00Z", "2026-13-01", ""]),
                                  numbers, strings), max_size=4),
        any_value,
    ),
    "sample_size": near_int(1, MAX_CASES),
    "on_decision": st.one_of(st.sampled_from(["stop", "continue", "Stop", "", "halt"]), any_value),
    "segments": st.one_of(
        st.lists(st.one_of(st.sampled_from(["route", "model", "gateway", "length", "tag:tier", "tag:", "prompt"]),
                           strings), max_size=10),
        any_value,
    ),
    "segment_cap": near_int(1, 64),
    "segment_min_cases": near_int(1, MAX_CASES),
}
assert set(FIELD_VALUES) == set(TrialCreate.__struct_fields__)


# The strategies the composites below draw from, built once: a strategy built inside a
# composite is built (and its properties worked out, through ``any_value``'s recursion) at
# every draw, most of the generation's CPU (issue 29). The same strategies, so the same examples.
TEAMS = st.sampled_from(["team-a", "team-b", "team-c"])
FIELD_NAMES = st.lists(st.sampled_from(sorted(FIELD_VALUES)), max_size=4, unique=True)
FIELD_OR_ANY = {name: st.one_of(values, any_value) for name, values in FIELD_VALUES.items()}
DROPPED = st.lists(st.sampled_from(["team", "incumbent_model", "candidate_model", "spend_cap_usd"]), max_size=1)
COIN = st.booleans()
ONE_IN_6, ONE_IN_10 = st.integers(0, 5), st.integers(0, 9)
UNKNOWN_NAME = st.text(min_size=1, max_size=10)


@st.composite
def create_bodies(draw: st.DrawFn) -> dict[str, Any]:
    """A valid body with a few fields changed, dropped or added."""
    body: dict[str, Any] = {
        "team": draw(TEAMS),
        "incumbent_model": INCUMBENT, "candidate_model": CANDIDATE, "spend_cap_usd": 5.0,
    }
    for name in draw(FIELD_NAMES):
        body[name] = draw(FIELD_OR_ANY[name] if draw(COIN) else FIELD_VALUES[name])
    for name in draw(DROPPED):
        body.pop(name, None)
    if draw(ONE_IN_10) == 0:
        body[draw(UNKNOWN_NAME)] = draw(any_value)
    return body


CREATE_BODIES = create_bodies()


RAW_BODIES = [
    b"", b"{", b"[]", b"null", b"1", b'"x"', b"{}", b"NaN", b'{"team": NaN}', b"\xff\xfe", b'{"team": "\xff"}',
    b'{"team": "\\ud800"}', b"[" * 10_000 + b"]" * 10_000, b'{"team":' * 2_000, b'{"a":' * 1_000 + b"1" + b"}" * 1_000,
    b'{"team": "t", "team": "u"}', b"\x1f\x8b\x08\x00", b'{"spend_cap_usd": 1e400}', b'{"max_tokens": 99999999999999999999999}',
]
raw_bodies = st.one_of(st.sampled_from(RAW_BODIES), st.binary(max_size=64))


# -- hostile values (issue 21) ------------------------------------------------------------------------

_MARK = re.compile(rb'"__(deep|bad|digits)_(\d+)__"')


def _unmark(text: bytes) -> bytes:
    """Markers json.dumps cannot write: nesting thousands deep, invalid text, a 4,301-digit integer."""

    def one(m: re.Match[bytes]) -> bytes:
        n = int(m.group(2))
        if m.group(1) == b"deep":
            return b"[" * n + b"]" * n
        if m.group(1) == b"bad":
            return BAD_TEXT[n % len(BAD_TEXT)]
        return b"9" * n

    return _MARK.sub(one, text)


HOSTILE_KINDS: dict[str, st.SearchStrategy[Any]] = {
    "wide": st.one_of(st.integers(2**64, 2**300), st.integers(-(2**300), -(2**63) - 1),
                      st.sampled_from([2**64, -(2**63) - 1, int("9" * 4300), "__digits_4301__"])),
    "deep": st.sampled_from([10, 64, 65, 200, 990, 1_000, 5_000]).map(lambda n: f"__deep_{n}__"),
    "bad_text": st.integers(0, 255).map(lambda i: f"__bad_{i}__"),
    "nonfinite": st.sampled_from([float("nan"), float("inf"), float("-inf")]),
    "huge_text": st.sampled_from([2**12, 2**16, 2**18]).map(lambda n: "h" * n),
}


HOSTILE_KIND = st.sampled_from([*HOSTILE_KINDS, "bad_key"])
HOSTILE_FIELD = st.sampled_from([*FIELD_VALUES, "team", "spend_cap_usd", "unknown_field"])
BYTE = st.integers(0, 255)
INNER_FIELD = st.sampled_from(["model", "input_per_mtok_usd", "x"])


@st.composite
def hostile_create_requests(draw: st.DrawFn) -> Req:
    """A create body with one hostile value in a field (or an unknown one), or a corrupted key."""
    body = draw(CREATE_BODIES)
    kind = draw(HOSTILE_KIND)
    name = draw(HOSTILE_FIELD)
    if kind == "bad_key":
        body[f"__bad_{draw(BYTE)}__"] = body.pop(name, 1)
    elif name in ("judge", "candidate_price") and draw(COIN):  # one level down
        body[name] = {draw(INNER_FIELD): draw(HOSTILE_KINDS[kind])}
    else:
        body[name] = draw(HOSTILE_KINDS[kind])
    raw = _unmark(json.dumps(body).encode())
    return Req("POST", "/v1/trials", raw, draw(HEADERS), kind=kind)


# -- requests -----------------------------------------------------------------------------------------

def _field_value(value: bytes) -> bool:
    """A well-formed HTTP field value (RFC 9110: visible ASCII, obs-text, inner spaces and tabs).
    Malformed HTTP framing is answered by aiohttp's parser before any of the sidecar's code runs,
    and httpx will not send it, so the fuzz stays within HTTP and fuzzes the API."""
    return value.strip(b" \t") == value and all(c in (0x09, 0x20) or 0x21 <= c != 0x7F for c in value)


header_values = st.one_of(
    st.sampled_from([b"k-1", b"k-2", b"same key", b"", b"tab\there", b"x" * 255, b"x" * 256, "clé".encode(), b"cl\xe9"]),
    st.text(max_size=12).map(lambda s: s.encode()).filter(_field_value),
    st.binary(min_size=1, max_size=12).filter(_field_value),
)


KEYS = st.integers(0, 2)
ENCODINGS = st.sampled_from(["gzip", "deflate", "br", "zstd", "identity", "gzip, identity", "bogus", ""])
CONTENT_TYPES = st.sampled_from(["text/plain", "application/x-ndjson", "multipart/form-data", "", "x/y; q=é"])
OTHER_HEADERS = st.sampled_from(["X-Anything", "Authorization", "Accept-Encoding", "Expect"])


@st.composite
def headers(draw: st.DrawFn) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for _ in range(draw(KEYS)):  # Idempotency-Key: none, one, or two
        out.append(("Idempotency-Key", draw(header_values)))
    if draw(ONE_IN_6) == 0:
        enc = draw(ENCODINGS)
        out.append(("Content-Encoding", enc.encode()))
    if draw(ONE_IN_6) == 0:
        ctype = draw(CONTENT_TYPES)
        out.append(("Content-Type", ctype.encode()))
    if draw(ONE_IN_10) == 0:
        out.append((draw(OTHER_HEADERS), draw(header_values)))
    return out


HEADERS = headers()


class Req(msgspec.Struct):
    method: str
    path: str
    body: bytes | None = None
    headers: list[tuple[str, bytes]] = []
    #: What the answer must name when the request is refused for it: "body" (a JSON object),
    #: "query" (a parameter: one of ``params`` when they are known), or "" (no field need be at fault).
    fault: str = ""
    params: list[str] = []
    #: The kind of hostile value in it (issue 21), if any.
    kind: str = ""


ONE_IN_5 = st.integers(0, 4)


@st.composite
def create_requests(draw: st.DrawFn) -> Req:
    if draw(ONE_IN_5) == 0:
        raw = draw(raw_bodies)
    else:
        raw = json.dumps(draw(CREATE_BODIES)).encode()
    try:
        is_object = isinstance(msgspec.json.decode(raw), dict)
    except (msgspec.DecodeError, RecursionError):
        is_object = False
    return Req("POST", "/v1/trials", raw, draw(HEADERS), "body" if is_object else "")


QUERY_NAMES = st.one_of(st.sampled_from(["status", "team", "staus", "limit"]), st.text(min_size=1, max_size=6))
QUERY_VALUES = st.one_of(st.sampled_from([*STATUSES, "bogus", "", "team-a", "team-b", "a\n", "x" * 300]), st.text(max_size=8))
QUERY_PAIRS = st.lists(st.tuples(QUERY_NAMES, QUERY_VALUES), max_size=3)
RAW_QUERIES = st.sampled_from(["%zz", "status=%ff", "team=%00", "&&", "=x", "status", "a=1;b=2"])


@st.composite
def list_requests(draw: st.DrawFn) -> Req:
    pairs = draw(QUERY_PAIRS)
    query, params = urlencode(pairs), [n for n, _ in pairs]
    if draw(ONE_IN_10) == 0:  # as typed, not as encoded: the server's reading of it decides the names
        query, params = draw(RAW_QUERIES), []
    return Req("GET", "/v1/trials" + (f"?{query}" if query else ""), fault="query", params=params)


trial_ids = st.one_of(st.sampled_from(["tr_nope", "..", ".", "../../v1/live", "%2F", "x" * 2000]), st.text(min_size=1, max_size=20))


OTHER_KIND = st.integers(0, 3)
SUFFIXES = st.sampled_from(["", "/stop", "/promote", "/"])
TRIAL_METHODS = st.sampled_from(["GET", "POST", "DELETE"])
KNOWN_PATHS = st.sampled_from(["/v1/live", "/healthz", "/readyz", "/metrics", "/openapi.json", "/v1/trials"])
ANY_METHOD = st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
SEGMENTS = st.lists(st.text(max_size=8), min_size=1, max_size=3)
GET_OR_POST = st.sampled_from(["GET", "POST"])


@st.composite
def other_requests(draw: st.DrawFn) -> Req:
    kind = draw(OTHER_KIND)
    if kind == 0:
        segment = draw(trial_ids)
        encoded = segment.replace(".", "%2E") if set(segment) <= {"."} else quote(segment, safe="")
        suffix = draw(SUFFIXES)
        method = draw(TRIAL_METHODS)
        return Req(method, f"/v1/trials/{encoded}{suffix}", b"{}" if method == "POST" else None, draw(HEADERS))
    if kind == 1:
        path = draw(KNOWN_PATHS)
        method = draw(ANY_METHOD)
        return Req(method, path, draw(raw_bodies) if method != "GET" else None, draw(HEADERS))
    path = "/" + "/".join(quote(s, safe="") for s in draw(SEGMENTS))
    return Req(draw(GET_OR_POST), path)


requests = st.one_of(create_requests(), create_requests(), create_requests(), list_requests(), other_requests(),
                     hostile_create_requests())


# -- the properties ---------------------------------------------------------------------------------


def check_created(view: dict[str, Any]) -> None:
    """A trial the API accepted holds only values inside their documented ranges."""
    assert MIN_CAP_USD <= view["spend_cap_usd"] <= MAX_CAP_USD, view
    assert 1 <= view["spend"]["cap_micros"] <= MAX_CAP_USD * 1_000_000, view
    assert 0 <= view["sample_rate"] <= 1, view
    assert MIN_TOLERANCE <= view["verdict"]["tolerance"] < 0.5, view


def check(req: Req, r: httpx.Response, stats: Counter[str]) -> None:
    stats[f"{r.status_code // 100}xx"] += 1
    assert r.status_code < 500, (req, r.status_code, r.text[:500])
    if req.kind:
        stats[f"hostile:{req.kind}:{r.status_code}"] += 1
        if req.kind in ("bad_text", "bad_key", "nonfinite") or (req.kind == "deep" and b"[" * 65 in (req.body or b"")):
            assert r.status_code >= 400, (req, r.status_code, r.text[:500])  # never a trial
        if r.status_code == 400:
            stats[f"hostile:{req.kind}:field_named"] += isinstance(r.json()["error"]["field"], str)
    if req.method == "HEAD":
        return
    if r.status_code < 400:
        if req.method == "POST" and req.path == "/v1/trials" and r.status_code == 201:
            stats["created"] += 1
            check_created(r.json())
        return
    assert r.headers.get("content-type", "").startswith("application/json"), (req, r.status_code, r.text[:500])
    data = r.json()
    assert isinstance(data, dict) and set(data) == {"error"}, data
    err = data["error"]
    assert isinstance(err, dict) and set(err) == {"code", "message", "field"}, data
    assert isinstance(err["code"], str) and err["code"] and isinstance(err["message"], str) and err["message"], data
    assert err["field"] is None or isinstance(err["field"], str), data
    stats[f"error:{err['code']}"] += 1
    if req.fault == "body" and r.status_code in (400, 415, 422):
        # A JSON object was refused: for a field of it, or for a header.
        assert isinstance(err["field"], str) and (
            err["field"].startswith("$") or err["field"] in ("Idempotency-Key", "Content-Encoding")), (req, data)
    if req.fault == "query" and r.status_code == 400:
        # A parameter was refused: the one named (generated ones are known by name).
        assert isinstance(err["field"], str) and (err["field"] in req.params or not req.params), (req, data)


def generate(n: int) -> list[Req]:
    """``n`` requests from hypothesis, derandomized (the same ones every run): drawn once, sent in
    each run (drawing them again for the second run cost as much CPU as sending them)."""
    out: list[Req] = []

    @settings(
        max_examples=n, deadline=None, derandomize=True, database=None, phases=[Phase.generate],
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                               HealthCheck.filter_too_much],
    )
    @given(req=requests)
    def collect(req: Req) -> None:
        out.append(req)

    with without_source_constants():  # the same examples whatever the process imported before
        collect()
    return out


async def test_admin_api_fuzz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    examples = await asyncio.to_thread(generate, EXAMPLES)
    assert len(examples) == EXAMPLES
    stats: Counter[str] = Counter()
    peaks: list[int] = []
    rss: list[int] = [rss_bytes()]
    async with Harness(tmp_path, extra='[models.unpriced-model]\nprovider = "local"\n') as harness:
        assert harness.sidecar
        # A bare keep-alive client (tests/fuzz/wire.py): httpx cost more CPU per request than the sidecar.
        client = AsyncClient(harness.sidecar.admin_url, timeout=30.0)
        started = time.monotonic()
        try:
            for _ in range(RUNS):  # the same examples each run
                reset_peak()
                for req in examples:
                    stats["examples"] += 1
                    check(req, await client.request(req.method, req.path, content=req.body, headers=req.headers), stats)
                peaks.append(peak_rss())
                rss.append(rss_bytes())
        finally:
            elapsed = time.monotonic() - started
            mib = [round(x / 2**20, 1) for x in peaks]
            with capsys.disabled():
                print(f"\nadmin fuzz: {stats['examples']} examples in {elapsed:.1f} s ({RUNS} runs); "
                      + ", ".join(f"{k} {n}" for k, n in sorted(stats.items()) if k != "examples"
                                  and not k.startswith("hostile:")))
                print("  hostile create bodies (kind:status or kind:field_named n): "
                      + ", ".join(f"{k[8:]} {n}" for k, n in sorted(stats.items()) if k.startswith("hostile:")))
                print(f"  RSS MiB: before {round(rss[0] / 2**20, 1)}; peak per run {mib}; "
                      f"after each run {[round(x / 2**20, 1) for x in rss[1:]]}")
        assert stats["examples"] >= MIN_EXAMPLES

        for path in ("/healthz", "/readyz", "/v1/live"):
            r = await client.get(path)
            assert r.status_code == 200, (path, r.text)
        await client.aclose()
        assert harness.runtime.ready
        # Every kind of answer was exercised, refusals and creations alike.
        assert stats["created"] > 0 and stats["4xx"] > stats["created"], stats
        assert all(any(k.startswith(f"hostile:{kind}:") for k in stats) for kind in [*HOSTILE_KINDS, "bad_key"]), stats
        # Item 7: a second identical run does not raise the peak by more than 10%.
        assert peaks[1] <= peaks[0] * (1 + PEAK_GROWTH), mib
